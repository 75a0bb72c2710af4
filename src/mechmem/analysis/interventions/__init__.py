"""The intervention engine: one batched run of many interventions (zero, mean, resample, from-run,
any function), by its hook-free replay or by hooks, the patching metric it evaluates, and its naive reference.
"""

from mechmem.analysis.interventions.engine import Engine, Variant, intervene, intervened_logits
from mechmem.analysis.interventions.hooked import activation_grads, capture_acts, setter_values
from mechmem.analysis.interventions.spec import (
    KINDS,
    Intervention,
    Setter,
    apply,
    as_lists,
    from_run,
    mean,
    resample,
    zero,
)

__all__ = [
    "KINDS",
    "Engine",
    "Intervention",
    "Setter",
    "Variant",
    "activation_grads",
    "apply",
    "as_lists",
    "capture_acts",
    "from_run",
    "intervene",
    "intervened_logits",
    "mean",
    "resample",
    "setter_values",
    "zero",
]
