"""mechmem: tiny transformers trained on synthetic memory tasks, taken apart with TransformerLens hooks.

The public API is `mechmem.__all__`, imported on first use (`import mechmem` imports no torch).

    >>> import mechmem
    >>> model = mechmem.planted_induction_model()          # a hand-set previous-token + induction circuit
    >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    >>> roles = mechmem.head_roles(model, task, n=64)
    >>> sorted(h.name for h in roles.heads if h.role != "none")
    ['L0H2', 'L1H1']

The command line is `mechmem` (`mechmem --help`).
"""

from typing import TYPE_CHECKING, Any

from mechmem.errors import CheckpointError, MechmemError
from mechmem.version import __version__

HOMES = {
    name: module
    for module, names in {
        "mechmem.checkpoint": "Checkpoint load_checkpoint save_checkpoint save_model",
        "mechmem.training.run": "train_preset",
        "mechmem.tasks.registry": "build_task task_names register_task",
        "mechmem.analysis.interventions": "intervene Intervention zero mean resample from_run apply",
        "mechmem.analysis.patching": "run_sweeps attribute_sweeps decided_patching PatchingResult",
        "mechmem.analysis.ablation": "ablate_heads decided_ablation",
        "mechmem.analysis.heads": "detect_heads",
        "mechmem.analysis.composition": "composition_scores",
        "mechmem.analysis.logit_lens": "logit_lens",
        "mechmem.analysis.probes": "builtin_probes",
        "mechmem.analysis.qk": "qk_attribution",
        "mechmem.analysis.roles": "head_roles",
        "mechmem.analysis.circuits": "circuit_prompts discover_circuit decided_circuit",
        "mechmem.analysis.sequential": "decide",
        "mechmem.analysis.dynamics": "run_dynamics",
        "mechmem.analysis.distribution": "prompt_fit",
        "mechmem.report": "build_report",
        "mechmem.report.checkpoint_report": "report_checkpoint",
        "mechmem.report.plots": "plot",
        "mechmem.analysis.planted": "planted_induction_model",
    }.items()
    for name in names.split()
}
"""Each public name that is imported on first use, and the module it lives in."""

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "Intervention",
    "MechmemError",
    "PatchingResult",
    "__version__",
    "ablate_heads",
    "apply",
    "attribute_sweeps",
    "build_report",
    "build_task",
    "builtin_probes",
    "circuit_prompts",
    "composition_scores",
    "decide",
    "decided_ablation",
    "decided_circuit",
    "decided_patching",
    "detect_heads",
    "discover_circuit",
    "from_run",
    "head_roles",
    "intervene",
    "load_checkpoint",
    "logit_lens",
    "mean",
    "planted_induction_model",
    "plot",
    "prompt_fit",
    "qk_attribution",
    "register_task",
    "report_checkpoint",
    "resample",
    "run_dynamics",
    "run_sweeps",
    "save_checkpoint",
    "save_model",
    "task_names",
    "train_preset",
    "zero",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its home module on first use (PEP 562), so `import mechmem` stays light."""
    home = HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mechmem' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *HOMES})


if TYPE_CHECKING:  # the names as static imports, for type checkers and editors
    from mechmem.analysis.ablation import ablate_heads, decided_ablation
    from mechmem.analysis.circuits import circuit_prompts, decided_circuit, discover_circuit
    from mechmem.analysis.composition import composition_scores
    from mechmem.analysis.distribution import prompt_fit
    from mechmem.analysis.dynamics import run_dynamics
    from mechmem.analysis.heads import detect_heads
    from mechmem.analysis.interventions import Intervention, apply, from_run, intervene, mean, resample, zero
    from mechmem.analysis.logit_lens import logit_lens
    from mechmem.analysis.patching import PatchingResult, attribute_sweeps, decided_patching, run_sweeps
    from mechmem.analysis.planted import planted_induction_model
    from mechmem.analysis.probes import builtin_probes
    from mechmem.analysis.qk import qk_attribution
    from mechmem.analysis.roles import head_roles
    from mechmem.analysis.sequential import decide
    from mechmem.checkpoint import Checkpoint, load_checkpoint, save_checkpoint, save_model
    from mechmem.report import build_report
    from mechmem.report.checkpoint_report import report_checkpoint
    from mechmem.report.plots import plot
    from mechmem.tasks.registry import build_task, register_task, task_names
    from mechmem.training.run import train_preset
