"""Activation patching: exact sweeps on the intervention engine, their tables, attribution patching
(AtP*) with its query/key fix, and TransformerLens's own functions as the reference.
"""

from mechmem.analysis.patching.attribution import (
    CHECK_CELLS,
    DEFAULT_STEPS,
    TRUST,
    Attributor,
    agreement,
    attribute_sweeps,
    judge,
    sample_cells,
)
from mechmem.analysis.patching.decided import DecidedPatching, decided_patching
from mechmem.analysis.patching.result import (
    DIRECTIONS,
    SWEEPS,
    PatchingResult,
    PatchSweep,
    SweepIntervals,
    plot_patching,
    sweep_intervals,
)
from mechmem.analysis.patching.sweeps import (
    Patcher,
    PatchingMetric,
    model_sweeps,
    resolve_metric,
    run_sweeps,
)
from mechmem.analysis.patching.tables import (
    METHODS,
    METRIC_DESCRIPTION,
    attribution_notes,
    cell_texts,
    interval_lines,
    largest_effects,
    patch_checkpoint,
    patching_lines,
    patching_record,
    sweep_record,
)

__all__ = [
    "CHECK_CELLS",
    "DEFAULT_STEPS",
    "DIRECTIONS",
    "METHODS",
    "METRIC_DESCRIPTION",
    "SWEEPS",
    "TRUST",
    "Attributor",
    "DecidedPatching",
    "PatchSweep",
    "Patcher",
    "PatchingMetric",
    "PatchingResult",
    "SweepIntervals",
    "agreement",
    "attribute_sweeps",
    "attribution_notes",
    "cell_texts",
    "decided_patching",
    "interval_lines",
    "judge",
    "largest_effects",
    "model_sweeps",
    "patch_checkpoint",
    "patching_lines",
    "patching_record",
    "plot_patching",
    "resolve_metric",
    "run_sweeps",
    "sample_cells",
    "sweep_intervals",
    "sweep_record",
]
