"""Figures of the permutation-memory reproduction.

Each takes the run record (`run_reproduction`) and returns a matplotlib Figure (the page stores them with
`Section.add_figure`).
"""

from statistics import mean
from typing import Any

import numpy as np

from mechmem.plotting import plt

ROLE_ORDER = {"recall": 0, "elimination": 1, "shared": 2}
"""Column order of the heads in the attention figure."""


def plot_losses(res: dict[str, Any], plateaus: dict[str, float]) -> Any:
    """Training-loss curves of every seed of both models against the published training-loss plateaus
    (`plateaus`: {"task1": value, "task2": value}) and the elimination floor; the test-mapping loss, a
    different quantity, in grey and labelled so."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, key, title in (
        (axes[0], "task1", "Task 1 (1 head, no repeats)"),
        (axes[1], "task2", "Task 2 (2 heads, repeats)"),
    ):
        plateau = plateaus[key]
        for i, run in enumerate(res[key]):
            hist = [h for h in run["history"] if "train_loss" in h]
            steps = [h["step"] for h in hist]
            ax.plot(steps, [h["train_loss"] for h in hist], lw=1, label=f"training loss, seed {run['seed']}")
            ax.plot(
                steps,
                [h["test_loss"] for h in hist],
                lw=0.6,
                ls="--",
                color="0.6",
                label="test-mapping loss (not the plateau's quantity)" if i == 0 else None,
            )
        ax.axhline(res["floor"], color="k", ls="--", lw=1, label=f"elimination floor {res['floor']:.3f}")
        ax.axhline(
            plateau,
            color="tab:red",
            ls=":",
            lw=1,
            label=f"published training-loss plateau {plateau} (no source)",
        )
        ax.set(title=title, xlabel="step", ylim=(0.9, 1.3))
        ax.legend(fontsize=7)
    axes[0].set_ylabel("masked loss")
    fig.tight_layout()
    return fig


def plot_bayes(res: dict[str, Any]) -> Any:
    """Per-step accuracy and mean p(target) against the Bayesian target, seed mean, both models."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4))
    for ax, key in zip(axes, ("task1", "task2")):
        steps = [r["step"] for r in res[key][0]["bayes"]]
        x = np.arange(len(steps))
        acc = [mean(run["bayes"][i]["acc"] for run in res[key]) for i in range(len(steps))]
        pt = [mean(run["bayes"][i]["p_target"] for run in res[key]) for i in range(len(steps))]
        bayes = [res[key][0]["bayes"][i]["bayes_acc"] for i in range(len(steps))]
        ax.bar(x - 0.2, acc, 0.4, label="model accuracy")
        ax.bar(x + 0.2, pt, 0.4, label="model mean p(target)")
        ax.plot(x, bayes, "k_", ms=22, mew=2, label="Bayes target 1/#candidates")
        ax.set_xticks(x, [s.replace(" ", "\n") for s in steps], fontsize=7)
        ax.set(
            title=f"{key.replace('task', 'Task ')}: {len(res[key])} seed(s)",
            ylim=(0, 1.05),
            xlabel="answer step",
        )
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_agreement(points: list[tuple[str, float, list[float]]], tolerance: float) -> Any:
    """Ours minus published per compared value: the seeds' mean (dot) and range (bar), the tolerance shaded.

    `points`: (label, published value, our value per seed), in the table's order."""
    fig, ax = plt.subplots(figsize=(11, 3.6))
    x = np.arange(len(points))
    diff = [[v - pub for v in ours] for _, pub, ours in points]
    centre = [mean(d) for d in diff]
    low = [c - min(d) for c, d in zip(centre, diff)]
    high = [max(d) - c for c, d in zip(centre, diff)]
    inside = [abs(c) <= tolerance for c in centre]
    ax.axhspan(-tolerance, tolerance, color="0.85", label=f"±{tolerance:g}")
    ax.axhline(0, color="k", lw=0.6)
    ax.errorbar(x, centre, yerr=[low, high], fmt="none", ecolor="0.4", lw=1, label="our seeds' range")
    ax.scatter(x, centre, c=["tab:green" if i else "tab:red" for i in inside], zorder=3, s=18)
    ax.set_xticks(x, [label for label, _, _ in points], rotation=90, fontsize=7)
    ax.set(ylabel="ours - published", title="Published values against ours (dot: mean over seeds)")
    ax.set_yscale("symlog", linthresh=0.05)
    ticks = [-0.5, -0.1, -tolerance, 0, tolerance, 0.1, 0.5]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def plot_probe(res: dict[str, Any]) -> Any:
    """p(recall answer) and p(elimination answer) on the probe, per seed, both models."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    names, rec, eli = [], [], []
    for key in ("task1", "task2"):
        for run in res[key]:
            names.append(f"{key[-1]}/s{run['seed']}")
            rec.append(run["probe"]["p_recall"])
            eli.append(run["probe"]["p_elimination"])
    x = np.arange(len(names))
    ax.bar(x - 0.2, rec, 0.4, label="p(recall answer: x1's y)")
    ax.bar(x + 0.2, eli, 0.4, label="p(elimination answer: unused y)")
    ax.set_xticks(x, names, fontsize=8)
    ax.set(xlabel="task / seed", ylabel="mean probability", ylim=(0, 1.05), title="Probe: last x repeats x1")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def sorted_heads(run: dict[str, Any]) -> list[tuple[int, str]]:
    """(head, role) of the run's layer-0 heads, recall first, then elimination, shared, the rest by index."""
    labels = run["roles"]["labels"][0]
    return sorted(enumerate(labels), key=lambda hl: (ROLE_ORDER.get(hl[1], len(ROLE_ORDER)), hl[0]))


def plot_heads(res: dict[str, Any]) -> Any:
    """Attention of every Task 2 head on one probe sequence.

    Query rows x1..xV, heads ordered by measured role.
    """
    runs = [run for run in res["task2"] if "roles" in run and "attention_example" in run]
    n_heads = len(runs[0]["roles"]["labels"][0])
    fig, axes = plt.subplots(len(runs), n_heads, figsize=(3.2 * n_heads, 2.6 * len(runs)), squeeze=False)
    for row, run in enumerate(runs):
        tokens = run["attention_example"]["tokens"]
        pattern = np.array(run["attention_example"]["rows"])  # [head query key]
        keys = [f"{'xy'[i % 2]}{i // 2 + 1}={t}" for i, t in enumerate(tokens)]
        for col, (head, label) in enumerate(sorted_heads(run)):
            ax = axes[row, col]
            ax.imshow(pattern[head], vmin=0, vmax=1, cmap="Blues")
            for (q, k), val in np.ndenumerate(pattern[head]):
                if val >= 0.05:
                    ax.text(
                        k,
                        q,
                        f"{val:.2f}",
                        ha="center",
                        va="center",
                        fontsize=5,
                        color="white" if val > 0.6 else "black",
                    )
            ax.set_xticks(range(len(keys)), keys, fontsize=6, rotation=90)
            ax.set_yticks(range(pattern.shape[1]), [keys[2 * q] for q in range(pattern.shape[1])], fontsize=6)
            ax.set_title(f"seed {run['seed']}: head {head} = {label}", fontsize=8)
    fig.tight_layout()
    return fig


def plot_rescue(res: dict[str, Any]) -> Any:
    """Pre- vs post-FFN lens, the top neurons' direct effects, and accuracy under top-k ablation.

    The direct effects are from the first seed.
    """
    runs = res["task2"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    groups = ["recall_acc", "elimination_acc"]
    x = np.arange(2)
    for i, stage in enumerate(("pre_ffn", "post_ffn")):
        vals = [mean(run["rescue"]["lens"][stage][g] for run in runs) for g in groups]
        axes[0].bar(x + (i - 0.5) * 0.4, vals, 0.4, label=stage.replace("_", "-"))
    axes[0].set_xticks(x, ["recall cases", "elimination cases"])
    axes[0].set(ylabel="final-step accuracy", ylim=(0, 1.05), title="Logit lens at the last x")
    axes[0].legend(fontsize=7)
    first = runs[0]["rescue"]
    order = first["ranking"]["order"][:16]
    axes[1].bar(
        np.arange(16) - 0.2, [first["ranking"]["mean_effect"][n] for n in order], 0.4, label="recall cases"
    )
    axes[1].bar(
        np.arange(16) + 0.2,
        [first["ranking_elimination"]["mean_effect"][n] for n in order],
        0.4,
        label="elimination cases",
    )
    axes[1].set_xticks(np.arange(16), order, fontsize=7)
    axes[1].set(
        xlabel="neuron",
        ylabel="mean direct effect on correct logit",
        title=f"seed {runs[0]['seed']}: top neurons",
    )
    axes[1].legend(fontsize=7)
    for run in runs:
        top = [r for r in run["rescue"]["ablation"] if not r["ablated"].startswith("random")]
        axes[2].plot([r["k"] for r in top], [r["recall_acc"] for r in top], "o-", color="tab:red", lw=1)
        axes[2].plot([r["k"] for r in top], [r["elimination_acc"] for r in top], "s-", color="tab:blue", lw=1)
        rnd = [r for r in run["rescue"]["ablation"] if r["ablated"].startswith("random")]
        axes[2].plot([r["k"] for r in rnd], [r["recall_acc"] for r in rnd], ":", color="tab:red", lw=1)
    axes[2].plot([], [], "o-", color="tab:red", label="recall, top-k ablated")
    axes[2].plot([], [], "s-", color="tab:blue", label="elimination, top-k ablated")
    axes[2].plot([], [], ":", color="tab:red", label="recall, k random ablated")
    axes[2].set(
        xlabel="neurons zero-ablated (k)",
        ylabel="final-step accuracy",
        ylim=(0, 1.05),
        title="Ablating the top neurons (every seed)",
    )
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_scale(res: dict[str, Any]) -> Any:
    """Per-step accuracy against the Bayesian target for the larger vocabularies."""
    fig, axes = plt.subplots(1, len(res["scale"]), figsize=(6 * len(res["scale"]), 3.2), squeeze=False)
    for ax, run in zip(axes[0], res["scale"]):
        rows = run["bayes"]
        x = np.arange(len(rows))
        ax.bar(x, [r["acc"] for r in rows], 0.6, label="model accuracy")
        ax.plot(x, [r["bayes_acc"] for r in rows], "k_", ms=14, mew=2, label="Bayes target")
        ax.set_xticks(x, [r["step"].replace(" ", "\n")[:6] for r in rows], fontsize=6)
        ax.set(title=f"V={run['vocab_size']} ({run['preset']})", ylim=(0, 1.05), xlabel="answer step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
