"""Ablation results: the metric after each ablation, every delta's 95% interval over sequences, the tables
and the figure.

A delta is the metric after an ablation minus the unablated metric, each sequence paired with itself;
its interval is a percentile bootstrap over sequences of sum_i (ablated_i - unablated_i) / sum_i
weight_i (`stats.bootstrap_ratio`), for an `exact.SequenceMetric`.
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.frames import concat, grid_frame, shape_text, short_repr
from mechmem.analysis.patching.result import hatch_cells
from mechmem.analysis.stats import RESAMPLES, bootstrap_ratio, covers, format_interval
from mechmem.models.parts import Head
from mechmem.plotting import plt


@dataclass(frozen=True)
class AblationIntervals:
    """95% intervals over sequences of every delta, shaped like the result's values."""

    n_sequences: int
    """Sequences the metric and the bootstrap are over."""
    heads_lower: Float[Tensor, "method layer head"]
    heads_upper: Float[Tensor, "method layer head"]
    attn_lower: Float[Tensor, "method layer"]
    attn_upper: Float[Tensor, "method layer"]
    mlp_lower: Float[Tensor, "method layer"] | None = None
    mlp_upper: Float[Tensor, "method layer"] | None = None

    def bounds(self, component: str) -> tuple[Tensor, Tensor] | None:
        """(lower, upper) of "head", "attn" or "mlp" (None for an absent MLP)."""
        prefix = {"head": "heads", "attn": "attn", "mlp": "mlp"}[component]
        lower = getattr(self, f"{prefix}_lower")
        return None if lower is None else (lower, getattr(self, f"{prefix}_upper"))


@dataclass(frozen=True)
class SequenceChanges:
    """Per sequence, each ablation's change of a ratio-of-sums metric's numerator, with the sequences'
    weights: delta = changes.sum(0) / weights.sum()."""

    changes: Float[Tensor, "sequence variant"]
    """In `ablate_heads`' order: per method, per layer, each head, the attention layer, the MLP."""
    weights: Float[Tensor, " sequence"]
    numerators: Float[Tensor, " sequence"]
    """Each sequence's unablated numerator (baseline = numerators.sum() / weights.sum())."""

    def intervals(self, n_methods: int, cfg: Any) -> AblationIntervals:
        """Every delta's 95% percentile bootstrap interval over the sequences (resamples seeded with 0)."""
        bounds = bootstrap_ratio(self.changes, self.weights, generator=torch.Generator().manual_seed(0))
        return delta_intervals(*bounds, n_methods, cfg, n_sequences=len(self.weights))


@dataclass
class AblationResult:
    """Metric after ablating each head ([method layer head]) and each layer ([method layer]); `intervals`
    holds every delta's 95% interval over sequences (None for a scalar metric)."""

    metric_name: str
    baseline: float
    methods: tuple[str, ...]
    heads: Float[Tensor, "method layer head"]
    attn_layers: Float[Tensor, "method layer"]
    mlp_layers: Float[Tensor, "method layer"] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    intervals: AblationIntervals | None = None
    sequences: SequenceChanges | None = field(default=None, repr=False)
    """The per-sequence changes the deltas and intervals come from (None for a scalar metric)."""
    decision: Any = None
    """The `FamilyDecision` of every delta, [method, variant], where the ablations were decided over
    rounds."""

    def __post_init__(self) -> None:
        m, n_layers = len(self.methods), self.heads.shape[1]
        if self.heads.ndim != 3 or self.heads.shape[0] != m:
            raise ValueError(
                f"heads must be [method layer head] with {m} methods, got {tuple(self.heads.shape)}"
            )
        for name in ("attn_layers", "mlp_layers"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != (m, n_layers):
                raise ValueError(f"{name} must be [method layer] = {(m, n_layers)}, got {tuple(value.shape)}")

    def rows(self) -> list[dict[str, Any]]:
        """One record per ablation: layer, head (None for a whole layer), component, method, metric, delta,
        `delta_lower`, `delta_upper` (None without intervals)."""
        out = []
        for i, method in enumerate(self.methods):
            for layer in range(self.heads.shape[1]):
                for component, values in self.components().items():
                    bounds = None if self.intervals is None else self.intervals.bounds(component)
                    for at in ((i, layer, *rest) for rest in np.ndindex(values.shape[2:])):
                        v = float(values[at])
                        lower, upper = (None, None) if bounds is None else (float(b[at]) for b in bounds)
                        row = {"layer": layer, "head": at[2] if len(at) > 2 else None, "component": component}
                        row |= {"method": method, "metric": v, "delta": v - self.baseline}
                        out.append(row | {"delta_lower": lower, "delta_upper": upper})
        return out

    def components(self) -> dict[str, Tensor]:
        """The values of each component present: "head" [method layer head], "attn", "mlp" [method layer]."""
        parts = {"head": self.heads, "attn": self.attn_layers, "mlp": self.mlp_layers}
        return {name: values for name, values in parts.items() if values is not None}

    def to_dataframe(self) -> Any:
        """One row per ablation: `method`, `component` ("head", "attn", "mlp"), `layer`, `head` (<NA> for a
        whole layer), `value`, `delta` (value - baseline) and `lower` / `upper` (NaN without intervals)."""
        methods = {"method": self.methods}
        parts = []
        for component, values in self.components().items():
            axes = ("method", "layer", "head")[: values.dim()]
            nan = torch.full_like(values, float("nan"))
            lower, upper = (nan, nan) if self.intervals is None else self.intervals.bounds(component)
            parts.append(
                grid_frame(
                    values, axes, lower=lower, upper=upper, labels=methods, leading={"component": component}
                )
            )
        columns = ["method", "component", "layer", "head", "value", "lower", "upper"]
        frame = concat(parts, columns)[columns]
        frame["head"] = frame["head"].astype("Int64")
        frame.insert(5, "delta", frame["value"] - self.baseline)
        return frame

    def __repr__(self) -> str:
        deltas, largest, iv = self.heads - self.baseline, "", self.intervals
        if deltas.numel():
            method, layer, head = np.unravel_index(int(deltas.abs().argmax()), tuple(deltas.shape))
            where = f"{Head(int(layer), int(head))} {self.methods[method]}"
            largest = f"largest head delta {float(deltas[method, layer, head]):+.3g} ({where})"
            if iv is not None:
                lower, upper = (b[method, layer, head] for b in iv.bounds("head"))
                largest += f" {format_interval(lower, upper, '+.3g')}"
        spread = "no intervals" if iv is None else f"95% intervals over {iv.n_sequences} sequences"
        return short_repr(
            "AblationResult",
            f"{self.metric_name.split(':')[0]!r} baseline {self.baseline:.3g}",
            f"methods {', '.join(self.methods)}",
            shape_text(("layer", "head"), self.heads.shape[1:]),
            largest,
            spread,
        )

    def delta_table(self, method: int) -> tuple[list[list[Any]], list[str]]:
        """(rows, headers) of a layer x head table of deltas for `methods[method]`, plus attn, mlp columns."""
        layers = list(self.components().items())[1:]
        rows = []
        for layer in range(self.heads.shape[1]):
            row = [layer, *(self.heads[method, layer] - self.baseline).tolist()]
            rows.append(row + [float(values[method, layer]) - self.baseline for _, values in layers])
        return rows, ["layer", *(f"H{h}" for h in range(self.heads.shape[2])), *(name for name, _ in layers)]

    def interval_table(self, method: int) -> tuple[list[list[Any]], list[str]] | None:
        """(rows, headers) laid out as `delta_table`, each cell "[lower, upper]"; None without intervals."""
        if self.intervals is None:
            return None
        rows = []
        for layer in range(self.heads.shape[1]):
            row: list[Any] = [layer]
            for component in self.components():
                lower, upper = (b[method, layer].reshape(-1) for b in self.intervals.bounds(component))
                row += [format_interval(lo, hi) for lo, hi in zip(lower, upper)]
            rows.append(row)
        return rows, self.delta_table(method)[1]

    def to_dict(self) -> dict[str, Any]:
        iv = self.intervals
        interval = None
        if iv is not None:
            interval = (
                f"95% percentile bootstrap over {iv.n_sequences} sequences ({RESAMPLES} resamples) of each "
                "delta, every sequence paired with itself in the unablated run"
            )
        return {
            "metric": self.metric_name,
            "baseline": self.baseline,
            "methods": list(self.methods),
            "axes": {"heads": ["method", "layer", "head"], "layers": ["method", "layer"]},
            "interval": interval,
            "results": self.rows(),
            **self.info,
        } | ({} if self.decision is None else {"decision": self.decision.to_dict()})


def delta_intervals(
    lower: Tensor, upper: Tensor, n_methods: int, cfg: Any, *, n_sequences: int
) -> AblationIntervals:
    """`AblationIntervals` from the bounds of every ablation in `ablate_heads`' order."""
    lower, upper = (b.reshape(n_methods, cfg.n_layers, -1) for b in (lower, upper))
    h = cfg.n_heads
    mlp = (None, None) if cfg.attn_only else (lower[..., h + 1], upper[..., h + 1])
    return AblationIntervals(n_sequences, lower[..., :h], upper[..., :h], lower[..., h], upper[..., h], *mlp)


def plot_ablation(result: AblationResult) -> Any:
    """Heatmaps of delta per layer x head, one per method; hatched where the delta's interval includes 0."""
    deltas = result.heads - result.baseline
    lim = float(deltas.abs().max()) or 1.0
    n = len(result.methods)
    n_layers, n_heads = deltas.shape[1:]
    iv = result.intervals
    undecided = None if iv is None else covers(iv.heads_lower, iv.heads_upper).numpy()
    size = (1.0 + (1.2 + 0.7 * n_heads) * n, 1.2 + 0.6 * n_layers)
    fig, axes = plt.subplots(1, n, figsize=size, squeeze=False, layout="constrained")
    for k, (ax, method, d) in enumerate(zip(axes[0], result.methods, deltas)):
        im = ax.imshow(d.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set(title=f"{method} ablation", xlabel="head", xticks=range(n_heads), yticks=range(n_layers))
        for (i, j), v in np.ndenumerate(d.numpy()):
            color = "w" if abs(v) > 0.6 * lim else "k"
            ax.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=7, color=color)
        if undecided is not None:
            hatch_cells(ax, undecided[k])
    axes[0][0].set_ylabel("layer")
    if iv is not None:
        fig.suptitle(
            f"hatched: 95% interval of the delta includes 0 ({iv.n_sequences} sequences)", fontsize=8
        )
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=f"delta {result.metric_name.split(':')[0]}")
    return fig
