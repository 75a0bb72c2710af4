"""Head and layer ablation estimated by attribution, for models too large to ablate every component exactly.

On large models the L x (H + 2) ablations of `analysis.ablation`, each resumed at its layer, cost ~L^2 passes.
`attribute_ablation` estimates them all from one forward and one backward pass instead (attribution, as
`analysis.patching.attribution` does for patching: the metric's change ~ (ablated - clean activation) x
d metric / d activation), re-computes a fixed sample of them exactly, measures the agreement
(`attribution.judge`) and falls back to exact ablation when it fails.

Caveat: first order; an ablation that moves the loss along a curved direction (a saturated softmax, a
LayerNorm far from linear) is misestimated, which the exact sample is there to catch.
"""

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.analysis.ablation.exact import (
    Metric,
    ablate_heads,
    ablated_hooks,
    component_hooks,
    layer_variants,
    method_setter,
    reference_tokens,
    variant_names,
)
from mechmem.analysis.ablation.result import AblationResult
from mechmem.analysis.interventions import Engine, Setter, setter_values
from mechmem.analysis.patching.attribution import TRUST, judge, sample_cells

EXACT_ABLATION_VARIANTS = 32
"""Above this many variants (`ablation.n_variants`: layers x (heads + attention layer + MLP)), the report's
ablation section estimates them by attribution (`attribute_ablation`); at or below it, every variant is exact.
Fixed before any measurement (docs/report.md, "Rules written before the run")."""
CHECK_VARIANTS = 16
"""Variants `attribute_ablation` re-computes exactly: the half it ranks highest by |delta| and the others
drawn with seed 0 (`attribution.sample_cells`)."""
ESTIMATE_NAME = "first-order attribution (gradient x delta)"


def _per_layer(model: torch.nn.Module, flat: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    """(heads [1 layer head], attn [1 layer], mlp [1 layer] or None) from values in `layer_variants`
    order."""
    cfg = model.cfg
    per_layer = flat.reshape(1, cfg.n_layers, -1)
    mlp = None if cfg.attn_only else per_layer[..., cfg.n_heads + 1].float()
    return per_layer[..., : cfg.n_heads].float(), per_layer[..., cfg.n_heads].float(), mlp


def estimated_deltas(
    model: torch.nn.Module, engine: Engine, tokens: Tensor, values: dict[str, Tensor]
) -> tuple[float, Tensor]:
    """(the metric, every ablation's estimated change in `layer_variants` order, float64).

    One forward and one backward pass (`Engine.gradients`) give the metric's gradient at every `hook_z` and
    `hook_mlp_out`; a variant's estimated change is the sum over its entries of (replacement - clean value) x
    gradient (an attention layer: the sum of its heads)."""
    with torch.enable_grad():  # callers (the report) may run under no_grad
        value, acts, grads = engine.gradients(tokens, stages=("z", "mlp_out"))  # only what the estimate reads
    estimate = []
    for layer in range(model.cfg.n_layers):
        z, mlp = component_hooks(model, layer)
        heads = ((values[z] - acts["z"][layer]) * grads["z"][layer]).sum((0, 1, 3))
        estimate += [*heads.tolist(), float(heads.sum())]
        if mlp:
            estimate.append(float(((values[mlp] - acts["mlp_out"][layer]) * grads["mlp_out"][layer]).sum()))
    return value, torch.tensor(estimate, dtype=torch.float64)


def exact_sample(
    model: torch.nn.Module, engine: Engine, tokens: Tensor, setter: Setter, chosen: list[int]
) -> tuple[float, Tensor]:
    """(the unablated metric, the exact metric after each ablation `chosen`), in one engine call."""
    variants = [
        v for layer in range(model.cfg.n_layers) for v in layer_variants(model, layer, lambda h, i: setter)
    ]
    exact = torch.stack(engine.run(tokens, [[]] + [variants[i] for i in chosen])).detach().cpu().double()
    return float(exact[0]), exact[1:]


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
) -> AblationResult:
    """`ablate_heads` for one method, estimated by attribution (`estimated_deltas`); `check` variants
    re-computed exactly.

    The `check` variants of `attribution.sample_cells` are run exactly in one engine call; their exact values
    replace the estimates, and the agreement of estimated with exact deltas on them (`attribution.judge`, rule
    `attribution.TRUST`) is stored in `info["check"]`. With `fallback`, an estimate that fails it is replaced
    by `ablate_heads` (every variant exact; `info["method"]` says so).
    """
    reference = reference_tokens(tokens, reference)
    setter = method_setter(method, reference, generator)
    values = setter_values(model, tokens, setter, ablated_hooks(model))
    engine = Engine(model, metric)
    value, effects = estimated_deltas(model, engine, tokens, values)
    chosen = sample_cells(effects, check).tolist()
    baseline, exact = exact_sample(model, engine, tokens, setter, chosen)
    agreement = judge(effects[chosen], exact - baseline)
    if fallback and not agreement["trusted"]:
        result = ablate_heads(
            model,
            tokens,
            metric,
            methods=(method,),
            reference=reference,
            generator=generator,
            metric_name=metric_name,
        )
        result.info = {
            "method": f"exact (fallback: {ESTIMATE_NAME} agreed at Pearson {agreement['pearson']:.2f} < "
            f"{TRUST['pearson']} on {agreement['cells']} variants)",
            "check": agreement,
        }
        return result
    flat = baseline + effects
    flat[chosen] = exact
    heads, attn, mlp = _per_layer(model, flat)
    names = variant_names(model)
    info = {
        "method": f"{ESTIMATE_NAME} of all {len(flat)} ablations, exact on {len(chosen)} of them",
        "check": agreement,
        "exact_variants": [names[i] for i in chosen],
        "gradient_metric": value,
    }
    return AblationResult(metric_name, baseline, (method,), heads, attn, mlp, info=info)
