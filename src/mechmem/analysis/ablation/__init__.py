"""Ablation of heads and layers on the intervention engine, exact or estimated from one gradient pass."""

from mechmem.analysis.ablation.attribution import (
    CHECK_VARIANTS,
    ESTIMATE_NAME,
    EXACT_ABLATION_VARIANTS,
    ExactSample,
    SequenceProducts,
    attribute_ablation,
    exact_sample,
    sequence_products,
)
from mechmem.analysis.ablation.decided import decided_ablation, decision_line
from mechmem.analysis.ablation.exact import (
    METHODS,
    SequenceMetric,
    ablate_heads,
    ablate_layer_components,
    ablation_values,
    method_setter,
    n_variants,
    naive_head_ablation,
    sequence_losses,
    task_metric,
    variant_names,
)
from mechmem.analysis.ablation.result import (
    AblationIntervals,
    AblationResult,
    SequenceChanges,
    delta_intervals,
    plot_ablation,
)

__all__ = [
    "CHECK_VARIANTS",
    "ESTIMATE_NAME",
    "EXACT_ABLATION_VARIANTS",
    "METHODS",
    "AblationIntervals",
    "AblationResult",
    "ExactSample",
    "SequenceChanges",
    "SequenceMetric",
    "SequenceProducts",
    "ablate_heads",
    "ablate_layer_components",
    "ablation_values",
    "attribute_ablation",
    "decided_ablation",
    "decision_line",
    "delta_intervals",
    "exact_sample",
    "method_setter",
    "n_variants",
    "naive_head_ablation",
    "plot_ablation",
    "sequence_losses",
    "sequence_products",
    "task_metric",
    "variant_names",
]
