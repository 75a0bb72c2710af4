"""Ablation of heads and layers on the intervention engine, exact or estimated from one gradient pass."""

from mechmem.analysis.ablation.attribution import (
    CHECK_VARIANTS,
    ESTIMATE_NAME,
    EXACT_ABLATION_VARIANTS,
    attribute_ablation,
    estimated_deltas,
    exact_sample,
)
from mechmem.analysis.ablation.exact import (
    METHODS,
    AblationResult,
    ablate_heads,
    ablate_layer_components,
    ablation_values,
    method_setter,
    n_variants,
    naive_head_ablation,
    plot_ablation,
    task_metric,
    variant_names,
)

__all__ = [
    "CHECK_VARIANTS",
    "ESTIMATE_NAME",
    "EXACT_ABLATION_VARIANTS",
    "METHODS",
    "AblationResult",
    "ablate_heads",
    "ablate_layer_components",
    "ablation_values",
    "attribute_ablation",
    "estimated_deltas",
    "exact_sample",
    "method_setter",
    "n_variants",
    "naive_head_ablation",
    "plot_ablation",
    "task_metric",
    "variant_names",
]
