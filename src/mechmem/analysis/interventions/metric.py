"""Metrics for activation patching, in the batched form the patching engine evaluates.

`callable_metric` turns any `metric(logits [batch pos d_vocab]) -> scalar` into a `PatchingMetric`: the
positions it reads are declared (`readout=`) or found by a dependency check (non-zero gradients with respect
to the logits; without a gradient, perturbing one position at a time); the read-out logits are written into
a reused full-size tensor of the clean run's logits and mapped over the patch axis with `torch.func.vmap`, or
called once per patch (`mode="loop"`) where vmap raises or disagrees on two small inputs.

Caveat: a dependency check sees only what the probe inputs exercise; a metric that reads a position only
for some logits values should declare `readout=`.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.errors import MechmemError
from mechmem.models.checks import check_metric_value
from mechmem.tasks.base import PatchingPair


@dataclass(frozen=True)
class PatchingMetric:
    """A metric in batched form: `fn(logits at readout [patch batch read d_vocab]) -> [patch, *output]`."""

    name: str
    readout: Int[Tensor, "batch read"]
    """Positions whose logits the metric reads, per prompt."""
    fn: Callable[[Tensor], Tensor]
    """Logits at `readout`, with a leading patch axis, to the metric of each patch (a scalar or a tensor)."""
    mode: str = "batched"
    """How patches are evaluated: "batched", "vmap" or "loop" (one call each)."""

    @classmethod
    def logit_diff(cls, pair: PatchingPair) -> "PatchingMetric":
        """Mean over prompts of logit[correct] - logit[incorrect] at the answer position."""
        per_prompt = cls.logit_diff_per_prompt(pair)
        return cls("logit_diff", per_prompt.readout, lambda logits: per_prompt.fn(logits).mean(-1))

    @classmethod
    def logit_diff_per_prompt(cls, pair: PatchingPair) -> "PatchingMetric":
        """`logit_diff` before the mean: one value per prompt, [patch batch]."""
        correct, incorrect = pair.correct, pair.incorrect

        def fn(logits: Tensor) -> Tensor:
            at = logits[..., 0, :]
            idx = torch.stack([correct, incorrect], -1).to(at.device).expand(*at.shape[:-1], 2)
            good, bad = at.gather(-1, idx).unbind(-1)
            return good - bad

        return cls("logit_diff", pair.answer_pos[:, None], fn)


def _tensor(value: Any, like: Tensor) -> Tensor:
    out = torch.as_tensor(value, device=like.device)
    return out.to(like.dtype) if out.is_floating_point() else out


def per_patch(
    metric: Callable[[Tensor], Any], probe: Float[Tensor, "batch pos d_vocab"]
) -> tuple[Callable, str]:
    """(fn [patch batch pos d_vocab] -> [patch, *output of one call], "vmap" or "loop"): `metric` over a
    leading patch axis, vmapped when that agrees with one call per patch."""
    inputs = torch.stack([probe, probe.flip(0) if len(probe) > 1 else probe * 0.5])

    def loop(x: Tensor) -> Tensor:
        return torch.stack([_tensor(metric(one), x) for one in x])

    try:
        mapped = torch.func.vmap(metric)
        got, want = mapped(inputs), loop(inputs)
        if got.shape == want.shape and torch.allclose(got, want, atol=1e-6, rtol=1e-5, equal_nan=True):
            return mapped, "vmap"
    except Exception:  # noqa: BLE001 - any failure inside vmap (`.item()`, data-dependent control flow): loop
        return loop, "loop"
    return loop, "loop"


OVERWHELM = 1e4
"""The dependency check's large move, in units of the probe's spread (it decides the argmax there)."""


def find_readout(
    metric: Callable[[Tensor], Any], probe: Float[Tensor, "batch pos d_vocab"]
) -> Int[Tensor, "batch read"]:
    """The positions `metric` reads, per prompt, by a dependency check (rows padded as `pad_rows`)."""
    noise = torch.randn(probe.shape, generator=torch.Generator().manual_seed(20231)).to(probe)
    scale = probe.std().clamp_min(1.0)
    reads = torch.zeros(probe.shape[:2], dtype=torch.bool, device=probe.device)
    try:
        for x in (probe, probe + scale * noise):
            x = x.detach().clone().requires_grad_(True)
            with torch.enable_grad():
                (grad,) = torch.autograd.grad(torch.as_tensor(metric(x)).sum(), x)
            reads |= (grad != 0).any(-1)
    except (RuntimeError, TypeError):  # no gradient: perturb one position (all prompts) at a time
        fn, _ = per_patch(metric, probe)
        # A small move, then one that swamps the logits (either sign): a metric of the argmax (accuracy) does
        # not move under a small change where the model is confident, and would be taken not to read there.
        moves = (scale, OVERWHELM * scale, -OVERWHELM * scale)
        for p in range(probe.shape[1]):
            for size in moves:
                moved = probe.clone()
                moved[:, p] += size * noise[:, p]
                if bool(fn(torch.stack([probe, moved])).diff(dim=0).ne(0).any()):
                    reads[:, p] = True
                    break
    if not reads.any():
        raise MechmemError("the metric reads no position of the logits (declare readout= if it does)")
    return pad_rows([row.nonzero().flatten() for row in reads])


def pad_rows(rows: Sequence[Tensor]) -> Int[Tensor, "batch read"]:
    """Stack per-prompt position lists into [batch read], padding short rows with their first entry (or 0)."""
    width = max(1, max(len(r) for r in rows))
    out = torch.zeros(len(rows), width, dtype=torch.long)
    for b, r in enumerate(rows):
        out[b] = torch.cat([r, r[:1].expand(width - len(r))]) if len(r) else 0
    return out


def as_readout(readout: Any, n_batch: int, n_pos: int) -> Int[Tensor, "batch read"]:
    """A declared read-out: positions shared by every prompt (negative from the end), or [batch read]."""
    r = torch.as_tensor(readout, dtype=torch.long)
    r = r.reshape(1, -1).expand(n_batch, -1) if r.ndim <= 1 else r
    r = torch.where(r < 0, r + n_pos, r)
    if r.shape[0] != n_batch or r.numel() == 0 or int(r.min()) < 0 or int(r.max()) >= n_pos:
        raise MechmemError(
            f"readout must name positions in [-{n_pos}, {n_pos}) for each of {n_batch} prompts"
        )
    return r


def callable_metric(
    metric: Callable[[Tensor], Any],
    probe: Float[Tensor, "batch pos d_vocab"],
    *,
    readout: Any = None,
    name: str | None = None,
) -> PatchingMetric:
    """Any `metric(logits [batch pos d_vocab]) -> tensor` in batched form. `probe`: full logits of the
    clean run (for the checks and the positions not read); `readout`: positions the metric reads (None:
    `find_readout`); `name`: default the callable's `__name__`."""
    probe = probe.detach()
    batch, n_pos = probe.shape[:2]
    name = name or getattr(metric, "__name__", "metric")
    finite = bool(torch.isfinite(probe).all())
    check_metric_value(metric(probe), name, finite_logits=finite)
    rows = as_readout(readout, batch, n_pos) if readout is not None else find_readout(metric, probe)
    rows = rows.to(probe.device)
    mapped, mode = per_patch(metric, probe)
    buffer: list[Tensor] = []

    def fn(logits: Float[Tensor, "patch batch read d_vocab"]) -> Tensor:
        n = len(logits)
        if not buffer or len(buffer[0]) < n or buffer[0].dtype != logits.dtype:
            buffer[:] = [probe.to(logits.dtype).expand(n, *probe.shape).clone()]
        # Every call rewrites the same read-out positions. The metric's value depends on those only, so even a
        # metric that edits its input in place cannot carry anything over from one call to the next.
        full = buffer[0][:n]
        index = rows[None, :, :, None].expand(*logits.shape)
        return mapped(full.scatter_(2, index, logits))

    return PatchingMetric(name, rows.cpu(), fn, mode)
