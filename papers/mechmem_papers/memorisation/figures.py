"""Figures of the memorisation page, each drawn from run-record data (no training): a matplotlib `Figure`."""

from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.lines import Line2D

from mechmem.plotting import plt
from mechmem_papers.memorisation.fits import ScalingFit
from mechmem_papers.memorisation.summary import MIXING_ORDER


def plot_scaling(fits: dict[str, ScalingFit], *, ceiling_per_d2: float = 4.0) -> Any:
    """Capacity against d (log-log) with both fits per label, and the ceiling n_in^2 = 4 d^2."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, (label, fit) in enumerate(fits.items()):
        colour = f"C{i % 10}"
        grid = np.geomspace(min(fit.d), max(fit.d) * 2, 50)
        ax.plot(fit.d, fit.capacity, "o", color=colour, label=label)
        ax.plot(
            grid, fit.a * grid**2 / np.log(grid), "-", color=colour, alpha=0.6, label=f"{fit.a:.2f} d^2/ln d"
        )
        if np.isfinite(fit.k):
            ax.plot(
                grid, fit.b * grid**fit.k, ":", color=colour, alpha=0.6, label=f"{fit.b:.2f} d^{fit.k:.2f}"
            )
    all_d = sorted({x for fit in fits.values() for x in fit.d})
    grid = np.geomspace(all_d[0], all_d[-1] * 2, 50)
    ax.plot(grid, ceiling_per_d2 * grid**2, "k--", lw=0.8, label="ceiling n_in^2 = 4 d^2")
    ax.set(
        xscale="log", yscale="log", xlabel="d (n_in = 2d, d_model = d_mlp = n_out = d)", ylabel="facts stored"
    )
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_e7_scaling(ours: dict[str, ScalingFit], authors: dict[str, ScalingFit]) -> Any:
    """Any at the authors' E7 schedule against d, ours (filled, solid) beside the authors' E7 (open, dashed),
    one colour per model, with the law a d^2 / ln d at the authors' fitted a (dotted)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, label in enumerate(dict.fromkeys([*ours, *authors])):
        colour = f"C{i % 10}"
        if label in ours:
            ax.plot(ours[label].d, ours[label].capacity, "o-", color=colour, label=f"{label} (ours)")
        if label in authors:
            fit = authors[label]
            ax.plot(fit.d, fit.capacity, "s--", color=colour, mfc="none", label=f"{label} (authors' E7)")
            grid = np.geomspace(min(fit.d), max(fit.d), 50)
            ax.plot(grid, fit.a * grid**2 / np.log(grid), ":", color=colour, lw=0.8)
    ax.plot([], [], "k:", lw=0.8, label="a d^2 / ln d (authors' a)")
    ax.set(
        xscale="log", yscale="log", xlabel="d (n_in = 2d, d_model = d_mlp = n_out = d)", ylabel="facts stored"
    )
    ax.set_xscale("log", base=2)
    ax.set_title("Any at E7's schedule of each d", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_sweep(sweep: dict[str, Any]) -> Any:
    """Heatmap of the published construction's accuracy over S x top_fraction (a `SweepResult` dict)."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    im = ax.imshow(np.array(sweep["accuracy"]), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1)
    ax.set_yticks(range(len(sweep["s_values"])), [str(s) for s in sweep["s_values"]])
    ticks = list(range(0, len(sweep["top_fractions"]), 2))
    ax.set_xticks(ticks, [f"{sweep['top_fractions'][i]:.2f}" for i in ticks], rotation=45)
    ax.set(xlabel="top_fraction", ylabel="S (neurons per label)")
    ax.set_title(f"published construction, d={sweep['d']}, {sweep['n_facts']} facts: accuracy")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def plot_capacity(
    points: dict[str, dict[str, list[tuple[int, int]]]], fits: dict[str, dict[str, ScalingFit]]
) -> Any:
    """Max facts against d per mode (label) and criterion ("1", "0.9"), with the fixed-exponent fits."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    all_d = sorted({d for by in points.values() for pts in by.values() for d, _ in pts})
    grid = np.linspace(min(all_d), max(all_d), 50)
    for ax, crit in zip(axes, ("1", "0.9")):
        for j, (label, by_crit) in enumerate(points.items()):
            if not by_crit.get(crit):
                continue
            ax.plot(*zip(*by_crit[crit]), "o", color=f"C{j}", label=label)
            ax.plot(grid, fits[label][crit].a * grid**2 / np.log(grid), "-", color=f"C{j}", alpha=0.5)
        ax.set(xscale="log", yscale="log", xlabel="d (= d_mlp = n_out; n_in = 2d)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"acc {'= 1' if crit == '1' else '>= 0.9'}")
    axes[0].set_ylabel("max facts")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_histograms(rows: dict[str, dict[str, dict[str, Any]]]) -> Any:
    """Their Figures 6-8 from stored counts.

    Per model (row), embedding, unembedding and activation histograms.
    """
    cols = ("embedding", "unembedding", "activation")
    fig, axes = plt.subplots(len(rows), 3, figsize=(12, 2.3 * len(rows)), squeeze=False)
    for r, (name, hists) in enumerate(rows.items()):
        for c, col in enumerate(cols):
            h, ax = hists[col], axes[r, c]
            edges = np.array(h["edges"])
            ax.stairs(h["counts"], edges, fill=True, color=f"C{c}")
            title = f"{name}: {col}"
            if col == "activation":
                ax.set_yscale("log")
                title += f" ({h['zero_share']:.0%} zero)"
            ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class ScheduleSeries:
    """One variant's capacities at each epoch cap it ran with (caps ascending)."""

    variant: str
    mixing: str
    mlp: bool
    norms: bool
    epochs: tuple[int, ...]
    any: tuple[int, ...]
    all: tuple[int, ...]


def plot_convergence(
    series: list[ScheduleSeries],
    *,
    published: float | None = None,
    published_mixings: tuple[str, ...] = ("2emb", "uniform"),
) -> Any:
    """Capacity against the epoch cap per lr phase: a column per mixing, Any above and All below.

    A line is one variant; its colour says whether it has norms, its marker whether it has an MLP, so that a
    column shows which components gain most from a longer schedule without a legend entry per variant.

    Args:
        series: the variants that ran with two or more schedules.
        published: a published MLP-less capacity to mark (dotted line) in the columns of `published_mixings`.
    """
    mixings = [m for m in MIXING_ORDER if any(s.mixing == m for s in series)]
    mixings += sorted({s.mixing for s in series} - set(mixings))
    fig, axes = plt.subplots(
        2, len(mixings), figsize=(3.6 * len(mixings), 6), sharex=True, sharey="row", squeeze=False
    )
    for c, mixing in enumerate(mixings):
        for s in (s for s in series if s.mixing == mixing):
            style = {"color": "C1" if s.norms else "C0", "marker": "o" if s.mlp else "x", "alpha": 0.7}
            axes[0, c].plot(s.epochs, s.any, "-", **style)
            axes[1, c].plot(s.epochs, s.all, "--", **style)
        for r, crit in enumerate(("Any", "All")):
            ax = axes[r, c]
            if published is not None and mixing in published_mixings:
                ax.axhline(published, color="k", lw=0.8, ls=":")
            ax.set_xscale("log")
            ax.set_title(f"{mixing}: {crit}", fontsize=10)
            if r == 1:
                ax.set_xlabel("epoch cap per lr phase")
        axes[0, 0].set_ylabel("facts stored (Any)")
        axes[1, 0].set_ylabel("facts stored (All)")
    handles = [
        Line2D([], [], color="C1", lw=2, label="norms"),
        Line2D([], [], color="C0", lw=2, label="no norms"),
        Line2D([], [], color="grey", marker="o", ls="", label="MLP"),
        Line2D([], [], color="grey", marker="x", ls="", label="no MLP"),
    ]
    if published is not None:
        handles.append(Line2D([], [], color="k", lw=0.8, ls=":", label=f"published, no MLP ({published:g})"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle("Capacity by epoch cap (patience scaled with it), one line per variant", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def plot_bits_per_parameter(
    ours: dict[str, float], published: dict[str, float], anchor: float, capped: set[str]
) -> Any:
    """Bits per trainable parameter per variant, ours (hatched: a capped schedule, a lower bound) and the
    published mean, with the anchor's line."""
    names = list(ours)
    fig, ax = plt.subplots(figsize=(11, 3.8))
    x = np.arange(len(names))
    bars = ax.bar(x - 0.2, [ours[n] for n in names], 0.4, label="ours (Any; hatched: capped schedule)")
    for bar, name in zip(bars, names):
        bar.set_hatch("//" if name in capped else "")
    ax.bar(x + 0.2, [published[n] for n in names], 0.4, label="published mean (Any)")
    ax.axhline(anchor, color="k", ls="--", lw=0.8, label=f"{anchor:g} bits / parameter (Allen-Zhu & Li)")
    ax.set_xticks(x, names, rotation=90, fontsize=6)
    ax.set(ylabel="bits per trained parameter")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
