"""What an intervention is: an activation (a TransformerLens hook name), a slice of it, and a setter.

The setters (`zero`, `mean`, `resample`, `from_run`, `apply`) say where the new values come from; a
*variant* is one intervention or a list applied together. `mechmem.analysis.interventions` runs them and
re-exports these names.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.errors import BadArgument, BadArgumentType
from mechmem.models.checks import check_callable, check_generator, check_tokens, kind_of

KINDS = ("zero", "mean", "resample", "from_run", "apply")


@dataclass(eq=False)
class Setter:
    """How an intervention sets its slice; built by `zero`, `mean`, `resample`, `from_run` or `apply`."""

    kind: str
    """One of `KINDS`."""
    tokens: Tensor | None = None
    """The inputs whose activations the setter reads (mean, resample, from_run), else None."""
    fn: Callable[[Tensor, Any], Tensor] | None = None
    """For "apply": fn(act_slice, hook) -> new values."""
    generator: torch.Generator | None = None
    """For "resample": draws which reference sequence each input gets (once per batch size)."""
    _draws: dict[int, Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown setter {self.kind!r} ({', '.join(KINDS)})")

    def source(self, ref: Tensor, batch: int) -> Tensor:
        """Replacement values for the whole activation, [batch or 1, *act], from the reference activation."""
        if self.kind == "mean":
            return ref.mean(0, keepdim=True)
        if self.kind == "resample":
            return ref[self.draw(batch, ref.shape[0]).to(ref.device)]
        if ref.shape[0] not in (1, batch):
            raise ValueError(f"from_run: the source run has {ref.shape[0]} sequences, the inputs {batch}")
        return ref

    def draw(self, batch: int, n_ref: int) -> Int[Tensor, " batch"]:
        """Reference sequence of each input: (i + offset_i) mod n_ref, offset_i uniform in 1..n_ref-1 (with
        the inputs as reference, every sequence gets another one). Drawn once per batch size."""
        if batch not in self._draws:
            offset = torch.randint(1, n_ref, (batch,), generator=self.generator) if n_ref > 1 else 0
            self._draws[batch] = (torch.arange(batch) + offset) % n_ref
        return self._draws[batch]


def zero() -> Setter:
    """Set the slice to zero.

    Example:
        >>> import mechmem
        >>> mechmem.zero().kind
        'zero'
    """
    return Setter("zero")


def mean(reference_tokens: Int[Tensor, "ref pos"]) -> Setter:
    """Set the slice to its mean over the reference sequences, at each position separately (mean ablation).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> loss = lambda logits: task.loss(logits, batch)    # the task's next-token loss
        >>> reference = task.eval_batch(64, generator=torch.Generator().manual_seed(1)).tokens
        >>> head_1_1 = (slice(None), 1)
        >>> iv = mechmem.Intervention("blocks.1.attn.hook_z", head_1_1, mechmem.mean(reference))
        >>> bool(mechmem.intervene(model, batch.tokens, [iv], loss)[0] > 0.1)
        True
    """
    return Setter("mean", tokens=check_tokens(None, reference_tokens, "mean's reference_tokens"))


def resample(reference_tokens: Int[Tensor, "ref pos"], generator: torch.Generator | None = None) -> Setter:
    """Set the slice to its value on another reference sequence (drawn once; default seed 0).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> loss = lambda logits: task.loss(logits, batch)    # the task's next-token loss
        >>> setter = mechmem.resample(batch.tokens, torch.Generator().manual_seed(0))
        >>> iv = mechmem.Intervention("blocks.1.attn.hook_z", (slice(None), 1), setter)
        >>> bool(mechmem.intervene(model, batch.tokens, [iv], loss)[0] > 0.1)
        True
    """
    tokens = check_tokens(None, reference_tokens, "resample's reference_tokens")
    gen = check_generator(generator) or torch.Generator().manual_seed(0)
    return Setter("resample", tokens=tokens, generator=gen)


def from_run(source_tokens: Int[Tensor, "batch pos"]) -> Setter:
    """Set the slice to its value in the run on `source_tokens` (same sequence index): activation patching.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> clean_head = mechmem.Intervention("blocks.1.attn.hook_z", (slice(None), 1),
        ...                                   mechmem.from_run(pair.clean))
        >>> restored = mechmem.intervene(model, pair.corrupted, [[], clean_head], pair.logit_diff)
        >>> bool(restored[1] > restored[0])          # the clean head's output restores the answer
        True
    """
    return Setter("from_run", tokens=check_tokens(None, source_tokens, "from_run's source_tokens"))


def apply(fn: Callable[[Tensor, Any], Tensor]) -> Setter:
    """Set the slice to `fn(act_slice, hook)`, act_slice being the current values [batch, *sliced axes].

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> loss = lambda logits: task.loss(logits, batch)    # the task's next-token loss
        >>> halve = mechmem.apply(lambda act, hook: act / 2)
        >>> iv = mechmem.Intervention("blocks.1.attn.hook_z", (slice(None), 1), halve)
        >>> [round(float(x), 3) >= 0 for x in mechmem.intervene(model, batch.tokens, [[], iv], loss)]
        [True, True]
    """
    return Setter("apply", fn=check_callable("apply's fn", fn))


@dataclass(frozen=True, eq=False)
class Intervention:
    """Replace `act[:, *index]` of the activation at `hook` by the values `setter` gives.

    Example:
        >>> import mechmem
        >>> iv = mechmem.Intervention("blocks.1.attn.hook_z", (slice(None), 1), mechmem.zero())
        >>> iv.hook, iv.setter.kind
        ('blocks.1.attn.hook_z', 'zero')
    """

    hook: str
    """TransformerLens hook name, e.g. "blocks.0.attn.hook_z"."""
    index: tuple = ()
    """Indices into the axes after batch: (slice(None), 1) = head 1 of hook_z at every position."""
    setter: Setter = field(default_factory=zero)

    def __post_init__(self) -> None:
        if not isinstance(self.hook, str):
            raise BadArgumentType(
                f"an Intervention's hook must be a hook name (str), got {kind_of(self.hook)}"
            )
        if not isinstance(self.index, tuple):
            raise BadArgumentType(
                "an Intervention's index must be a tuple over the axes after the batch, e.g. "
                f"(slice(None), 1); got {kind_of(self.index)} {self.index!r}"
            )
        if not isinstance(self.setter, Setter):
            raise BadArgumentType(
                f"an Intervention's setter must come from zero(), mean(), resample(), from_run() or apply(); "
                f"got {kind_of(self.setter)}"
            )

    def set(self, act: Tensor, source: Tensor | None, hook: Any) -> None:
        """Write the new values into `act` [batch, ...] in place (`source`: the setter's full values)."""
        idx = (slice(None), *self.index)
        try:
            current = act[idx]
        except IndexError:
            raise BadArgument(
                f"index {self.index} does not fit the activation at {self.hook}, of shape "
                f"{tuple(act.shape[1:])} after the batch axis"
            ) from None
        kind = self.setter.kind
        if kind == "zero":
            act[idx] = 0.0
        elif kind == "apply":
            act[idx] = self.setter.fn(current, hook)
        else:
            self.check_source(source, act)
            act[idx] = source.expand_as(act)[idx].to(act.dtype)

    def check_source(self, source: Tensor, act: Tensor) -> None:
        """One-line error when the setter's values do not fit the activation (after the batch axis)."""
        if tuple(source.shape[1:]) != tuple(act.shape[1:]):
            raise ValueError(
                f"{self.setter.kind} values at {self.hook} have shape {tuple(source.shape[1:])} after the "
                f"batch axis, the activation {tuple(act.shape[1:])} (reference inputs of another length?)"
            )


Variant = Intervention | Sequence[Intervention]


def as_lists(variants: Sequence[Variant]) -> list[list[Intervention]]:
    """Every variant as a list of interventions; `BadArgumentType` for anything else."""
    if isinstance(variants, (Intervention, str)) or not isinstance(variants, Sequence):
        raise BadArgumentType(
            f"variants must be a list of variants (each an Intervention or a list of them), got "
            f"{kind_of(variants)}; for one intervention pass [intervention]"
        )
    out = [[v] if isinstance(v, Intervention) else v for v in variants]
    for variant in out:
        if isinstance(variant, str) or not isinstance(variant, Sequence):
            raise BadArgumentType(
                f"variants: each must be an Intervention or a list of them, got {kind_of(variant)}"
            )
        if bad := [kind_of(iv) for iv in variant if not isinstance(iv, Intervention)]:
            raise BadArgumentType(f"variants: a variant holds a {bad[0]}, not an Intervention")
    return [list(v) for v in out]
