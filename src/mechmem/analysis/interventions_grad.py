"""Gradients through the intervention engine: d metric / d activation at any hooks, for attribution methods.

`activation_grads` runs the engine (`mechmem.analysis.interventions`) once with an `apply` setter at each named
hook that adds a zero leaf tensor to the activation (the gradient at that leaf is the gradient at the activation,
and the graph upstream stays intact), then differentiates the metric.
The gradient at a hook is the total derivative of the metric through everything downstream of that hook point;
on-request hooks (`hook_q_input`, `hook_mlp_in`, `attn.hook_result`, ...) get their TransformerLens flags switched
on for the call by the engine, as for any intervention. It lives beside the engine (which stays under 400 lines)
and uses its private runner, so both share one forward path.
"""

from collections.abc import Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.analysis.interventions import Intervention, Metric, _run, apply


def activation_grads(
    model: torch.nn.Module, tokens: Int[Tensor, "batch pos"], hooks: Sequence[str], metric: Metric
) -> tuple[Tensor, dict[str, Tensor]]:
    """The metric (a scalar) on `tokens` and its gradient with respect to each hook's whole activation.

    One forward and one backward pass. Returns (metric value, {hook: gradient shaped like the activation}); a hook
    the metric does not depend on gets zeros.
    """
    leaves: dict[str, Tensor] = {}

    def capture(act: Tensor, hook: Any) -> Tensor:
        leaves[hook.name] = torch.zeros_like(act, requires_grad=True)
        return act + leaves[hook.name]

    variant = [Intervention(h, (), apply(capture)) for h in hooks]
    with torch.enable_grad():
        value = _run(model, tokens, [variant], metric, 1.0, False)[0]
        grads = torch.autograd.grad(
            value, [leaves[h] for h in hooks], allow_unused=True, materialize_grads=True
        )
    return value.detach(), {h: g.detach() for h, g in zip(hooks, grads)}


__all__ = ["activation_grads"]
