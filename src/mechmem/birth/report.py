"""Figures and the markdown report of the birth reproduction (`analyses/reproduce_birth.py`).

Plot functions take metric histories (lists of `metrics.jsonl` records) and return matplotlib Figures; the
report compares each statement of the paper with the number our runs give, computed by a fixed rule (no hand
tuning), and says whether it holds.
"""

from pathlib import Path
from typing import Any

import torch

from mechmem.birth.experiments import Run, Scale, at_step, final, first_step
from mechmem.plotting import plt

History = list[dict[str, Any]]
PROBES = [("wo2_recall", "W_O^2 recall"), ("wk2_recall", "W_K^2 recall"), ("wk1_recall", "W_K^1 recall (all)"),
          ("wk1_recall_64", "W_K^1 recall (first 64)")]


def _curve(ax: Any, history: History, key: str, **kw: Any) -> None:
    pts = [(r["step"], r[key]) for r in history if isinstance(r.get(key), float)]
    if pts:
        ax.plot(*zip(*pts), **kw)


def plot_training(history: History, title: str) -> Any:
    """Accuracies and memory probes of one run over training."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
    for key, label in [("icl_acc", "in-context acc"), ("first_acc", "1st-occurrence acc"),
                       ("attn0_prev", "layer-0 prev-token attention"), ("attn1_induction", "layer-1 induction attention")]:
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
    for key, label in [("global_loss", "global loss"), ("icl_loss", "in-context loss"), ("wf_kl", "W_F KL to pi_b")]:
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


def statements(h: dict[str, History], scale: Scale) -> list[tuple[str, str, bool | None]]:
    """(paper statement, our number, holds?) for every claim the runs can check."""
    fs = scale.freeze_step
    out: list[tuple[str, str, bool | None]] = []

    def acc(name: str) -> float:
        return final(h[name], "eval_icl_acc") if name in h else float("nan")

    if "depth_2l_fixed" in h:
        v = acc("depth_2l_fixed")
        out.append(("2-layer transformer, fixed triggers: > 99% in-context accuracy", f"{v:.3f}", v > 0.99))
    if "depth_2l_random" in h:
        v = acc("depth_2l_random")
        out.append(("2-layer transformer, random triggers: about 95%", f"{v:.3f}", v > 0.9))
    if "depth_1l_fixed" in h and "depth_1l_random" in h:
        a, b = acc("depth_1l_fixed"), acc("depth_1l_random")
        two = min(acc("depth_2l_fixed"), acc("depth_2l_random"))
        out.append(("1-layer transformer: about 55%, well below 2 layers",
                    f"fixed {a:.3f}, random {b:.3f}", max(a, b) < two - 0.1))
    if "freeze_wk1_wk2" in h:
        v = at_step(h["freeze_wk1_wk2"], "wo2_recall", fs)
        out.append((f"W_O^2 learns its associations alone, with W_K^1, W_K^2 at random init (recall at step {fs})",
                    f"{v:.3f}", v >= 0.9))
    if "freeze_wo2" in h and "freeze_none" in h:
        a, b = at_step(h["freeze_wo2"], "icl_acc", fs), at_step(h["freeze_none"], "icl_acc", fs)
        out.append((f"key-query matrices learn nothing useful until W_O^2 has learned (in-context acc at step {fs}: "
                    "W_O^2 frozen vs joint)", f"{a:.3f} vs {b:.3f}", a < 0.5 * b))
    if "freeze_wk1" in h and "freeze_wk2" in h:
        a, b = at_step(h["freeze_wk1"], "icl_acc", fs), at_step(h["freeze_wk2"], "icl_acc", fs)
        out.append((f"W_K^2 is easier to learn with W_K^1 frozen than the reverse (in-context acc at step {fs})",
                    f"{a:.3f} vs {b:.3f}", a > b))
    if "freeze_none" in h:
        early = first_step(h["freeze_none"], "wk1_recall_64", 0.5)
        late = first_step(h["freeze_none"], "wk1_recall", 0.5)
        out.append(("W_K^1 fits early positions before late ones (first step with recall >= 0.5: first 64 vs all)",
                    f"{early} vs {late}", early is not None and (late is None or early < late)))
    if "ffn_joint" in h:
        hist = h["ffn_joint"]
        g0, g1 = at_step(hist, "global_loss", 0), final(hist, "global_loss")
        t_global = first_step(hist, "global_loss", g1 + 0.1 * (g0 - g1), below=True)
        t_icl = first_step(hist, "icl_acc", 0.9 * final(hist, "icl_acc"))
        out.append(("trained jointly, the global bigram is learned before the induction head (step of 90% of the "
                    "global-loss drop vs step of 90% of final in-context acc)", f"{t_global} vs {t_icl}",
                    t_global is not None and t_icl is not None and t_global < t_icl))
    return out


def markdown(
    runs: list[Run], h: dict[str, History], scale: Scale, *, command: str, figures: dict[str, str],
    wall_s: float,
) -> str:
    """The reproduction document."""
    by_group: dict[str, list[Run]] = {}
    for run in runs:
        by_group.setdefault(run.group, []).append(run)
    lines = [
        "# Reproduction: Birth of a Transformer: A Memory Viewpoint (Bietti et al., 2023)",
        "",
        "Generated by `analyses/reproduce_birth.py`; do not edit by hand (edit `src/mechmem/birth/report.py`).",
        "",
        f"Command: `{command}` ({wall_s / 60:.1f} min of training on this machine).",
        "",
        f"Scale: d={scale.d_model}, T={scale.seq_len}, batch {scale.batch_size}, SGD lr {scale.lr} (momentum 0.9, "
        f"weight decay 1e-4), {scale.steps} steps (simplified model) / {scale.full_steps} (full model and W_F), "
        f"freezing until step {scale.freeze_step}; metrics on each fresh training batch before the step, "
        f"held-out metrics (`eval_*`) on {scale.eval_samples} sequences.",
        "",
        "## The paper's statements side by side",
        "",
        "| paper | ours | holds |",
        "|---|---|---|",
    ]
    for claim, ours, ok in statements(h, scale):
        lines.append(f"| {claim} | {ours} | {'yes' if ok else 'no' if ok is not None else '-'} |")
    lines += ["", "## Runs", "", "| run | experiment | in-context acc (train batch) | held-out | W_O^2 | W_K^2 | "
              "W_K^1 all / 64 | W_F KL |", "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        if run.name not in h:
            continue
        r = h[run.name]

        def f(key: str) -> str:
            v = final(r, key)
            return "-" if v != v else f"{v:.3f}"

        held = f("eval_icl_acc") + (f" (OOD {f('eval_ood_icl_acc')})" if run.task.outputs == "ood" else "")
        lines.append(f"| {run.label} | {run.group} | {f('icl_acc')} | {held} | {f('wo2_recall')} | "
                     f"{f('wk2_recall')} | {f('wk1_recall')} / {f('wk1_recall_64')} | {f('wf_kl')} |")
    lines += [""]
    for key, caption in figures.items():
        lines += [f"### {caption}", "", f"![{caption}](figures/{key})", ""]
    return "\n".join(lines) + "\n"
