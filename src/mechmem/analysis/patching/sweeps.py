"""Activation patching: which activations carry the information that separates two inputs?

Run the model on a *clean* input and a *corrupted* one that differ in a key detail (here: the last x repeats
an earlier x, so the answer is recalled rather than eliminated). Then replace one activation of one run by the
same activation of the other run and measure a metric of the output (default: the task's logit difference
between the clean and the corrupted answer). Both directions are named explicitly:
    - denoising: clean activations into the corrupted run. A large recovery means the activation is
    *sufficient*
      to carry the clean behaviour (given the rest of the corrupted run).
    - noising: corrupted activations into the clean run. A large drop means the activation is *necessary*.
Sweeps cover the residual stream (resid_pre / resid_mid / resid_post) and the attention and MLP outputs by
layer x position, each head's output z by layer x head (all positions at once) and layer x position x head,
and each head's attention pattern by layer x head (and layer x head x destination position).

Each cell is one `Intervention` of the intervention engine (`mechmem.analysis.interventions`): the sweep's
hook, the cell's index, the source run's values. The results equal TransformerLens's
`transformer_lens.patching.get_act_patch_*` (one hooked forward pass per patch), but the engine computes them
much faster while staying exact (on models its hook-free replay supports; elsewhere it runs them on hooks):
    - many patches share one forward pass along a leading patch axis, in chunks that fit a memory budget;
    - each patched run resumes at the patched activation from the cached unpatched run (`patching_replay`);
    - patches that provably cannot move the metric are not run but get the unpatched run's metric, the value a
      full run would produce: patches whose replaced entries already equal the base run's (e.g. every position
      before the first token where clean and corrupted differ), positions after the last read-out position
      (causal attention), and, after the last layer's attention, where the network is position-wise, every
      position that is not read out.
Every cell is a mean over prompts and carries its 95% interval over them (`SweepIntervals`, computed by
`sweep_intervals` with `mechmem.analysis.intervals`): the metric after the patch and its change from the
unpatched run (paired per prompt) get mean -+ 1.96 standard errors; the normalised effect (patched -
corrupted) / (clean - corrupted), a ratio of two means, gets a percentile bootstrap over prompts. Where the
clean - corrupted gap's own interval includes 0 the runs are not told apart and every normalised effect is NaN
(`PatchingResult.normalised_refused`), rather than a large number divided by noise. This needs a metric with
one value per prompt: the default logit difference has one, a callable returning one value per prompt too; a
callable returning a scalar gives means without intervals.

Caveats: patching measures the effect of one activation with everything else held at one run's values; effects
need not add up, and a clean/corrupted pair that differs in several ways mixes their effects.
"""

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.frames import grid_frame, shape_text, short_repr
from mechmem.analysis.intervals import bootstrap_ratio, covers, mean_interval
from mechmem.analysis.interventions import Engine, Intervention, from_run
from mechmem.analysis.interventions.metric import PatchingMetric, callable_metric
from mechmem.analysis.interventions.replay import STAGE_HOOKS, model_stages
from mechmem.errors import MechmemError
from mechmem.tasks.base import PatchingPair

DIRECTIONS = ("denoising", "noising")


# -- metrics -------------------------------------------------------------------------------------------------
def resolve_metric(
    metric: Any,
    pair: PatchingPair | None,
    probe: Callable[[], Tensor],
    readout: Any = None,
    *,
    per_prompt: bool = True,
) -> PatchingMetric:
    """None -> the pair's logit difference; `pair.logit_diff` itself is recognised; any callable is put in
    batched form by `callable_metric` (`probe()` gives the clean run's full logits, computed only then).
    With `per_prompt` the logit difference comes one value per prompt (`PatchingMetric.logit_diff_per_prompt`,
    for intervals), else as the mean (a scalar, for gradients)."""
    if isinstance(metric, PatchingMetric):
        return metric
    logit_diff = PatchingMetric.logit_diff_per_prompt if per_prompt else PatchingMetric.logit_diff
    if metric is None:
        if pair is None:
            raise MechmemError("a metric is needed when no PatchingPair is given")
        return logit_diff(pair)
    owner = getattr(metric, "__self__", None)
    if (
        isinstance(owner, PatchingPair)
        and getattr(metric, "__name__", "") == "logit_diff"
        and readout is None
    ):
        return logit_diff(owner)
    if not callable(metric):
        raise MechmemError(f"metric must be callable, got {type(metric).__name__}")
    return callable_metric(metric, probe(), readout=readout)


# -- sweep types ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PatchSweep:
    """One sweep type: the activation patched and the axes of its cells (the first axis is always `layer`)."""

    name: str
    """Sweep name, used in results and on the command line."""
    stage: str
    """Activation patched: resid_pre, pattern, z, attn_out, resid_mid, mlp_out or resid_post."""
    axes: tuple[str, ...]
    """Cell axes, e.g. ("layer", "pos", "head"); sizes come from the model and the inputs."""
    dims: tuple[int, ...]
    """For each axis after `layer`, the activation axis (after batch) it selects."""


_RESID_LIKE = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
SWEEPS: dict[str, PatchSweep] = {s: PatchSweep(s, s, ("layer", "pos"), (0,)) for s in _RESID_LIKE} | {
    "attn_head_out_all_pos": PatchSweep("attn_head_out_all_pos", "z", ("layer", "head"), (1,)),
    "attn_head_out_by_pos": PatchSweep("attn_head_out_by_pos", "z", ("layer", "pos", "head"), (0, 1)),
    "attn_head_pattern_all_pos": PatchSweep("attn_head_pattern_all_pos", "pattern", ("layer", "head"), (0,)),
    "attn_head_pattern_by_pos": PatchSweep(
        "attn_head_pattern_by_pos", "pattern", ("layer", "head", "dest_pos"), (0, 1)
    ),
}


def model_sweeps(model: torch.nn.Module) -> list[str]:
    """Every sweep the model has: attention-only models have no resid_mid / mlp_out, parallel attention and
    MLP blocks no resid_mid (`patching_replay.model_stages`)."""
    stages = model_stages(model.cfg)
    return [name for name, spec in SWEEPS.items() if spec.stage in stages]


def resolve_sweep(
    sweep: str | PatchSweep, direction: str, model: torch.nn.Module
) -> tuple[PatchSweep, str, str]:
    """The sweep spec and the (base, source) run names of `direction`; one-line errors for bad requests
    (also for a sweep of an activation `model` does not compute)."""
    spec = SWEEPS.get(sweep) if isinstance(sweep, str) else sweep
    if spec is None:
        raise MechmemError(f"unknown sweep {sweep!r}; choose from {', '.join(SWEEPS)}")
    if direction not in DIRECTIONS:
        raise MechmemError(f"direction must be 'denoising' or 'noising', got {direction!r}")
    if spec.stage not in model_stages(model.cfg):
        why = "the model is attention-only" if model.cfg.attn_only else "attention and MLP run in parallel"
        raise MechmemError(f"sweep {spec.name!r} patches {spec.stage}, which this model lacks: {why}")
    base, source = ("corrupted", "clean") if direction == "denoising" else ("clean", "corrupted")
    return spec, base, source


# -- results -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepIntervals:
    """95% intervals over prompts of every cell of a sweep (each tensor has the values' shape)."""

    n_prompts: int
    """Prompts (clean/corrupted pairs) the means and intervals are over."""
    lower: Float[Tensor, "..."]
    """Lower bound of the mean metric after each patch (mean - 1.96 standard errors over prompts)."""
    upper: Float[Tensor, "..."]
    """Upper bound of it."""
    effect_lower: Float[Tensor, "..."]
    """Lower bound of the patch's effect, value - baseline, paired per prompt (the same prompt patched and
    unpatched)."""
    effect_upper: Float[Tensor, "..."]
    """Upper bound of it."""
    normalised_lower: Float[Tensor, "..."]
    """Lower bound of (value - corrupted) / (clean - corrupted), a percentile bootstrap of the ratio over
    prompts (NaN where the gap's interval includes 0)."""
    normalised_upper: Float[Tensor, "..."]
    """Upper bound of it."""
    gap: tuple[float, float, float]
    """(mean, lower, upper) of clean - corrupted, paired per prompt: the normalised effect's denominator."""


def sweep_intervals(
    per_prompt: Float[Tensor, "prompt ..."],
    clean: Float[Tensor, " prompt"],
    corrupted: Float[Tensor, " prompt"],
    direction: str,
    *,
    generator: torch.Generator | None = None,
) -> SweepIntervals:
    """The 95% intervals over prompts of a sweep's cells from the metric of every prompt under every patch.

    Args:
        per_prompt: the metric of each prompt after each patch, prompts first.
        clean, corrupted: each prompt's metric in the unpatched clean and corrupted runs.
        direction: "denoising" (the baseline is the corrupted run) or "noising" (the clean run).
        generator: draws the bootstrap resamples of the normalised effect (default: seeded with 0, so the same
            values give the same interval).
    """
    shape = (-1, *[1] * (per_prompt.ndim - 1))
    per_prompt, clean, corrupted = per_prompt.double(), clean.double(), corrupted.double()
    _, lower, upper = mean_interval(per_prompt)
    base = corrupted if direction == "denoising" else clean
    _, effect_lower, effect_upper = mean_interval(per_prompt - base.reshape(shape))
    gap = [float(x) for x in mean_interval(clean - corrupted)]
    if covers(gap[1], gap[2]):
        nan = torch.full(per_prompt.shape[1:], float("nan"))
        norm_lower, norm_upper = nan, nan.clone()
    else:
        gen = torch.Generator().manual_seed(0) if generator is None else generator
        norm_lower, norm_upper = bootstrap_ratio(
            per_prompt - corrupted.reshape(shape), clean - corrupted, generator=gen
        )
    return SweepIntervals(
        len(clean), lower, upper, effect_lower, effect_upper, norm_lower, norm_upper, tuple(gap)
    )


@dataclass
class PatchingResult:
    """The metric after each patch of one sweep; `values` has one axis per name in `axes`.

    Each value is a mean over prompts; `intervals` holds their 95% intervals (None for a metric without one
    value per prompt, and for estimates).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> result = mechmem.run_sweeps(model, pair, ["resid_pre"])["resid_pre"]
        >>> result.axes, tuple(result.values.shape), tuple(result.lower.shape)
        (('layer', 'pos'), (2, 16), (2, 16))
    """

    sweep: str
    axes: tuple[str, ...]
    values: Float[Tensor, "..."]
    direction: str
    metric: str
    clean: float
    """Metric of the unpatched clean run."""
    corrupted: float
    """Metric of the unpatched corrupted run."""
    method: str = "exact"
    """How the values were computed: "exact" patching, or an estimate (`attribution.Attributor.method`)."""
    check: dict[str, Any] | None = None
    """For an estimate: its agreement with exact patching on a sample of cells (`attribution.judge`)."""
    intervals: SweepIntervals | None = None
    """95% intervals over prompts (`sweep_intervals`); None without per-prompt values."""

    def __post_init__(self) -> None:
        if self.values.ndim != len(self.axes):
            raise ValueError(
                f"values have {self.values.ndim} axes but {len(self.axes)} axis names {self.axes}"
            )
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}")
        if self.intervals is not None and self.intervals.lower.shape != self.values.shape:
            raise ValueError(
                f"intervals have shape {tuple(self.intervals.lower.shape)}, values {tuple(self.values.shape)}"
            )

    @property
    def baseline(self) -> float:
        """Metric of the run being patched (corrupted when denoising, clean when noising)."""
        return self.corrupted if self.direction == "denoising" else self.clean

    @property
    def lower(self) -> Float[Tensor, "..."] | None:
        """Lower 95% bound of each value over prompts (None without intervals)."""
        return None if self.intervals is None else self.intervals.lower

    @property
    def upper(self) -> Float[Tensor, "..."] | None:
        """Upper 95% bound of each value over prompts (None without intervals)."""
        return None if self.intervals is None else self.intervals.upper

    @property
    def normalised_refused(self) -> bool:
        """True when the clean - corrupted gap's 95% interval includes 0: the two runs are not told apart, so
        no normalised effect is given (`normalised()` is NaN). False without intervals (nothing to judge)."""
        return self.intervals is not None and bool(covers(*self.intervals.gap[1:]))

    def normalised(self) -> Float[Tensor, "..."]:
        """(value - corrupted) / (clean - corrupted): 0 = corrupted behaviour, 1 = clean behaviour; NaN where
        the gap is 0 or `normalised_refused`."""
        span = self.clean - self.corrupted
        if self.normalised_refused or not span:
            return torch.full_like(self.values, float("nan"))
        return (self.values - self.corrupted) / span

    def effect_undecided(self) -> Tensor | None:
        """Per cell, whether the 95% interval of the effect (value - baseline) includes 0; None without
        intervals."""
        if self.intervals is None:
            return None
        return covers(self.intervals.effect_lower, self.intervals.effect_upper)

    def to_dataframe(self) -> Any:
        """One row per patched cell: `sweep`, `stage` (the activation patched; None for a sweep not in
        `SWEEPS`), `direction`, `method`, one column per axis (`layer`, `pos`, `head`, `dest_pos`, ...),
        `value` (the metric after the patch, mean over prompts), `lower` / `upper` (its 95% interval),
        `effect_lower` / `effect_upper` (of value - baseline), `normalised` (`normalised()`) and
        `normalised_lower` / `normalised_upper`. Without intervals the bounds are NaN."""
        spec = SWEEPS.get(self.sweep)
        leading = {
            "sweep": self.sweep,
            "stage": spec.stage if spec is not None else None,
            "direction": self.direction,
            "method": self.method,
        }
        iv = self.intervals
        nan = torch.full_like(self.values.float(), float("nan"))
        bound = (lambda name: nan) if iv is None else (lambda name: getattr(iv, name).float())
        frame = grid_frame(
            self.values.float(), self.axes, lower=bound("lower"), upper=bound("upper"), leading=leading
        )
        columns = {"effect_lower": bound("effect_lower"), "effect_upper": bound("effect_upper")}
        columns |= {"normalised": self.normalised().float()}
        columns |= {
            "normalised_lower": bound("normalised_lower"),
            "normalised_upper": bound("normalised_upper"),
        }
        for name, column in columns.items():
            frame[name] = column.detach().cpu().reshape(-1).numpy()
        return frame

    def __repr__(self) -> str:
        iv = self.intervals
        spread = "no intervals" if iv is None else f"95% intervals over {iv.n_prompts} prompts"
        return short_repr(
            "PatchingResult",
            f"{self.sweep!r} {self.direction} ({self.method})",
            shape_text(self.axes, self.values.shape),
            f"{self.metric} clean {self.clean:.3g}, corrupted {self.corrupted:.3g}",
            f"values {float(self.values.min()):.3g}..{float(self.values.max()):.3g}"
            if self.values.numel()
            else "",
            spread,
            "normalised refused: the clean - corrupted gap's interval includes 0"
            if self.normalised_refused
            else "",
        )

    def to_dict(self) -> dict[str, Any]:
        iv = self.intervals
        out = {
            "sweep": self.sweep,
            "axes": list(self.axes),
            "values": self.values.tolist(),
            "direction": self.direction,
            "metric": self.metric,
            "clean": self.clean,
            "corrupted": self.corrupted,
            "method": self.method,
            "check": self.check,
            "normalised": self.normalised().tolist(),
            "normalised_refused": self.normalised_refused,
        }
        if iv is None:
            return out | {"interval": None}
        bounds = ("lower", "upper", "effect_lower", "effect_upper", "normalised_lower", "normalised_upper")
        return out | {
            "interval": (
                f"95% over {iv.n_prompts} prompts: values and effects mean -+ 1.96 standard errors, "
                "normalised effects a percentile bootstrap of the ratio (200 resamples)"
            ),
            "n_prompts": iv.n_prompts,
            **{name: getattr(iv, name).tolist() for name in bounds},
            "gap": dict(zip(("value", "lower", "upper"), iv.gap)),
        }


# -- sweeps on the engine ------------------------------------------------------------------------------
def cell_index(spec: PatchSweep, cell: Sequence[int]) -> tuple:
    """The intervention index of one cell (its values on the axes after `layer`): e.g. (slice(None), h)."""
    index: list[Any] = [slice(None)] * (max(spec.dims) + 1)
    for dim, value in zip(spec.dims, cell):
        index[dim] = int(value)
    return tuple(index)


class Patcher:
    """Clean and corrupted runs of one model; `sweep` patches between them through the intervention engine.

    Each cell of a sweep is one `Intervention` (the sweep's hook, the cell's index, `from_run` of the source
    run), the way TransformerLens's patch setters write it; the engine
    (`mechmem.analysis.interventions.Engine`) runs them all, on the hook-free replay where the model allows
    (see the module docstring), else on hooks.

    Args:
        model: a TransformerLens `HookedTransformer` (or another hooked model with a `cfg`).
        clean, corrupted: input tokens [batch pos] of equal shape.
        metric: a `PatchingMetric`, any callable `metric(logits [batch pos d_vocab]) -> scalar` (evaluated
        over
            all patches at once, see `patching_metric`), or None for the logit difference of `pair`.
        pair: the task's `PatchingPair` (gives the default metric).
        readout: positions a callable metric reads (shared list, negative from the end, or [batch read]);
            None: found by a dependency check.
        memory_mb: budget for the activations of one batched pass; patches are chunked to fit.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        clean: Int[Tensor, "batch pos"],
        corrupted: Int[Tensor, "batch pos"],
        metric: Any = None,
        *,
        pair: PatchingPair | None = None,
        memory_mb: float = 256.0,
        readout: Any = None,
    ) -> None:
        if clean.shape != corrupted.shape:
            raise MechmemError("clean and corrupted inputs must have the same shape")
        if getattr(model, "cfg", None) is None:
            raise MechmemError("patching needs a TransformerLens model (with a cfg)")
        device = next(model.parameters()).device
        self.model = model
        self.tokens = {"clean": clean.to(device), "corrupted": corrupted.to(device)}
        self.metric = resolve_metric(metric, pair, lambda: model(self.tokens["clean"]), readout)
        self.n_pos = clean.shape[1]
        if int(self.metric.readout.max()) >= self.n_pos or int(self.metric.readout.min()) < 0:
            raise MechmemError("read-out positions must lie inside the inputs")
        self.engine = Engine(model, self.metric, memory_mb=memory_mb)
        self.setters = {name: from_run(tokens) for name, tokens in self.tokens.items()}
        runs = {name: self.engine.run(tokens, [[]])[0].float().cpu() for name, tokens in self.tokens.items()}
        batch = clean.shape[0]
        self.per_prompt = all(tuple(v.shape) == (batch,) for v in runs.values())
        """Whether the metric gives one value per prompt (then cells carry intervals over prompts)."""
        if not self.per_prompt and any(v.numel() != 1 for v in runs.values()):
            shape = tuple(runs["clean"].shape)
            raise MechmemError(
                f"the metric must return a scalar or one value per prompt ({batch}), got {shape}"
            )
        self.prompt_values = runs if self.per_prompt else None
        """Each prompt's metric in the unpatched clean and corrupted runs (None for a scalar metric)."""
        self.values = {name: float(v.mean()) for name, v in runs.items()}

    def sizes(self) -> dict[str, int]:
        cfg = self.model.cfg
        return {"layer": cfg.n_layers, "pos": self.n_pos, "dest_pos": self.n_pos, "head": cfg.n_heads}

    def variants(self, spec: PatchSweep, source: str) -> list[Intervention]:
        """One intervention per cell of `spec`, in the order of the result's values (layer first)."""
        sizes = self.sizes()
        shape = [sizes[a] for a in spec.axes]
        cells = list(itertools.product(*(range(s) for s in shape[1:])))
        setter, template = self.setters[source], STAGE_HOOKS[spec.stage]
        return [
            Intervention(template.format(layer), cell_index(spec, cell), setter)
            for layer in range(shape[0])
            for cell in cells
        ]

    @torch.no_grad()
    def sweep(self, sweep: str | PatchSweep, direction: str = "denoising") -> PatchingResult:
        """Patch every cell of `sweep` in `direction` (one engine call)."""
        spec = resolve_sweep(sweep, direction, self.model)[0]
        shape = [self.sizes()[a] for a in spec.axes]
        out = self.per_prompt_values(spec, direction)
        intervals = None
        if self.prompt_values is not None:
            runs = self.prompt_values
            intervals = sweep_intervals(out, runs["clean"], runs["corrupted"], direction)
            out = out.mean(0)
        return PatchingResult(
            spec.name,
            spec.axes,
            out.reshape(shape),
            direction,
            self.metric.name,
            self.values["clean"],
            self.values["corrupted"],
            intervals=intervals,
        )

    @torch.no_grad()
    def per_prompt_values(
        self, sweep: str | PatchSweep, direction: str = "denoising"
    ) -> Float[Tensor, "..."]:
        """The metric of each prompt after each patch of `sweep`, [prompt, *cell axes] (one engine call);
        for a metric with one value for all prompts, just the cells' values [*cell axes]."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, self.model)
        shape = [self.sizes()[a] for a in spec.axes]
        out = torch.stack(self.engine.run(self.tokens[base_name], self.variants(spec, source_name)))
        out = out.float().cpu()
        return out.T.reshape(-1, *shape) if self.per_prompt else out.reshape(shape)

    @torch.no_grad()
    def cells(self, sweep: str | PatchSweep, direction: str, cells: Int[Tensor, " cell"]) -> Tensor:
        """Exact values of some cells of a sweep (flat indices into its values), one engine call."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, self.model)
        every = self.variants(spec, source_name)
        out = torch.stack(self.engine.run(self.tokens[base_name], [every[i] for i in cells.tolist()]))
        return out.float().cpu().mean(-1) if self.per_prompt else out.float().cpu()


def run_sweeps(
    model: torch.nn.Module,
    pair: PatchingPair,
    sweeps: Sequence[str] = tuple(SWEEPS),
    *,
    metric: Any = None,
    direction: str = "denoising",
    memory_mb: float = 256.0,
    readout: Any = None,
) -> dict[str, PatchingResult]:
    """Several sweeps on the task's clean/corrupted pair, sharing the cached runs (arguments as `Patcher`).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> found = mechmem.run_sweeps(model, pair, ["resid_pre", "attn_head_out_all_pos"])
        >>> found["attn_head_out_all_pos"].axes, tuple(found["attn_head_out_all_pos"].values.shape)
        (('layer', 'head'), (2, 3))
    """
    patcher = Patcher(
        model, pair.clean, pair.corrupted, metric, pair=pair, memory_mb=memory_mb, readout=readout
    )
    return {name: patcher.sweep(name, direction) for name in sweeps}


def plot_patching(result: PatchingResult) -> Any:
    """Heatmap(s) of a sweep, centred on the unpatched run's metric; one panel per layer for 3-axis sweeps.

    Cells whose effect's 95% interval (value - baseline, over prompts) includes 0 are hatched: a colour there
    is not told apart from no effect. A refused normalisation (the clean - corrupted gap's interval includes
    0) is said in the title."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    from mechmem.plotting import plt

    values = result.values.detach().cpu().float().numpy()
    undecided = result.effect_undecided()
    flat = np.zeros(values.shape, dtype=bool) if undecided is None else undecided.numpy()
    panels = [(values, flat)] if values.ndim == 2 else list(zip(values, flat))
    rows, cols = (result.axes[0], result.axes[1]) if values.ndim == 2 else result.axes[1:]
    span = float(abs(values - result.baseline).max()) or 1.0
    fig, axs = plt.subplots(1, len(panels), figsize=(1 + 3.2 * len(panels), 3), squeeze=False)
    for i, (ax, (panel, hatched)) in enumerate(zip(axs[0], panels)):
        im = ax.imshow(
            panel, cmap="RdBu", vmin=result.baseline - span, vmax=result.baseline + span, aspect="auto"
        )
        boxes = [Rectangle((c - 0.5, r - 0.5), 1, 1) for r, c in zip(*np.nonzero(hatched))]
        ax.add_collection(PatchCollection(boxes, facecolor="none", edgecolor="0.45", hatch="///", lw=0))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(cols)
        ax.set_ylabel(rows)
        ax.set_title(result.sweep if values.ndim == 2 else f"{result.sweep} layer {i}", fontsize=9)
    notes = []
    if undecided is not None:
        notes.append(f"hatched: 95% interval of the effect includes 0 ({result.intervals.n_prompts} prompts)")
    if result.normalised_refused:
        notes.append("clean - corrupted gap not told apart from 0: no normalised effect")
    if notes:
        fig.suptitle("; ".join(notes), fontsize=8, y=1.0)
    fig.colorbar(im, ax=list(axs[0]), label=f"{result.metric} ({result.direction})")
    return fig


__all__ = [
    "DIRECTIONS",
    "SWEEPS",
    "PatchSweep",
    "Patcher",
    "PatchingMetric",
    "PatchingResult",
    "SweepIntervals",
    "cell_index",
    "model_sweeps",
    "plot_patching",
    "resolve_metric",
    "run_sweeps",
    "sweep_intervals",
]
