"""Figures of the birth reproduction: training curves, freezing curves, final accuracies, attention maps.

Every plot function takes what the run record holds (metric histories as lists of `metrics.jsonl` records,
final values, stored attention maps) and returns a matplotlib Figure; `mechmem_papers.birth.page` places them.
"""

from typing import Any

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


def plot_attention(maps: dict[str, Any]) -> Any:
    """Attention maps of both layers on one sequence; triggers are marked on the axes.

    From the record's `attention` entry ("chars", "counter": occurrence counter per position, "patterns":
    [layer][query_pos][key_pos]).
    """
    chars = [c.replace("\n", "\\n").replace(" ", "_") for c in maps["chars"]]
    n_pos, patterns = len(chars), maps["patterns"]
    fig, axes = plt.subplots(1, len(patterns), figsize=(6.2 * len(patterns), 6), squeeze=False)
    for layer, (ax, pattern) in enumerate(zip(axes[0], patterns)):
        ax.imshow(pattern, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(n_pos), chars, fontsize=6)
        ax.set_yticks(range(n_pos), chars, fontsize=6)
        for i, c in enumerate(maps["counter"]):
            if c:
                for lab in (ax.get_xticklabels()[i], ax.get_yticklabels()[i]):
                    lab.set_color("red" if c == 1 else "darkred")
                    lab.set_fontweight("bold")
        ax.set_title(f"layer {layer} attention (query rows, key columns; triggers in red)", fontsize=9)
    fig.tight_layout()
    return fig


def plot_ladder(curves: dict[str, dict[str, list[Any]]]) -> Any:
    """Held-out in-context accuracy over training of every ladder run, one panel per model ("2l_fixed", ...);
    `curves` maps a cell key "RUNG/MODEL" to its record's columns {"step": [...], "eval_icl_acc": [...]}."""
    models = sorted({key.split("/")[1] for key in curves})
    fig, axes = plt.subplots(1, len(models), figsize=(3.2 * len(models), 3.2), squeeze=False)
    for ax, model in zip(axes[0], models):
        for key, columns in curves.items():
            if key.endswith(f"/{model}"):
                pts = [(s, v) for s, v in zip(columns["step"], columns["eval_icl_acc"]) if v is not None]
                ax.plot(*zip(*pts), label=key.split("/")[0])
        ax.set_title(model)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("held-out in-context accuracy")
    fig.tight_layout()
    return fig
