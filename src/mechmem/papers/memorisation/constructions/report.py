"""Figures and the markdown report of the constructions reproduction."""

from pathlib import Path

import torch

from mechmem.papers.memorisation.constructions.experiments import (
    THRESHOLDS,
    AppendixACheck,
    CapacityResult,
    SweepResult,
    ln_scale,
)
from mechmem.plotting import plt

LABELS = {
    "trained": "trained",
    "rand_emb": "rand-emb",
    "published_hybrid": "hybrid (published E)",
    "published_hand": "hand-coded (published)",
    "keyvalue_hybrid": "hybrid (our key-value E)",
    "keyvalue_hand": "hand-coded (our key-value table)",
}


def sweep_figure(sweep: SweepResult):
    """Heatmap of hand-coded accuracy over S x top_fraction."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    im = ax.imshow(
        torch.tensor(sweep.accuracy), aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1
    )
    ax.set_yticks(range(len(sweep.s_values)), [str(s) for s in sweep.s_values])
    ticks = list(range(0, len(sweep.top_fractions), 2))
    ax.set_xticks(ticks, [f"{sweep.top_fractions[i]:.2f}" for i in ticks], rotation=45)
    ax.set_xlabel("top_fraction")
    ax.set_ylabel("S (neurons per label)")
    ax.set_title(f"published construction, d={sweep.d}, {sweep.n_facts} facts: accuracy")
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def capacity_figure(result: CapacityResult):
    """Max facts vs d for each mode and threshold, with the fixed-exponent fits."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    grid = torch.linspace(min(result.ds), max(result.ds), 50)
    for ax, thr in zip(axes, THRESHOLDS):
        for j, mode in enumerate(result.modes):
            pts = [(d, result.get(mode, d, thr)) for d in result.ds if result.get(mode, d, thr)]
            if not pts:
                continue
            color = f"C{j}"
            ax.plot(*zip(*pts), "o", color=color, label=LABELS.get(mode, mode))
            a = result.fits(mode, thr)["a"]
            ax.plot(grid, [a * ln_scale(float(d)) for d in grid], "-", color=color, alpha=0.5)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("d (= d_mlp = n_out; n_in = 2d)")
        ax.set_title(f"acc {'= 1' if thr == 1.0 else '>= 0.9'}")
    axes[0].set_ylabel("max facts")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def histogram_figure(rows: dict[str, dict[str, torch.Tensor]]):
    """Their Figures 6-8: per model (row), histograms of embedding weights, unembedding weights, activations."""
    cols = ("embedding", "unembedding", "activation")
    fig, axes = plt.subplots(len(rows), 3, figsize=(12, 2.3 * len(rows)), squeeze=False)
    for r, (name, tensors) in enumerate(rows.items()):
        for c, col in enumerate(cols):
            values = tensors[col].flatten().float()
            ax = axes[r, c]
            ax.hist(values.numpy(), bins=60, color=f"C{c}")
            ax.set_title(f"{name}: {col}", fontsize=9)
            if col == "activation":
                ax.set_yscale("log")
                ax.set_title(
                    f"{name}: activation ({float((values == 0).float().mean()):.0%} zero)", fontsize=9
                )
    fig.tight_layout()
    return fig


def _cap(result: CapacityResult, mode: str, d: int, thr: float) -> str:
    v = result.get(mode, d, thr)
    return "-" if v is None else str(v)


def capacity_table(result: CapacityResult) -> str:
    """Markdown table: capacity per mode and d at both thresholds, fits, ratios to trained."""
    head = "| mode | " + " | ".join(f"d={d} acc=1 | d={d} acc>=0.9" for d in result.ds)
    head += " | a (acc=1) | a (acc>=0.9) | exponent (acc>=0.9) | trained / mode (acc>=0.9, fit a) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for mode in result.modes:
        if mode not in result.capacity:
            continue
        cells = [f"{_cap(result, mode, d, 1.0)} | {_cap(result, mode, d, 0.9)}" for d in result.ds]
        f1, f9 = result.fits(mode, 1.0), result.fits(mode, 0.9)
        ratio = result.fit_ratio("trained", mode, 0.9) if "trained" in result.capacity else float("nan")
        lines.append(
            f"| {LABELS.get(mode, mode)} | "
            + " | ".join(cells)
            + f" | {f1['a']:.2f} | {f9['a']:.2f} | {f9['exponent']:.2f} | {ratio:.2f}x |"
        )
    return "\n".join(lines)


def ratio_table(result: CapacityResult, pairs: list[tuple[str, str]]) -> str:
    """Per-d capacity ratios numerator / denominator at both thresholds."""
    lines = ["| ratio | " + " | ".join(f"d={d} acc=1 | d={d} acc>=0.9" for d in result.ds) + " |"]
    lines.append("|" + "---|" * (1 + 2 * len(result.ds)))
    for num, den in pairs:
        cells = []
        for d in result.ds:
            for thr in THRESHOLDS:
                a, b = result.get(num, d, thr), result.get(den, d, thr)
                cells.append(f"{a / b:.2f}x" if a and b else "-")
        lines.append(f"| {LABELS.get(num, num)} / {LABELS.get(den, den)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def appendix_table(check: AppendixACheck) -> str:
    lines = [
        "| n_in | facts | acc, d_mlp = n_in + 1 | acc, d_mlp = n_in + output bias |",
        "|---|---|---|---|",
    ]
    for n, a, b in zip(check.n_in, check.acc_bias_neuron, check.acc_output_bias):
        lines.append(f"| {n} | {n * n} | {a:.3f} | {b:.3f} |")
    return "\n".join(lines)


def write_report(path: Path, sections: list[tuple[str, str]]) -> Path:
    """Assemble titled markdown sections into one file."""
    text = "\n\n".join(f"## {title}\n\n{body.strip()}" if title else body.strip() for title, body in sections)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path
