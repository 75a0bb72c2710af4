"""Patching sweep types, the result record with its intervals over prompts, and its figure.

Every cell is a mean over prompts with its 95% interval (`sweep_intervals`): the metric after the patch
and its change from the unpatched run (paired per prompt) get mean -+ 1.96 standard errors; the
normalised effect (patched - corrupted) / (clean - corrupted) gets a percentile bootstrap over prompts,
and is NaN where the gap's own interval includes 0 (`PatchingResult.normalised_refused`). A scalar
metric gives means without intervals.

Caveats: the intervals describe redraws of as many prompts (coverage measured in
docs/record/2026-12-02-intervals.md); an effect that a few prompts carry gets too narrow an interval.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.frames import grid_frame, shape_text, short_repr
from mechmem.analysis.stats import bootstrap_ratio, covers, mean_interval

DIRECTIONS = ("denoising", "noising")
BOUNDS = ("lower", "upper", "effect_lower", "effect_upper", "normalised_lower", "normalised_upper")
"""The bound tensors of `SweepIntervals`, in its field order."""


@dataclass(frozen=True)
class PatchSweep:
    """One sweep type: the activation patched and the axes of its cells (the first axis is always `layer`)."""

    name: str
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


@dataclass(frozen=True)
class SweepIntervals:
    """95% intervals over prompts of every cell of a sweep (each tensor has the values' shape)."""

    n_prompts: int
    """Prompts (clean/corrupted pairs) the means and intervals are over."""
    lower: Float[Tensor, "..."]
    """Bounds of the mean metric after each patch (mean -+ 1.96 standard errors over prompts)."""
    upper: Float[Tensor, "..."]
    effect_lower: Float[Tensor, "..."]
    """Bounds of the patch's effect, value - baseline, paired per prompt."""
    effect_upper: Float[Tensor, "..."]
    normalised_lower: Float[Tensor, "..."]
    """Bounds of (value - corrupted) / (clean - corrupted), a percentile bootstrap over prompts (NaN where the
    gap's interval includes 0)."""
    normalised_upper: Float[Tensor, "..."]
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
    """The 95% intervals over prompts of a sweep's cells from `per_prompt`, the metric of each prompt after
    each patch (prompts first), and each prompt's `clean` and `corrupted` metric. `direction`:
    "denoising" (the baseline is the corrupted run) or "noising"; `generator` draws the bootstrap
    (default: seeded with 0)."""
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
    """The metric after each patch of one sweep; `values` has one axis per name in `axes`, each a mean over
    prompts with its 95% interval in `intervals` (None for a scalar metric).

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
    per_prompt: Float[Tensor, "prompt ..."] | None = field(default=None, repr=False)
    """The metric of each prompt after each patch, prompts first (None for a scalar metric)."""
    decision: Any = None
    """The `FamilyDecision` of the cells' shares of the gap, where the sweep was decided over rounds."""

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
        """95% bounds of each value over prompts (None without intervals)."""
        return None if self.intervals is None else self.intervals.lower

    @property
    def upper(self) -> Float[Tensor, "..."] | None:
        return None if self.intervals is None else self.intervals.upper

    @property
    def normalised_refused(self) -> bool:
        """Whether the clean - corrupted gap's 95% interval includes 0 (then `normalised()` is NaN)."""
        return self.intervals is not None and bool(covers(*self.intervals.gap[1:]))

    def normalised(self) -> Float[Tensor, "..."]:
        """(value - corrupted) / (clean - corrupted): 0 = corrupted behaviour, 1 = clean behaviour; NaN
        where the gap is 0 or `normalised_refused`."""
        span = self.clean - self.corrupted
        if self.normalised_refused or not span:
            return torch.full_like(self.values, float("nan"))
        return (self.values - self.corrupted) / span

    def effect_undecided(self) -> Tensor | None:
        """Per cell, whether the effect's 95% interval includes 0; None without intervals."""
        if self.intervals is None:
            return None
        return covers(self.intervals.effect_lower, self.intervals.effect_upper)

    def to_dataframe(self) -> Any:
        """One row per patched cell: `sweep`, `stage`, `direction`, `method`, one column per axis, `value`,
        `lower` / `upper`, `effect_lower` / `effect_upper`, `normalised` and `normalised_lower` /
        `normalised_upper` (NaN bounds without intervals). A decided sweep adds `share`, its corrected
        bounds and `verdict`."""
        stage = getattr(SWEEPS.get(self.sweep), "stage", None)
        leading = {"sweep": self.sweep, "stage": stage, "direction": self.direction, "method": self.method}
        nan = torch.full_like(self.values.float(), float("nan"))
        bound = {k: nan if self.intervals is None else getattr(self.intervals, k).float() for k in BOUNDS}
        frame = grid_frame(
            self.values.float(), self.axes, lower=bound["lower"], upper=bound["upper"], leading=leading
        )
        bound["normalised"] = self.normalised().float()
        names = ("effect_lower", "effect_upper", "normalised", "normalised_lower", "normalised_upper")
        columns = {name: bound[name] for name in names}
        if (d := self.decision) is not None:
            columns |= {"share": d.mean, "share_corrected_lower": d.corrected_lower}
            columns |= {"share_corrected_upper": d.corrected_upper}
        for name, column in columns.items():
            frame[name] = column.detach().cpu().reshape(-1).numpy()
        if self.decision is not None:
            frame["verdict"] = self.decision.verdicts()
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
        out = {"sweep": self.sweep, "axes": list(self.axes), "values": self.values.tolist()}
        out |= {k: getattr(self, k) for k in ("direction", "metric", "clean", "corrupted", "method", "check")}
        out |= {"normalised": self.normalised().tolist(), "normalised_refused": self.normalised_refused}
        if self.decision is not None:
            out["decision"] = self.decision.to_dict()
        if iv is None:
            return out | {"interval": None}
        return out | {
            "interval": (
                f"95% over {iv.n_prompts} prompts: values and effects mean -+ 1.96 standard errors, "
                "normalised effects a percentile bootstrap of the ratio (200 resamples)"
            ),
            "n_prompts": iv.n_prompts,
            **{name: getattr(iv, name).tolist() for name in BOUNDS},
            "gap": dict(zip(("value", "lower", "upper"), iv.gap)),
        }


def hatch_cells(ax: Any, mask: np.ndarray) -> None:
    """Hatch the heatmap cells where `mask` [row col] is True (an effect's interval includes 0)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    boxes = [Rectangle((c - 0.5, r - 0.5), 1, 1) for r, c in zip(*np.nonzero(mask))]
    ax.add_collection(PatchCollection(boxes, facecolor="none", edgecolor="0.45", hatch="///", lw=0))


POSITION_AXES = ("pos", "dest_pos")
"""The sweep axes that index the prompt's positions."""


def plot_patching(result: PatchingResult, *, positions: Sequence[str] | None = None) -> Any:
    """Heatmap(s) of a sweep, centred on the unpatched run's metric; one panel per layer for 3-axis sweeps.
    Cells whose effect's 95% interval includes 0 are hatched; a refused normalisation is said in the title.
    `positions` labels a position axis (`frames.position_labels` of a prompt: "3 (pos0)", ...; default the
    indices).

    Example:
        >>> import mechmem, torch
        >>> from mechmem.analysis.frames import position_labels
        >>> model = mechmem.planted_induction_model()
        >>> pair = mechmem.build_task("repeats", {"d_vocab": 12, "half": 4}).patching_pair(
        ...     8, generator=torch.Generator().manual_seed(0))
        >>> result = mechmem.run_sweeps(model, pair, ["resid_pre"])["resid_pre"]
        >>> labels = position_labels(pair.clean[0], None)          # "token (posN)"
        >>> fig = plot_patching(result, positions=labels)
        >>> [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels
        True
    """
    from mechmem.plotting import cell_ticks, plt

    values = result.values.detach().cpu().float().numpy()
    undecided = result.effect_undecided()
    flat = np.zeros(values.shape, dtype=bool) if undecided is None else undecided.numpy()
    panels = [(values, flat)] if values.ndim == 2 else list(zip(values, flat))
    rows, cols = result.axes[-2:]
    labels = {axis: positions if axis in POSITION_AXES else None for axis in (rows, cols)}
    span = float(abs(values - result.baseline).max()) or 1.0
    fig, axs = plt.subplots(
        1, len(panels), figsize=(1 + 3.2 * len(panels), 3), squeeze=False, layout="constrained"
    )
    for i, (ax, (panel, hatched)) in enumerate(zip(axs[0], panels)):
        im = ax.imshow(
            panel, cmap="RdBu", vmin=result.baseline - span, vmax=result.baseline + span, aspect="auto"
        )
        hatch_cells(ax, hatched)
        cell_ticks(ax, panel.shape, row_labels=labels[rows], col_labels=labels[cols])
        ax.set(xlabel=cols, ylabel=rows)
        ax.set_title(result.sweep if values.ndim == 2 else f"{result.sweep} layer {i}", fontsize=9)
    notes = []
    if undecided is not None:
        notes.append(f"hatched: 95% interval of the effect includes 0 ({result.intervals.n_prompts} prompts)")
    if result.normalised_refused:
        notes.append("clean - corrupted gap not told apart from 0: no normalised effect")
    if notes:
        fig.suptitle("\n".join(notes), fontsize=8)
    fig.colorbar(im, ax=list(axs[0]), label=f"{result.metric} ({result.direction})")
    return fig
