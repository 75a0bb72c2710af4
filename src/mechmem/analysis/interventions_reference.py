"""The intervention engine's reference: one full `run_with_hooks` per variant, with the engine's own setters.

`interventions.intervene` (batched, replayed or stacked hooked runs) is tested against `naive_intervene`, and
the analyses' own references (`ablation.naive_head_ablation`, the circuit benchmark) call it. It shares the
engine's setter sources and on-request hook flags, so the two differ only in how the variants are run.
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.analysis.intervention_spec import Intervention, Variant, as_lists
from mechmem.analysis.interventions import _check_hooks, _device, _evaluate, _flags, _sources


def _single_hook(iv: Intervention, values: dict) -> Callable[[Tensor, Any], Tensor]:
    def hook_fn(act: Tensor, hook: Any) -> Tensor:
        act = act.clone()
        iv.set(act, values.get((id(iv.setter), iv.hook)), hook)
        return act

    return hook_fn


@torch.no_grad()
def naive_intervene(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    variants: Sequence[Variant],
    metric: Any,
) -> Tensor:
    """Reference for `intervene`: one full `run_with_hooks` per variant, same setters, same output."""
    variants = as_lists(variants)
    hooks = _check_hooks(model, variants)
    tokens = tokens.to(_device(model))
    out = []
    with _flags(model, hooks):
        values, _ = _sources(model, tokens, variants)
        for variant in variants:
            fwd = [(iv.hook, _single_hook(iv, values)) for iv in variant]
            logits = model.run_with_hooks(tokens, fwd_hooks=fwd)
            out.extend(_evaluate(metric, logits, 1))
    return torch.stack(out).detach().cpu() if out else torch.zeros(0)
