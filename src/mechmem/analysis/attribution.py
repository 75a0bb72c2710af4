"""Attribution patching: every cell of a patching sweep from one forward and one backward pass per run.

Exact activation patching (`mechmem.analysis.patching`) runs the model once per patched cell. Attribution
patching (AtP; Nanda 2023, Syed et al. 2023) replaces each patched run by a first-order Taylor expansion of the
metric around the run being patched:

    metric(patch) ~ metric(base) + sum over the patched entries of (source - base) * d metric / d activation

so one forward and one backward pass on the base run (and one forward on the source run) give the whole sweep,
every sweep type at once. Both directions are served: denoising differentiates the corrupted run, noising the clean
run. Results are `PatchingResult`s, directly comparable with exact patching.

Caveats: the estimate is exact only where the metric is linear in the activation (e.g. the last layer's head
outputs under a logit difference in a model without final LayerNorm); it is poor where a patch moves the
activation far along a curved direction. The worst case, named by Kramar et al. (2024, "AtP*"), is attention
saturation: when a patch changes a key or query so much that a softmax moves from one position to another, the
gradient through the saturated softmax is near zero and AtP reports no effect. With `qk_exact=True` (default),
for sweeps whose change enters the residual stream read by a layer's attention (`resid_pre`, and `resid_post` /
`mlp_out` of the layer before; `attn_out` too in attention-only models), that layer's attention pattern is
recomputed exactly with the patched position's query and key, and only the effect of the pattern change on the
metric is linearised (the linearised query/key path is subtracted and the exact one added). Other paths, and later
layers' softmaxes, stay first order. Measured agreement with exact patching: `docs/patching.md`,
`benchmarks/attribution.py`.
"""

import math
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.patching import SWEEPS, PatchingResult, PatchSweep, resolve_metric, resolve_sweep
from mechmem.analysis.patching_replay import STAGES, Replay, RunActs
from mechmem.errors import MechmemError
from mechmem.tasks.base import PatchingPair


class Attributor:
    """Clean and corrupted runs with the metric's gradients; `sweep` estimates a patching sweep to first order.

    Args are those of `mechmem.analysis.patching.Patcher` (the metric must be differentiable), plus:
        qk_exact: recompute the attention pattern exactly for the patched query/key (AtP*, see module docstring).
        memory_mb: budget for the stacked patterns of the exact query/key recomputation.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        clean: Int[Tensor, "batch pos"],
        corrupted: Int[Tensor, "batch pos"],
        metric: Any = None,
        *,
        pair: PatchingPair | None = None,
        readout: Any = None,
        qk_exact: bool = True,
        memory_mb: float = 256.0,
    ) -> None:
        if clean.shape != corrupted.shape:
            raise MechmemError("clean and corrupted inputs must have the same shape")
        self.replay = Replay(model)
        device = next(model.parameters()).device
        self.tokens = {"clean": clean.to(device), "corrupted": corrupted.to(device)}
        every = torch.arange(clean.shape[1], device=device).expand(clean.shape[0], -1)
        self.metric = resolve_metric(
            metric, pair, lambda: self.replay.run(self.tokens["clean"], every).logits, readout
        )
        self.readout = self.metric.readout.to(device)
        self.qk_exact, self.memory = qk_exact, memory_mb * 2**20
        self._runs: dict[str, tuple[RunActs, dict[str, list[Tensor]], float]] = {}

    def run(self, name: str) -> tuple[RunActs, dict[str, list[Tensor]], float]:
        """Activations, d metric / d activation (same layout) and the metric of run `name`, computed once."""
        if name not in self._runs:
            run = self.replay.run(self.tokens[name], self.readout, grad=True)
            value = self.metric.fn(run.logits[None])[0]
            if not value.requires_grad:
                raise MechmemError(f"attribution needs a differentiable metric; {self.metric.name!r} is not")
            keys = [(s, l) for s in STAGES for l in range(len(run.acts[s]))]
            grads = torch.autograd.grad(value, [run.acts[s][l] for s, l in keys], materialize_grads=True)
            by_stage: dict[str, list[Tensor]] = {s: [] for s in STAGES}
            for (s, _), g in zip(keys, grads):
                by_stage[s].append(g)
            acts = {s: [a.detach() for a in run.acts[s]] for s in STAGES}
            detached = RunActs(
                acts, [k.detach() for k in run.k], [v.detach() for v in run.v], run.logits.detach()
            )
            self._runs[name] = (detached, by_stage, float(value.detach()))
        return self._runs[name]

    def sweep(self, sweep: str | PatchSweep, direction: str = "denoising") -> PatchingResult:
        """First-order estimate of every cell of `sweep` in `direction` (same result layout as `Patcher.sweep`)."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, attn_only=self.replay.attn_only)
        base, grads, value = self.run(base_name)
        source = self.run(source_name)[0]
        layers = []
        for layer in range(self.replay.n_layers):
            delta = source.acts[spec.stage][layer] - base.acts[spec.stage][layer]
            cells = reduce_cells(delta * grads[spec.stage][layer], spec)
            target = self.qk_target(spec.stage, layer)
            if target is not None:
                cells = cells + self.qk_correction(target, base, grads["pattern"][target], delta)
            layers.append(value + cells)
        values = {name: self.run(name)[2] for name in ("clean", "corrupted")}
        return PatchingResult(
            spec.name,
            spec.axes,
            torch.stack(layers).cpu(),
            direction,
            self.metric.name,
            values["clean"],
            values["corrupted"],
        )

    def qk_target(self, stage: str, layer: int) -> int | None:
        """The layer whose attention reads this stage's change as its residual input, when AtP* applies."""
        if not self.qk_exact:
            return None
        nxt = ("resid_post", "mlp_out") + (("attn_out",) if self.replay.attn_only else ())
        if stage == "resid_pre":
            return layer
        return layer + 1 if stage in nxt and layer + 1 < self.replay.n_layers else None

    @torch.no_grad()
    def qk_correction(
        self,
        layer: int,
        base: RunActs,
        grad_pattern: Float[Tensor, "batch head_index query_pos key_pos"],
        delta: Float[Tensor, "batch pos d_model"],
    ) -> Float[Tensor, " pos"]:
        """Per patched position p: exact minus linearised effect of `delta[:, p]` on `layer`'s attention pattern,
        each scored by d metric / d pattern (AtP*'s query/key fix)."""
        resid, pattern = base.acts["resid_pre"][layer], base.acts["pattern"][layer]
        h = self.replay.ln1(layer, resid)
        with torch.enable_grad():  # gradient of <dM/dP, P(h)> w.r.t. h: the query/key path only
            h_var = h.clone().requires_grad_(True)
            (g_h,) = torch.autograd.grad((grad_pattern * self.replay.attend(layer, h_var)[0]).sum(), h_var)
        dh = torch.func.jvp(lambda r: self.replay.ln1(layer, r), (resid,), (delta,))[1]
        linear = (g_h * dh).sum((0, 2))
        h_new = self.replay.ln1(layer, resid + delta)
        n_pos = h.shape[1]
        active = (delta != 0).any(-1).any(0).nonzero().flatten()  # other positions: no change, no correction
        chunk = max(1, int(self.memory // (4 * 3 * pattern.numel() + 4 * h.numel())))
        exact = torch.zeros_like(linear)
        for first in range(0, len(active), chunk):
            cells = active[first : first + chunk]
            at = (cells[:, None] == torch.arange(n_pos, device=h.device))[:, None, :, None]  # [cell 1 pos 1]
            stacked = torch.where(at, h_new, h).flatten(0, 1)  # [cell * batch pos d_model]
            moved = self.replay.attend(layer, stacked)[0].unflatten(0, (len(cells), -1))
            exact[cells] = (grad_pattern * (moved - pattern)).sum((1, 2, 3, 4))
        return exact - linear


def reduce_cells(x: Float[Tensor, "batch ..."], spec: PatchSweep) -> Tensor:
    """Sum per-entry contributions over the batch and every activation axis a cell spans (cells: `spec.dims`)."""
    x = x.sum(0)
    spanned = [d for d in range(x.ndim) if d not in spec.dims]
    return x.sum(spanned) if spanned else x


def attribute_sweeps(
    model: torch.nn.Module,
    pair: PatchingPair,
    sweeps: Any = tuple(SWEEPS),
    *,
    metric: Any = None,
    direction: str = "denoising",
    qk_exact: bool = True,
) -> dict[str, PatchingResult]:
    """`run_sweeps` by attribution patching: several sweeps from one forward/backward pass per run."""
    att = Attributor(model, pair.clean, pair.corrupted, metric, pair=pair, qk_exact=qk_exact)
    return {name: att.sweep(name, direction) for name in sweeps}


def _ranks(x: Tensor) -> Tensor:
    """Ranks with ties averaged (for Spearman's correlation)."""
    _, inverse, counts = x.unique(return_inverse=True, return_counts=True)
    first = torch.cumsum(counts, 0) - counts
    return (first + (counts - 1) / 2).to(torch.float64)[inverse]


def _pearson(a: Tensor, b: Tensor) -> float:
    a, b = a - a.mean(), b - b.mean()
    denom = float(a.norm() * b.norm())
    return float((a * b).sum()) / denom if denom > 0 else math.nan


def agreement(approx: PatchingResult, exact: PatchingResult, k: int = 10) -> dict[str, float]:
    """How well `approx` (e.g. attribution) ranks and sizes the cells of `exact`.

    Effects are values minus the unpatched run's metric. Returns Pearson and Spearman correlation of the effects
    over all cells, and top-k overlap: the fraction of the k cells with the largest |effect| in `exact` that are
    also among the k largest in `approx` (k capped at the number of cells).
    """
    if approx.values.shape != exact.values.shape:
        raise MechmemError("results of different shapes cannot be compared")
    a = (approx.values - approx.baseline).flatten().double()
    e = (exact.values - exact.baseline).flatten().double()
    k = min(k, len(e))
    top_a, top_e = set(a.abs().topk(k).indices.tolist()), set(e.abs().topk(k).indices.tolist())
    return {
        "pearson": _pearson(a, e),
        "spearman": _pearson(_ranks(a), _ranks(e)),
        "top_k": len(top_a & top_e) / k,
        "k": k,
    }


__all__ = ["Attributor", "agreement", "attribute_sweeps", "reduce_cells"]
