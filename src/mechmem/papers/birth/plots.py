"""Figures of the birth reproduction: training curves, freezing curves, final accuracies, attention maps.

Every plot function takes metric histories (lists of `metrics.jsonl` records) or a model and returns a matplotlib
Figure; `make_figures` saves all of them for a finished suite.
"""

from pathlib import Path
from typing import Any

import torch

from mechmem.papers.birth.experiments import Run, Scale, final, read_history
from mechmem.checkpoint import load_checkpoint
from mechmem.cli import save_figure
from mechmem.plotting import plt

History = list[dict[str, Any]]
PROBES = [
    ("wo2_recall", "W_O^2 recall"),
    ("wk2_recall", "W_K^2 recall"),
    ("wk1_recall", "W_K^1 recall (all)"),
    ("wk1_recall_64", "W_K^1 recall (first 64)"),
]


def _curve(ax: Any, history: History, key: str, **kw: Any) -> None:
    pts = [(r["step"], r[key]) for r in history if isinstance(r.get(key), float)]
    if pts:
        ax.plot(*zip(*pts), **kw)


def plot_training(history: History, title: str) -> Any:
    """Accuracies and memory probes of one run over training."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    for key, label in [
        ("icl_acc", "in-context acc"),
        ("first_acc", "1st-occurrence acc"),
        ("attn0_prev", "layer-0 prev-token attention"),
        ("attn1_induction", "layer-1 induction attention"),
    ]:
        _curve(left, history, key, label=label)
    for key, label in PROBES:
        _curve(right, history, key, label=label)
    for ax, name in ((left, "accuracy"), (right, "memory recall")):
        ax.set_xlabel("step")
        ax.set_ylabel(name)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_freezing(histories: dict[str, History], labels: dict[str, str], freeze_step: int) -> Any:
    """Fig. 3 analogue: in-context accuracy and the three probes for each freezing schedule."""
    keys = [("icl_acc", "in-context acc")] + PROBES
    fig, axes = plt.subplots(1, len(keys), figsize=(3.1 * len(keys), 3.0), sharey=True)
    for name, history in histories.items():
        for ax, (key, _) in zip(axes, keys):
            _curve(ax, history, key, label=labels[name])
    for ax, (_, title) in zip(axes, keys):
        ax.axvline(freeze_step, color="grey", lw=0.8, ls=":")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def plot_ffn(history: History) -> Any:
    """Fig. 4 analogue: losses, W_F KL to the bigram, accuracy and probes with every layer trained jointly."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    for key, label in [
        ("global_loss", "global loss"),
        ("icl_loss", "in-context loss"),
        ("wf_kl", "W_F KL to pi_b"),
    ]:
        _curve(left, history, key, label=label)
    left.set_ylabel("loss / KL")
    for key, label in [("icl_acc", "in-context acc")] + PROBES[:3]:
        _curve(right, history, key, label=label)
    right.set_ylim(-0.02, 1.02)
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_final_bars(rows: list[tuple[str, float]], title: str) -> Any:
    """Horizontal bars of a final metric per run."""
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(rows) + 1))
    ax.barh([r[0] for r in rows][::-1], [r[1] for r in rows][::-1], color="tab:blue")
    for i, (_, v) in enumerate(rows[::-1]):
        ax.text(min(v, 0.98), i, f"{v:.2f}", va="center", ha="right", color="white", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel(title)
    fig.tight_layout()
    return fig


def plot_attention(model: torch.nn.Module, task: Any, *, n_pos: int = 48, seed: int = 0) -> Any:
    """Attention maps of both layers on one fresh sequence; trigger positions are marked on the axes."""
    batch = task.eval_batch(1, generator=torch.Generator().manual_seed(seed))
    n_pos = min(n_pos, batch.tokens.shape[1])
    tokens = batch.tokens[:, :n_pos]
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(len(model.blocks))]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    chars = [task.stats.chars[int(t)].replace("\n", "\\n").replace(" ", "_") for t in tokens[0]]
    counter = batch.info["counter"][0, :n_pos]
    fig, axes = plt.subplots(1, len(names), figsize=(6.2 * len(names), 6))
    for layer, (ax, name) in enumerate(zip(axes, names)):
        ax.imshow(cache[name][0, 0].cpu(), cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(n_pos), chars, fontsize=6)
        ax.set_yticks(range(n_pos), chars, fontsize=6)
        for i, c in enumerate(counter.tolist()):
            if c:
                for lab in (ax.get_xticklabels()[i], ax.get_yticklabels()[i]):
                    lab.set_color("red" if c == 1 else "darkred")
                    lab.set_fontweight("bold")
        ax.set_title(f"layer {layer} attention (query rows, key columns; triggers in red)", fontsize=9)
    fig.tight_layout()
    return fig


def make_figures(
    runs: list[Run],
    h: dict[str, History],
    scale: Scale,
    *,
    run_dir: Path,
    fig_dir: Path,
    seed: int = 0,
    attention_ckpt: Path | None = None,
) -> dict[str, str]:
    """Save every figure the finished runs allow under `fig_dir`; returns {file name: caption}. Attention maps
    come from `attention_ckpt` when given (the `quick` preset run), else from the joint run of (a)."""
    figs: dict[str, str] = {}

    def add(key: str, caption: str, fig: Any) -> None:
        save_figure(fig, fig_dir / key)
        figs[key] = caption

    labels = {r.name: r.label for r in runs}
    if attention_ckpt is not None and (attention_ckpt.parent / "metrics.jsonl").exists():
        history = read_history(attention_ckpt.parent)
        add(
            "birth_preset_training.png",
            f"The `quick` preset run (`{attention_ckpt.parent}`, d=128, T=128, batch 64): accuracy and probes",
            plot_training(history, "quick preset: K=5 fixed triggers, head-only loss"),
        )
    if "freeze_none" in h:
        add(
            "birth_training.png",
            "Simplified model, all trained jointly: accuracy and memory probes",
            plot_training(h["freeze_none"], "K=5 fixed triggers, head-only loss"),
        )
        source = attention_ckpt or run_dir / "freeze_none" / "ckpt.pt"
        ckpt = load_checkpoint(source)
        add(
            "birth_attention.png",
            f"Attention maps of the trained simplified model `{source}` (layer 0: previous "
            "token; layer 1: induction)",
            plot_attention(ckpt.model, ckpt.task, seed=seed),
        )
        freezing = {r.name: h[r.name] for r in runs if r.group == "freezing" and r.name in h}
        add(
            "birth_freezing.png",
            f"(a) Freezing until step {scale.freeze_step} (paper Fig. 3)",
            plot_freezing(freezing, labels, scale.freeze_step),
        )
    if "ffn_joint" in h:
        add("birth_ffn.png", "(b) Joint training with W_F (paper Fig. 4)", plot_ffn(h["ffn_joint"]))
    for group, caption in (
        ("data", "(c) Data: held-out in-context accuracy"),
        ("depth", "(d) Full model, 1 vs 2 layers: held-out in-context accuracy"),
    ):
        rows = [(r.label, final(h[r.name], "eval_icl_acc")) for r in runs if r.group == group and r.name in h]
        if group == "data" and rows and "freeze_none" in h:
            rows.insert(0, ("K=5, fixed (joint run of (a))", final(h["freeze_none"], "eval_icl_acc")))
        if rows:
            add(f"birth_{group}.png", caption, plot_final_bars(rows, "held-out in-context accuracy"))
    return figs
