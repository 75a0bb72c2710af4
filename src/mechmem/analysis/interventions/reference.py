"""The intervention engine's reference: one full `run_with_hooks` per variant, written without the engine.

It shares only `Intervention` and its setters with the engine, so a mistake in the engine's batching,
caching or replay cannot hide in both.
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.analysis.interventions.metric import PatchingMetric
from mechmem.analysis.interventions.spec import Intervention, Variant, as_lists
from mechmem.models.parts import model_device

FLAG_OF_HOOK = {"hook_mlp_in": "use_hook_mlp_in", "hook_attn_in": "use_attn_in"}
FLAG_OF_HOOK |= {"attn.hook_result": "use_attn_result"}
FLAG_OF_HOOK |= {f"hook_{x}_input": "use_split_qkv_input" for x in "qkv"}
"""TransformerLens's on-request hooks (by name suffix) and the config flag that switches each on."""


@contextlib.contextmanager
def hook_flags(model: torch.nn.Module, hooks: set[str]) -> Iterator[None]:
    """Switch on the TransformerLens flags `hooks` need (`FLAG_OF_HOOK`); restore them afterwards."""
    flags = sorted({flag for h in hooks for suffix, flag in FLAG_OF_HOOK.items() if h.endswith(suffix)})
    old = {flag: getattr(model.cfg, flag) for flag in flags}
    try:
        for flag in flags:
            getattr(model, f"set_{flag}")(True)
        yield
    finally:
        for flag, value in old.items():
            getattr(model, f"set_{flag}")(value)


def metric_of_logits(metric: Any, logits: Tensor) -> Tensor:
    """The metric of one variant's full logits [batch pos d_vocab]; a `PatchingMetric` reads its positions."""
    if not isinstance(metric, PatchingMetric):
        return torch.as_tensor(metric(logits))
    rows = torch.arange(logits.shape[0], device=logits.device)[:, None]
    at_readout = logits[rows, metric.readout.to(logits.device)]  # [batch read d_vocab]
    return torch.as_tensor(metric.fn(at_readout[None])[0])


def _hook(iv: Intervention, value: Tensor | None) -> Callable[[Tensor, Any], Tensor]:
    def hook_fn(act: Tensor, hook: Any) -> Tensor:
        act = act.clone()
        iv.set(act, value, hook)
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
    hooks = {iv.hook for variant in variants for iv in variant}
    if unknown := sorted(hooks - set(model.hook_dict)):
        raise ValueError(f"unknown hook(s) {', '.join(unknown)}")
    device = model_device(model)
    tokens = tokens.to(device)
    out = []
    with hook_flags(model, hooks):
        for variant in variants:
            fwd = []
            for iv in variant:
                value = None
                if iv.setter.tokens is not None:
                    _, cache = model.run_with_cache(iv.setter.tokens.to(device), names_filter=iv.hook)
                    value = iv.setter.source(cache[iv.hook], tokens.shape[0])
                fwd.append((iv.hook, _hook(iv, value)))
            out.append(metric_of_logits(metric, model.run_with_hooks(tokens, fwd_hooks=fwd)))
    return torch.stack(out).detach().cpu() if out else torch.zeros(0)
