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
    reduce_cells,
    sample_cells,
)
from mechmem.analysis.patching.sweeps import (
    DIRECTIONS,
    SWEEPS,
    Patcher,
    PatchingMetric,
    PatchingResult,
    PatchSweep,
    cell_index,
    model_sweeps,
    plot_patching,
    resolve_metric,
    run_sweeps,
)
from mechmem.analysis.patching.tables import (
    METHODS,
    METRIC_DESCRIPTION,
    attribution_notes,
    largest_effects,
    patch_checkpoint,
    patching_lines,
    patching_record,
    run_method,
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
    "PatchSweep",
    "Patcher",
    "PatchingMetric",
    "PatchingResult",
    "agreement",
    "attribute_sweeps",
    "attribution_notes",
    "cell_index",
    "judge",
    "largest_effects",
    "model_sweeps",
    "patch_checkpoint",
    "patching_lines",
    "patching_record",
    "plot_patching",
    "reduce_cells",
    "resolve_metric",
    "run_method",
    "run_sweeps",
    "sample_cells",
]
