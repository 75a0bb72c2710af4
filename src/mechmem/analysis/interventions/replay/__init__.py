"""The replay: the intervention engine's accelerator, a hook-free re-implementation of TransformerLens's
forward pass that resumes at any patched activation (docs/patching.md, "What the replay buys and costs").

Modules: `forward` (`Replay`), `attention` (attention for many patches at once), `cells` (patching cells
as base, source and index), `schedule` (where passes resume), `support` (which models it runs).
"""

from mechmem.analysis.interventions.replay.forward import (
    STAGE_AXES,
    STAGE_HOOKS,
    STAGES,
    Replay,
    RunActs,
    model_stages,
    stage_of,
    take_pos,
    truncate,
)
from mechmem.analysis.interventions.replay.support import replay_unsupported

__all__ = [
    "STAGES",
    "STAGE_AXES",
    "STAGE_HOOKS",
    "Replay",
    "RunActs",
    "model_stages",
    "replay_unsupported",
    "stage_of",
    "take_pos",
    "truncate",
]
