"""Interventions during training: activations set in the training forward pass, gradients through the rest.

Singh et al. (ICML 2024, "What needs to go right for an induction head?") clamp chosen activations throughout
training to see which parts of a circuit learning needs. Here each `TrainIntervention` (mechmem.config) is a
TransformerLens forward hook returning new values out of place: zero, or the batch mean (per position,
detached, so the set slice is a constant for the gradient and whatever feeds only it gets no gradient), or a
library function. The hooks live only inside `model.hooks(...)`, held across the steps before
`TrainConfig.intervene_until` and taken off for every checkpoint; evaluations at those steps run under them
too (the model as it trains).

The training layer parses spec strings itself rather than taking the analysis engine's `Intervention`
objects: those carry arbitrary index tuples and setters whose values come from a reference run (mean,
resample, from_run), which would mean a second forward pass per step and has no spec string for the
checkpoint's config to record.

A parameter whose every path to the loss runs through a wholly replaced activation gets no gradient (None),
so the optimiser skips it, weight decay included, as in a hand-written loop returning a new tensor from the
hook; a head's or an index's slice is replaced inside a copy, so its weights get a zero gradient (a head's
W_O shares one tensor with the other heads) and weight decay still applies to them.

Caveat: "mean" is over the current training batch, so it moves with the model and the data drawn; a mean over
a fixed reference batch would cost a second forward pass every step.
"""

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.config import TrainConfig, TrainIntervention
from mechmem.errors import MechmemError

Hook = tuple[str, Callable[[Tensor, Any], Tensor]]
"""A TransformerLens forward hook: (hook name, fn(act, hook) -> act)."""


def training_interventions(
    cfg: TrainConfig, given: Sequence[str | TrainIntervention] = ()
) -> list[TrainIntervention]:
    """The interventions `cfg.interventions` names, each "fn:NAME" one with its function from `given`."""
    functions = {str(iv): iv for iv in given if isinstance(iv, TrainIntervention) and iv.fn is not None}
    out = []
    for spec in cfg.interventions:
        iv = functions.get(spec) or TrainIntervention.parse(spec)
        if iv.op.startswith("fn:") and iv.fn is None:
            raise MechmemError(
                f"intervention {spec} names a function; pass it in interventions= "
                "(TrainIntervention.function(hook, fn))"
            )
        out.append(iv)
    return out


def hook_function(iv: TrainIntervention) -> Callable[[Tensor, Any], Tensor]:
    """The forward hook that sets `iv`'s slice: act [batch, ...] -> new values, out of place."""
    if iv.fn is not None:
        return iv.fn
    if iv.head is None and iv.index is None:  # a new tensor: no backward pass through what it replaces

        def set_all(act: Tensor, hook: Any) -> Tensor:
            if iv.op == "zero":
                return torch.zeros_like(act)
            return act.mean(0, keepdim=True).detach().expand_as(act).contiguous()

        return set_all
    where = (slice(None), slice(None), iv.head) if iv.head is not None else (..., iv.index)

    def set_slice(act: Tensor, hook: Any) -> Tensor:
        out = act.clone()
        out[where] = 0.0 if iv.op == "zero" else act[where].mean(0, keepdim=True).detach()
        return out

    return set_slice


def intervention_hooks(interventions: Sequence[TrainIntervention]) -> list[Hook]:
    """The forward hooks of `interventions`, in order (two on one hook compose)."""
    return [(iv.hook, hook_function(iv)) for iv in interventions]


def check_interventions(
    model: torch.nn.Module, interventions: Sequence[TrainIntervention], tokens: Int[Tensor, "batch pos"]
) -> None:
    """Refuse, in one line, an intervention the model cannot take: an unknown hook, a head or index out of
    range, a hook its forward pass never runs. One forward pass on `tokens` (no gradient) reads the shapes."""
    hooks = getattr(model, "hook_dict", None)
    if hooks is None and interventions:
        raise MechmemError(f"interventions need a TransformerLens model, not a {type(model).__name__}")
    shapes: dict[str, tuple[int, ...]] = {}
    for iv in interventions:
        if iv.hook not in hooks:
            near = [h for h in hooks if h.rsplit(".", 1)[-1] == iv.hook.rsplit(".", 1)[-1]][:2]
            raise MechmemError(
                f"intervention {iv}: the model has no hook {iv.hook!r}"
                + (f" (e.g. {', '.join(near)})" if near else "")
            )
        if iv.head is not None and not iv.head < model.cfg.n_heads:
            raise MechmemError(
                f"intervention {iv}: head {iv.head} is out of range "
                f"(the model has heads 0..{model.cfg.n_heads - 1})"
            )

    def recorder(name: str) -> Callable[[Tensor, Any], None]:
        def record(act: Tensor, hook: Any) -> None:  # keyed by the name asked for (a bridge resolves aliases)
            shapes[name] = tuple(act.shape)

        return record

    with torch.no_grad(), model.hooks(fwd_hooks=[(iv.hook, recorder(iv.hook)) for iv in interventions]):
        model(tokens)
    for iv in interventions:
        if iv.hook not in shapes:
            raise MechmemError(f"intervention {iv}: hook {iv.hook} does not run in this model's forward pass")
        if iv.index is not None and not iv.index < shapes[iv.hook][-1]:
            raise MechmemError(
                f"intervention {iv}: index {iv.index} is outside the {shapes[iv.hook][-1]} entries of "
                f"{iv.hook}'s last axis"
            )


class HeldHooks:
    """Keeps `hooks` on `model`, inside one `model.hooks(...)` context, while `hold(True)`: a run enters the
    context once per stretch of intervened steps between checkpoints, not once a step. Used as a context
    manager; on leaving it (an error included) no hook is left."""

    def __init__(self, model: torch.nn.Module, hooks: list[Hook]) -> None:
        self.model, self.hooks, self.stack, self.held = model, hooks, ExitStack(), False

    def hold(self, on: bool) -> None:
        """Put the hooks on (`on`, when there are any) or take them off."""
        if on and self.hooks and not self.held:
            self.stack.enter_context(self.model.hooks(fwd_hooks=self.hooks))
            self.held = True
        elif not on and self.held:
            self.stack.close()
            self.held = False

    def __enter__(self) -> "HeldHooks":  # noqa: PYI034 - beartype refuses typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.hold(False)


def describe(cfg: TrainConfig | Mapping[str, Any]) -> str | None:
    """One line naming the interventions a run trained under, None for a plain run; `cfg` is a `TrainConfig`
    or a checkpoint's train config dict (older ones, without the fields, are plain runs).

    Example:
        >>> from mechmem.training.interventions import describe
        >>> from mechmem.config import TrainConfig
        >>> describe(TrainConfig(steps=50, interventions=("L0H1=zero",), intervene_until=10))
        'L0H1=zero before step 10'
    """
    fields = cfg if isinstance(cfg, Mapping) else vars(cfg)
    specs, until, steps = (fields.get(k) for k in ("interventions", "intervene_until", "steps"))
    if not specs:
        return None
    when = "for the whole run" if until is None or steps is None or until >= steps else f"before step {until}"
    return f"{', '.join(specs)} {when}"
