"""The replay: the intervention engine's accelerator, a hook-free re-implementation of TransformerLens's
forward pass that resumes at any patched activation.

The engine (`mechmem.analysis.interventions.Engine`) is the one interface: it sends here the variants that
replace one activation of a model the replay supports (`replay_unsupported` is None), and runs everything else
through TransformerLens hooks (`interventions.hooked`). Both give the same numbers; the replay is faster
(docs/patching.md, "What the replay buys and costs").

Modules: `forward` (`Replay`: the cached run and the resumed passes), `attention` (the attention arithmetic
for many patches at once), `cells` (patching cells kept as base, source and index), `schedule` (where passes
resume and which cells share one), `support` (which models it runs, and the TransformerLens internals it
reads).
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
