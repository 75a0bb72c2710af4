"""Attribution patching: every cell of a patching sweep from one forward and one backward pass per run.

Attribution patching (AtP; Nanda 2023, Syed et al. 2023) replaces each patched run of exact activation
patching by a first-order Taylor expansion of the metric around the run being patched:

    metric(patch) ~ metric(base) + sum over the patched entries of (source - base) * d metric / d activation

Caveats: the estimate is exact only where the metric is linear in the activation. Where a patch
saturates a softmax (Kramar et al. 2024, "AtP*") `qk_exact=True` recomputes the attention pattern
exactly for the patched query and key (`qk_correction`); `steps=k` averages the gradient over k runs
with interpolated token embeddings (integrated gradients).

Each prompt's own estimate, m_i(base) + n x (its products), gives intervals over prompts
(`sweep_intervals`): spread over prompt draws, not the first-order error, which is measured on a sample of
cells computed exactly (`Attributor.check_sweep`, rule `TRUST`; `attribute_sweeps` falls back to exact
patching for a sweep that fails it).
"""

import math
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.interventions import Engine
from mechmem.analysis.interventions.replay import STAGES
from mechmem.analysis.patching.qk_correction import prompt_swap_effects
from mechmem.analysis.patching.result import SWEEPS, PatchingResult, PatchSweep, sweep_intervals
from mechmem.analysis.patching.sweeps import Patcher, resolve_metric, resolve_sweep
from mechmem.errors import MechmemError
from mechmem.models.checks import check_choices, check_count
from mechmem.models.parts import model_device
from mechmem.tasks.base import PatchingPair, check_pair

TRUST = {"pearson": 0.8}
"""An estimate is trusted when the Pearson correlation of estimated and exact effects (value minus the
unpatched metric) over the sampled cells is at least 0.8, or when every sampled effect is within 1e-6 of 0."""
CHECK_CELLS = 32
"""Cells of a result whose exact values the agreement check computes."""
DEFAULT_STEPS = 0
"""Default of `Attributor(steps=...)`: first order (docs/circuits.md, "First order or integrated
gradients")."""


class Attributor:
    """Clean and corrupted runs with the metric's gradients; `sweep` estimates a patching sweep from them.

    Args are those of `mechmem.analysis.patching.Patcher` (the metric must be differentiable), plus:
        qk_exact: recompute the attention pattern exactly for the patched query/key (AtP*; needs the replay).
        steps: 0 for first order, k >= 1 for integrated gradients (the gradient averaged over k runs whose
            token embedding lies (i + 1/2) / k of the way from the patched run's to the source run's).
        memory_mb: budget for the stacked patterns of the exact query/key recomputation.
        stages: the stages whose activations and gradients are kept (default: all).
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
        steps: int = DEFAULT_STEPS,
        memory_mb: float = 256.0,
        stages: Any = None,
    ) -> None:
        if clean.shape != corrupted.shape:
            raise MechmemError("clean and corrupted inputs must have the same shape")
        if steps < 0:
            raise MechmemError(f"steps must be 0 (first order) or a positive number of IG steps, got {steps}")
        device = model_device(model)
        self.model = model
        self.tokens = {"clean": clean.to(device), "corrupted": corrupted.to(device)}
        self.metric = resolve_metric(
            metric, pair, lambda: model(self.tokens["clean"]), readout, per_prompt=False
        )
        self._exact_args = {"metric": metric, "pair": pair, "readout": readout, "memory_mb": memory_mb}
        self.engine = Engine(model, self.metric, memory_mb=memory_mb)
        self.replay = self.engine.replay
        self.qk_exact = qk_exact and self.replay is not None
        self.steps, self.memory = steps, memory_mb * 2**20
        self.attn_only = bool(model.cfg.attn_only)
        self._runs: dict[Any, tuple[dict[str, list[Tensor]], dict[str, list[Tensor]], float]] = {}
        self._sources: dict[str, tuple[dict[str, list[Tensor]], float]] = {}
        self._exact: Patcher | None = None
        self.stages = None if stages is None else tuple(stages)

    @property
    def method(self) -> str:
        first = "first-order attribution" if not self.steps else f"integrated gradients ({self.steps} steps)"
        return first + (" with AtP* query/key fix" if self.qk_exact else "")

    @property
    def passes(self) -> int:
        """Forward + backward passes one direction costs (the source run's forward pass counts as one)."""
        return max(1, self.steps) + 1

    def run(self, name: str, toward: str | None = None) -> tuple[dict, dict, float]:
        """Activations, d metric / d activation (same layout) and the metric of run `name`, computed once;
        with `toward` (integrated gradients), the gradients are averaged over the interpolated runs."""
        key = (name, toward)
        if key in self._runs:
            return self._runs[key]
        if toward is None:
            value, acts, grads = self.engine.gradients(self.tokens[name], stages=self.stages)
        else:
            acts, _, value = self.run(name)
            start, end = (self.model.embed(self.tokens[n]).detach() for n in (name, toward))
            grads: dict[str, list[Tensor]] = {}
            for i in range(self.steps):
                mixed = start + (i + 0.5) / self.steps * (end - start)
                step = self.engine.gradients(self.tokens[name], embed=mixed, stages=self.stages)[2]
                for s in STAGES:
                    part = [g / self.steps for g in step[s]]
                    grads[s] = part if i == 0 else [a + b for a, b in zip(grads[s], part)]
        self._runs[key] = (acts, grads, value)
        if toward is None:  # later `source` calls read this run
            self._sources.pop(name, None)
        return self._runs[key]

    def source(self, name: str) -> tuple[dict, float]:
        """Activations and the metric of run `name` as a patching source (`run`'s, else one forward pass)."""
        if (name, None) in self._runs:
            acts, _, value = self._runs[(name, None)]
            return acts, value
        if name not in self._sources:
            value, acts = self.engine.activations(self.tokens[name], stages=self.stages)
            self._sources[name] = (acts, value)
        return self._sources[name]

    def sweep(
        self, sweep: str | PatchSweep, direction: str = "denoising", *, check: bool = True
    ) -> PatchingResult:
        """The estimate of every cell of `sweep` in `direction` (`Patcher.sweep`'s layout), checked against
        exact patching on a sample of cells unless `check` is False."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, self.model)
        base, _, value = self.run(base_name)
        grads = self.run(base_name, source_name if self.steps else None)[1]
        source = self.source(source_name)[0]
        layers, by_prompt = [], []
        for layer in range(self.model.cfg.n_layers):
            delta = source[spec.stage][layer] - base[spec.stage][layer]
            cells = prompt_cells(delta * grads[spec.stage][layer], spec)
            target = self.qk_target(spec.stage, layer)
            if target is not None:
                cells = cells + self.qk_correction(target, base, grads["pattern"][target], delta)
            by_prompt.append(cells)
            layers.append(value + cells.sum(0))
        per_prompt = self.prompt_values(torch.stack(by_prompt, 1), direction)
        runs = self.exact_patcher().prompt_values
        result = PatchingResult(
            spec.name,
            spec.axes,
            torch.stack(layers).cpu(),
            direction,
            self.metric.name,
            *(self.source(name)[1] for name in ("clean", "corrupted")),
            method=self.method,
            intervals=None
            if per_prompt is None
            else sweep_intervals(per_prompt, runs["clean"], runs["corrupted"], direction),
            per_prompt=per_prompt,
        )
        if check:
            result.check = self.check_sweep(result)
        return result

    def exact_sweep(
        self, sweep: str | PatchSweep, direction: str, failed: PatchingResult | None = None
    ) -> PatchingResult:
        """`sweep` by exact patching; with `failed`, marked as the fallback of that estimate."""
        result = self.exact_patcher().sweep(sweep, direction)
        if failed is not None:
            result.method = f"exact (fallback: {failed.method} failed the agreement check)"
            result.check = failed.check
        return result

    def prompt_values(
        self, products: Float[Tensor, "prompt layer ..."], direction: str
    ) -> Float[Tensor, "prompt layer ..."] | None:
        """Each prompt's estimate of every cell, m_i(base) + n x products[i] (None for a scalar metric)."""
        runs = self.exact_patcher().prompt_values
        if runs is None:
            return None
        base = runs["corrupted"] if direction == "denoising" else runs["clean"]
        n = len(base)
        return base.double().reshape(n, *[1] * (products.ndim - 1)) + n * products.double().cpu()

    def exact_patcher(self) -> Patcher:
        if self._exact is None:
            self._exact = Patcher(self.model, *self.tokens.values(), **self._exact_args)
        return self._exact

    def check_sweep(self, result: PatchingResult, n: int = CHECK_CELLS) -> dict[str, Any]:
        """Agreement of `result` with exact patching on `sample_cells` of its cells (see `TRUST`)."""
        flat = (result.values - result.baseline).flatten()
        cells = sample_cells(flat, n)
        exact = self.exact_patcher().cells(result.sweep, result.direction, cells)
        return judge(flat[cells], exact - result.baseline)

    def qk_target(self, stage: str, layer: int) -> int | None:
        """The layer whose attention reads this stage's change as its residual input, when AtP* applies."""
        if not self.qk_exact:
            return None
        # attn_out reaches the next layer's attention directly where no MLP follows it in the block
        direct = self.attn_only or getattr(self.model.cfg, "parallel_attn_mlp", False)
        nxt = ("resid_post", "mlp_out") + (("attn_out",) if direct else ())
        if stage == "resid_pre":
            return layer
        return layer + 1 if stage in nxt and layer + 1 < self.model.cfg.n_layers else None

    @torch.no_grad()
    def qk_correction(
        self,
        layer: int,
        base: dict[str, list[Tensor]],
        grad_pattern: Float[Tensor, "batch head_index query_pos key_pos"],
        delta: Float[Tensor, "batch pos d_model"],
    ) -> Float[Tensor, "batch pos"]:
        """Per prompt and patched position p: exact minus linearised effect of `delta[:, p]` on `layer`'s
        attention pattern, scored by d metric / d pattern (AtP*'s query/key fix)."""
        resid = base["resid_pre"][layer]
        h = self.replay.ln1(layer, resid)
        with torch.enable_grad():  # gradient of <dM/dP, P(h)> w.r.t. h: the query/key path only
            h_var = h.clone().requires_grad_(True)
            (g_h,) = torch.autograd.grad((grad_pattern * self.replay.attend(layer, h_var)[0]).sum(), h_var)
        dh = torch.func.jvp(lambda r: self.replay.ln1(layer, r), (resid,), (delta,))[1]
        linear = (g_h * dh).sum(2)
        exact = prompt_swap_effects(
            self.replay, layer, h, self.replay.ln1(layer, resid + delta), grad_pattern, self.memory
        ).to(linear.dtype)
        active = (delta != 0).any(-1).any(0)  # other positions: no change, no correction
        return torch.where(active, exact - linear, 0.0)


def prompt_cells(x: Float[Tensor, "batch ..."], spec: PatchSweep) -> Float[Tensor, "batch ..."]:
    """Sum per-entry contributions over every activation axis a cell spans (`spec.dims`), per prompt."""
    spanned = [d + 1 for d in range(x.ndim - 1) if d not in spec.dims]
    return x.sum(spanned) if spanned else x


def attribute_sweeps(
    model: torch.nn.Module,
    pair: PatchingPair,
    sweeps: Any = tuple(SWEEPS),
    *,
    metric: Any = None,
    direction: str = "denoising",
    qk_exact: bool = True,
    steps: int = DEFAULT_STEPS,
    fallback: bool = True,
) -> dict[str, PatchingResult]:
    """`run_sweeps` by attribution patching; with `fallback`, a sweep failing `TRUST` is patched exactly.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> found = mechmem.attribute_sweeps(model, pair, ["attn_head_out_all_pos"])
        >>> estimate = found["attn_head_out_all_pos"]
        >>> estimate.axes, "trusted" in estimate.check
        (('layer', 'head'), True)
    """
    check_pair(pair, model)
    sweeps = check_choices("sweeps", sweeps)
    check_count("steps", steps, minimum=0)
    stages = sweep_stages(model, sweeps, direction)
    att = Attributor(
        model, pair.clean, pair.corrupted, metric, pair=pair, qk_exact=qk_exact, steps=steps, stages=stages
    )
    out = {}
    for name in sweeps:
        out[name] = result = att.sweep(name, direction)
        if fallback and not result.check["trusted"]:
            out[name] = att.exact_sweep(name, direction, result)
    return out


def sweep_stages(model: torch.nn.Module, sweeps: Any, direction: str) -> set[str]:
    """The stages `sweeps` and the query/key fix read: `Attributor(stages=...)` keeps only their
    activations and gradients (every stage of a 12-layer d_model 768 model at 512 pairs is about 34 GB)."""
    return {resolve_sweep(name, direction, model)[0].stage for name in sweeps} | {"resid_pre", "pattern"}


def sample_cells(effects: Float[Tensor, " cell"], n: int = CHECK_CELLS) -> Int[Tensor, " sample"]:
    """A deterministic sample of cell indices: the n/2 largest |effects|, then n/2 of the rest drawn with
    seed 0 (every cell when there are at most n), sorted."""
    if len(effects) <= n:
        return torch.arange(len(effects))
    top = effects.abs().argsort(descending=True, stable=True)[: n // 2]
    rest = torch.ones(len(effects), dtype=torch.bool)
    rest[top] = False
    others = rest.nonzero().flatten()
    drawn = others[torch.randperm(len(others), generator=torch.Generator().manual_seed(0))[: n - len(top)]]
    return torch.cat([top, drawn]).sort().values


def judge(estimate: Tensor, exact: Tensor, k: int = 5) -> dict[str, Any]:
    """Agreement of estimated with exact effects on the same cells, and whether it passes `TRUST`."""
    a, e = estimate.flatten().double(), exact.flatten().double()
    k = min(k, len(e))
    top_a, top_e = set(a.abs().topk(k).indices.tolist()), set(e.abs().topk(k).indices.tolist())
    pearson = _pearson(a, e)
    flat = bool(a.abs().max() <= 1e-6 and e.abs().max() <= 1e-6)
    return {
        "pearson": pearson,
        "spearman": _pearson(_ranks(a), _ranks(e)),
        "top_k": len(top_a & top_e) / k if k else math.nan,
        "k": k,
        "cells": len(e),
        "threshold": TRUST["pearson"],
        "trusted": flat or (not math.isnan(pearson) and pearson >= TRUST["pearson"]),
    }


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
    """How well `approx` ranks and sizes the cells of `exact` (effects: values minus the unpatched metric):
    Pearson and Spearman correlation over all cells, and the top-k overlap (the fraction of the k
    largest |effect| cells of `exact` also among the k largest of `approx`)."""
    if approx.values.shape != exact.values.shape:
        raise MechmemError("results of different shapes cannot be compared")
    found = judge(approx.values - approx.baseline, exact.values - exact.baseline, k)
    return {key: found[key] for key in ("pearson", "spearman", "top_k", "k")}
