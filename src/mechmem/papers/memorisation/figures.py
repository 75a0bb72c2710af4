"""Figures of the memorisation page, each drawn from run-record data (no training): a matplotlib `Figure`."""

from typing import Any

import numpy as np

from mechmem.papers.memorisation.fits import ScalingFit
from mechmem.plotting import plt


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


def plot_convergence(points: dict[str, list[tuple[int, int, int]]], *, published: float | None = None) -> Any:
    """Capacity (Any, and All as a dashed line) against the epoch cap per lr phase, one colour per variant.

    Args:
        points: variant -> [(max_epochs, any, all)], one per schedule the variant ran with.
        published: a published capacity to mark (horizontal line), if any.
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (label, pts) in enumerate(points.items()):
        epochs, any_, all_ = zip(*sorted(pts))
        ax.plot(epochs, any_, "o-", color=f"C{i % 10}", label=f"{label} (Any)")
        ax.plot(epochs, all_, "x--", color=f"C{i % 10}", alpha=0.6, label=f"{label} (All)")
    if published is not None:
        ax.axhline(published, color="k", lw=0.8, ls=":", label=f"published, no MLP ({published:g})")
    ax.set(xscale="log", xlabel="epoch cap per lr phase (patience scaled with it)", ylabel="facts stored")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
