"""Head and layer ablation estimated by attribution, for models too large to ablate every component exactly.

`attribute_ablation` estimates all L x (H + 2) ablations from one forward and one backward pass (the
metric's change ~ (ablated - clean activation) x d metric / d activation), re-computes a fixed sample
exactly and falls back to exact ablation when they disagree (`attribution.judge`). For a `SequenceMetric`,
sequence i's estimated change is sum(weights) x its products, bootstrapped over sequences as exact ablation.

Caveat: first order; an ablation along a curved direction (a saturated softmax, a far-from-linear
LayerNorm) is misestimated, which the exact sample is there to catch.
"""

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.ablation.exact import (
    Metric,
    SequenceMetric,
    ablate_heads,
    ablated_hooks,
    component_hooks,
    layer_parts,
    layer_variants,
    method_setter,
    reference_tokens,
    variant_names,
)
from mechmem.analysis.ablation.result import AblationResult, SequenceChanges
from mechmem.analysis.interventions import Engine, Setter, intervene, setter_values
from mechmem.analysis.patching.attribution import TRUST, judge, sample_cells
from mechmem.analysis.stats import RESAMPLES

EXACT_ABLATION_VARIANTS = 32
"""Above this many variants (`ablation.n_variants`), the report's ablation section estimates them by
attribution (docs/report.md, "Rules written before the run")."""
CHECK_VARIANTS = 16
"""Variants `attribute_ablation` re-computes exactly (`attribution.sample_cells`)."""
ESTIMATE_NAME = "first-order attribution (gradient x delta)"


@dataclass(frozen=True)
class SequenceProducts:
    """What one gradient pass gives: the metric and each sequence's estimated change under every ablation."""

    value: float
    """The unablated metric."""
    products: Float[Tensor, "sequence variant"]
    """Per sequence, in `layer_variants` order: the sum over its entries of (replacement - clean value) x
    d metric / d activation (float64)."""


def sequence_products(
    model: torch.nn.Module, engine: Engine, tokens: Tensor, values: dict[str, Tensor]
) -> SequenceProducts:
    """Every ablation's gradient x difference products per sequence, from `Engine.gradient_sums` (an
    attention layer: the sum of its heads)."""

    def products(r: slice, acts: dict[str, list[Tensor]], grads: dict[str, list[Tensor]]) -> Tensor:
        parts = []
        for layer in range(model.cfg.n_layers):
            z, mlp = component_hooks(model, layer)
            change = (values[z][r] - acts["z"][layer]) * grads["z"][layer]
            heads = change.sum((1, 3)).double()  # [batch head]
            parts += [heads, heads.sum(-1, keepdim=True)]
            if mlp:
                change = (values[mlp][r] - acts["mlp_out"][layer]) * grads["mlp_out"][layer]
                parts.append(change.sum((1, 2)).double()[:, None])
        return torch.cat(parts, -1).detach().cpu()

    with torch.enable_grad():  # callers (the report) may run under no_grad; only what the estimate reads:
        value, found = engine.gradient_sums(tokens, ("z", "mlp_out"), products)
    return SequenceProducts(value, found)


@dataclass(frozen=True)
class ExactSample:
    """Some ablations computed exactly (`exact_sample`)."""

    baseline: float
    values: Float[Tensor, " chosen"]
    """The metric after each chosen ablation (float64)."""
    changes: Float[Tensor, "sequence chosen"] | None
    """For a `SequenceMetric`: each sequence's change of the numerator under each chosen ablation; None for
    a scalar metric."""
    numerators: Float[Tensor, " sequence"] | None = None
    """For a `SequenceMetric`: each sequence's unablated numerator."""


def exact_sample(
    model: torch.nn.Module,
    engine: Engine,
    tokens: Tensor,
    setter: Setter,
    chosen: list[int],
    metric: Metric | None = None,
) -> ExactSample:
    """The unablated metric and the metric after each ablation `chosen` (one engine call)."""
    variants = [
        v for layer in range(model.cfg.n_layers) for v in layer_variants(model, layer, lambda h, i: setter)
    ]
    picked = [[]] + [variants[i] for i in chosen]
    if isinstance(metric, SequenceMetric):
        parts = intervene(model, tokens, picked, metric.parts).detach().cpu().double()  # [variant sequence]
        means = parts.sum(1) / metric.weights.double().cpu().sum().clamp_min(1e-12)
        return ExactSample(float(means[0]), means[1:], (parts[1:] - parts[0]).T, parts[0])
    exact = torch.stack(engine.run(tokens, picked)).detach().cpu().double()
    return ExactSample(float(exact[0]), exact[1:], None)


def attribute_ablation(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    metric: Metric,
    *,
    method: str = "mean",
    reference: Int[Tensor, "ref pos"] | None = None,
    generator: torch.Generator | None = None,
    metric_name: str = "metric",
    check: int = CHECK_VARIANTS,
    fallback: bool = True,
    exact_variants: list[int] | None = None,
) -> AblationResult:
    """`ablate_heads` for one method, estimated by attribution, with the `check` variants re-computed exactly.

    Their exact values replace the estimates and their agreement is stored in `info["check"]` (rule
    `attribution.TRUST`); with `fallback`, a failing estimate is replaced by `ablate_heads`.
    `exact_variants` (indices in `variant_names` order) replaces the sample (`info["exact_index"]` holds
    the indices).
    """
    reference = reference_tokens(tokens, reference)
    setter = method_setter(method, reference, generator)
    values = setter_values(model, tokens, setter, ablated_hooks(model))
    engine = Engine(model, metric)
    found = sequence_products(model, engine, tokens, values)
    effects = found.products.sum(0)
    chosen = sample_cells(effects, check).tolist() if exact_variants is None else list(exact_variants)
    sample = exact_sample(model, engine, tokens, setter, chosen, metric)
    agreement = judge(effects[chosen], sample.values - sample.baseline)
    if fallback and not agreement["trusted"]:
        shared = {"reference": reference, "generator": generator, "metric_name": metric_name}
        result = ablate_heads(model, tokens, metric, methods=(method,), **shared)
        result.info = {
            "method": f"exact (fallback: {ESTIMATE_NAME} agreed at Pearson {agreement['pearson']:.2f} < "
            f"{TRUST['pearson']} on {agreement['cells']} variants)",
            "check": agreement,
        }
        return result
    flat = sample.baseline + effects
    flat[chosen] = sample.values
    names = variant_names(model)
    info = {
        "method": f"{ESTIMATE_NAME} of all {len(flat)} ablations, exact on {len(chosen)} of them",
        "check": agreement,
        "exact_variants": [names[i] for i in chosen],
        "exact_index": chosen,
        "gradient_metric": found.value,
    }
    intervals, sequences = None, None
    if sample.changes is not None:
        weights = metric.weights.double().cpu()
        changes = found.products * weights.sum().clamp_min(1e-12)  # each sequence's estimated change
        changes[:, chosen] = sample.changes
        sequences = SequenceChanges(changes, weights, sample.numerators)
        intervals = sequences.intervals(1, model.cfg)
        info["interval"] = (
            f"95% percentile bootstrap over {len(weights)} sequences ({RESAMPLES} resamples) of each delta: "
            f"per sequence its estimated change (its gradient x difference products), exact on the "
            f"{len(chosen)} exactly computed variants"
        )
    parts = layer_parts(model, flat, 1)
    return AblationResult(metric_name, sample.baseline, (method,), *parts, info, intervals, sequences)
