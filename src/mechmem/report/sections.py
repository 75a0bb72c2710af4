"""Evidence gathering: one function per analysis, each returning a report `Section`.

Every section function takes a `ReportContext` and returns a `Section`; one that does not apply to the model's
architecture or task (or whose analysis module is not installed) returns a section with `skipped` set to the
reason, so the report always shows what was and was not looked at. Each section draws its data from its own
generator seeded from the context's seed, so sections are reproducible one by one.
"""

import importlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from mechmem.report.document import Section, Table
from mechmem.report.roles import RoleThresholds


@dataclass
class ReportContext:
    """What every section needs: the model, its task (None for a bare model), sample size and seed."""

    model: torch.nn.Module
    task: Any = None
    n_samples: int = 512
    seed: int = 0
    thresholds: RoleThresholds = field(default_factory=RoleThresholds)
    evidence: dict[str, Tensor] = field(default_factory=dict)
    """Per-head evidence [layer head] collected by the sections, for naming roles."""

    def generator(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1000 + offset)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def _module(name: str) -> tuple[Any, str | None]:
    """Import an analysis module, or return the reason it is unavailable."""
    try:
        return importlib.import_module(name), None
    except ImportError as exc:
        return None, f"{name} is not available ({exc})"


def _no_heads(ctx: ReportContext) -> str | None:
    heads, why = _module("mechmem.analysis.heads")
    return why or heads.no_attention_reason(ctx.model)


def _is_permutation(task: Any) -> bool:
    return task is not None and getattr(task, "name", "") == "permutation"


def _last_masked(batch: Any) -> tuple[Tensor, Tensor]:
    """Per sequence: the last loss-masked position and its target."""
    n, pos = batch.loss_mask.shape
    idx = (batch.loss_mask > 0).float() * torch.arange(1, pos + 1)
    last = idx.argmax(-1)
    return last, batch.targets[torch.arange(n), last]


# -- closeness to the optimum ---------------------------------------------------------------------------------
def optimum_section(ctx: ReportContext) -> Section:
    """The task's own evaluation and headline, with the task's optimum where it has one."""
    s = Section("optimum", "Task performance and closeness to the optimum")
    if ctx.task is None:
        s.skipped = "no task: a bare model has no evaluation"
        return s
    metrics = ctx.task.evaluate(ctx.model, generator=ctx.generator(1), n=ctx.n_samples)
    s.findings["metrics"] = metrics
    s.findings["headline"] = ctx.task.headline(metrics)
    s.lines.append(f"Headline: {s.findings['headline'] or 'n/a'} (on {ctx.n_samples} evaluation sequences).")
    if _is_permutation(ctx.task):
        s.lines += _permutation_optimum(ctx, metrics, s.findings)
    rows = [[k, float(v)] for k, v in metrics.items() if isinstance(v, (int, float))]
    s.tables.append(Table(["metric", "value"], rows, "Task evaluation", floatfmt=".4f"))
    return s


def _permutation_optimum(ctx: ReportContext, metrics: dict[str, Any], findings: dict[str, Any]) -> list[str]:
    """The model's masked test loss next to the exact Bayes posterior's loss on the same sequences."""
    from mechmem.papers.permutation.task import bayes_posterior, elimination_floor

    task = ctx.task
    batch = task.eval_batch(ctx.n_samples, generator=ctx.generator(10), split="test")
    answers = batch.loss_mask > 0
    post = bayes_posterior(batch.tokens, task.config.vocab_size)  # [batch step d_vocab]
    p_bayes = post.gather(-1, batch.targets[:, 0::2, None]).squeeze(-1)
    bayes_loss = float(-p_bayes.clamp_min(1e-12).log().mean())
    logits = ctx.model(batch.tokens.to(ctx.device)).float().cpu()
    model_loss = float(torch.nn.functional.cross_entropy(logits[answers], batch.targets[answers]))
    floor = elimination_floor(task.config.vocab_size)
    findings.update(elimination_floor=floor, bayes_loss=bayes_loss, model_loss_same_batch=model_loss)
    lines = [
        (
            f"Masked test loss {model_loss:.4f} vs {bayes_loss:.4f} for the exact Bayes posterior on the same "
            f"{ctx.n_samples} test sequences (gap {model_loss - bayes_loss:+.4f}; repeat ratio "
            f"{task.config.repeat_ratio}); the elimination floor without repeats is {floor:.4f}."
        )
    ]
    if "bayes_mae" in metrics:
        lines.append(
            f"Mean |p_model - p_Bayes| over answer steps and tokens: {metrics['bayes_mae']:.4f} "
            f"(max {metrics['bayes_max_err']:.3f}); final-step accuracy {metrics.get('test_final_acc', float('nan')):.3f}."
        )
    return lines


# -- attention-pattern evidence --------------------------------------------------------------------------------
def heads_section(ctx: ReportContext) -> Section:
    """Previous-token, duplicate-token and induction scores on repeated random sequences and on the task's data.

    On the task's data the duplicate-token and induction patterns count only the answer queries (loss-masked
    positions), where a task's heads do their work, and the previous-token pattern only the positions that an
    induction head would read from an answer query (just after an earlier occurrence of the query's token). A
    head's evidence for a pattern is the higher of its two scores.
    """
    s = Section("heads", "Attention patterns: previous-token, duplicate-token, induction")
    why = _no_heads(ctx)
    if why:
        s.skipped = why
        return s
    from mechmem.analysis import heads

    cfg = ctx.model.cfg
    half = min(cfg.n_ctx // 2, cfg.d_vocab)
    if half < 2:
        s.skipped = f"context n_ctx={cfg.n_ctx} is too short for repeated sequences"
        return s
    tokens = heads.repeated_random_tokens(ctx.n_samples, half, cfg.d_vocab, generator=ctx.generator(2))
    results = [heads.detect_heads(ctx.model, tokens, data=f"repeated random sequences [r, r], |r|={half}")]
    if ctx.task is not None:
        batch = ctx.task.eval_batch(ctx.n_samples, generator=ctx.generator(3))
        answers = (batch.loss_mask > 0).to(ctx.device)

        def induction_at_answers(t: Tensor) -> Tensor:
            return heads.induction_pattern(t) & answers[:, :, None]

        def previous_token_where_read(t: Tensor) -> Tensor:
            # Rows: the positions an induction head reads from some answer query (just after an earlier
            # occurrence of the answer query's token); that is where a previous-token head is needed.
            read = induction_at_answers(t).any(1)
            return heads.previous_token_pattern(t) & read[:, :, None]

        patterns = {
            "previous_token": previous_token_where_read,
            "duplicate_token": lambda t: heads.duplicate_token_pattern(t) & answers[:, :, None],
            "induction": induction_at_answers,
        }
        results.append(
            heads.detect_heads(
                ctx.model,
                batch.tokens.to(ctx.device),
                patterns,
                data="the task's evaluation data (answer queries; previous-token where induction reads)",
                chunk=len(batch),
            )
        )
    for name in results[0].scores:
        ctx.evidence[name] = torch.stack([r.scores[name].nan_to_num(0.0) for r in results]).amax(0)
    s.findings = {"data": [r.to_dict() for r in results]}
    s.lines.append(
        f"Scores are attention mass on the pattern's keys ({ctx.n_samples} sequences each); "
        "1 = a perfect head. The role evidence is the higher of the two scores."
    )
    for r in results:
        rows = [
            [f"L{l}H{h}", *(float(r.scores[k][l, h]) for k in r.scores)]
            for l in range(cfg.n_layers)
            for h in range(cfg.n_heads)
        ]
        s.tables.append(Table(["head", *r.scores], rows, f"Detection scores on {r.data}"))
    s.add_figure("scores", heads.plot_head_scores(results[-1]))
    example = (
        ctx.task.eval_batch(1, generator=ctx.generator(3)).tokens if ctx.task is not None else tokens[:1]
    )
    patterns = heads.attention_patterns(ctx.model, example)[:, 0]
    s.add_figure("attention", heads.plot_attention(patterns, example[0]))
    return s


# -- task roles: elimination vs recall ------------------------------------------------------------------------
def task_roles_section(ctx: ReportContext) -> Section:
    """Elimination vs recall: mean-ablation damage on repeat / no-repeat answers and attention on the key sets."""
    s = Section("task_roles", "Task roles: elimination vs recall")
    why = _no_heads(ctx)
    if why is None and not _is_permutation(ctx.task):
        why = (
            "no task: no answer groups"
            if ctx.task is None
            else f"task {ctx.task.name!r} has no repeat / no-repeat answer groups"
        )
    roles, why_roles = _module("mechmem.analysis.roles")
    perm, why_perm = _module("mechmem.papers.permutation.experiments")
    why = why or why_roles or why_perm
    if why is None and not hasattr(perm, "last_step_groups"):
        why = "mechmem.papers.permutation.experiments has no last_step_groups (API changed?)"
    if why:
        s.skipped = why
        return s
    n = ctx.n_samples
    g = perm.last_step_groups(ctx.task, n, generator=ctx.generator(4))
    dev = ctx.device
    answer_pos = torch.full((n,), ctx.task.seq_len - 1, dtype=torch.long, device=dev)
    keys = {k: g[k].to(dev) for k in ("bound", "match", "other_y")}
    pairs = {}
    if hasattr(
        perm, "role_pairs"
    ):  # counterfactual pairs: patching transfer decides the roles when available
        rec_pair, eli_pair = perm.role_pairs(ctx.task, n, generator=ctx.generator(9))
        pairs = {"recall_pair": rec_pair.to(dev), "elimination_pair": eli_pair.to(dev)}
    ev = roles.measure_role_evidence(
        ctx.model, g["tokens"].to(dev), answer_pos, g["targets"].to(dev), g["repeat"].to(dev), keys, **pairs
    )
    ctx.evidence["recall_damage"] = ev.damage_recall
    ctx.evidence["elimination_damage"] = ev.damage_elimination
    if getattr(ev, "transfer_recall", None) is not None:
        ctx.evidence["recall_transfer"] = ev.transfer_recall
        ctx.evidence["elimination_transfer"] = ev.transfer_elimination
    ctx.evidence["attention_match_bound"] = ev.attention["match"] + ev.attention["bound"]
    ctx.evidence["attention_used_y"] = ev.attention["bound"] + ev.attention["other_y"]
    s.findings = ev.to_dict()
    s.lines.append(
        f"Final answer of {n} test sequences (half with the last x repeated). p(correct) without ablation: "
        f"{ev.baseline_recall:.3f} on repeats, {ev.baseline_elimination:.3f} without."
    )
    s.lines.append(
        "Damage = drop in mean p(correct) when the head's output is replaced by its mean (mean ablation); "
        "attention from the last x, averaged over repeat sequences."
    )
    transfer = "recall_transfer" in ctx.evidence
    if transfer:
        s.lines.append(
            "Transfer = rise in p(counterfactual answer) when the head's output is copied from a "
            "counterfactual run that changes only the recalled pair (recall) or only the used y's "
            "(elimination); when measured, transfer rather than damage decides the role."
        )
    n_layers, n_heads = ev.damage_recall.shape
    cols = ["head", "damage no-repeat", "damage repeat"] + (
        ["transfer elim", "transfer recall"] if transfer else []
    )
    cols += ["attn matching x", "attn its y", "attn other y's"]
    rows = []
    for l in range(n_layers):
        for h in range(n_heads):
            row = [f"L{l}H{h}", float(ev.damage_elimination[l, h]), float(ev.damage_recall[l, h])]
            if transfer:
                row += [float(ev.transfer_elimination[l, h]), float(ev.transfer_recall[l, h])]
            row += [float(ev.attention[k][l, h]) for k in ("match", "bound", "other_y")]
            rows.append(row)
    s.tables.append(Table(cols, rows, "Per head: ablation damage, patching transfer and attention"))
    return s


# -- MLP: direct effect and key neurons ------------------------------------------------------------------------
def mlp_section(ctx: ReportContext) -> Section:
    """The last MLP's direct effect on the answer logit, its key neurons, and the effect of mean-ablating it."""
    s = Section("mlp", "MLP: direct effect on the answer and key neurons")
    why = _no_heads(ctx) or (None if ctx.task is not None else "no task: no answers to attribute")
    if why is None and ctx.model.cfg.attn_only:
        why = "the model is attention-only"
    neurons, why_mod = _module("mechmem.analysis.neurons")
    if why or why_mod:
        s.skipped = why or why_mod
        return s
    model, t = ctx.model, ctx.thresholds
    layer = model.cfg.n_layers - 1
    perm, _ = _module("mechmem.papers.permutation.experiments")
    if _is_permutation(ctx.task) and hasattr(perm, "last_step_groups"):
        g = perm.last_step_groups(ctx.task, ctx.n_samples, generator=ctx.generator(5))
        tokens, targets = g["tokens"], g["targets"]
        pos = torch.full((len(tokens),), ctx.task.seq_len - 1, dtype=torch.long)
        where = "the final answer (half the sequences repeat an x)"
    else:
        batch = ctx.task.eval_batch(ctx.n_samples, generator=ctx.generator(5))
        tokens = batch.tokens
        pos, targets = _last_masked(batch)
        where = "the last answer position of each sequence"
    tokens, pos, targets = tokens.to(ctx.device), pos.to(ctx.device), targets.to(ctx.device)
    effect = neurons.neuron_direct_effect(model, tokens, layer, pos, targets)
    ranking = neurons.rank_neurons(effect, layer)
    base = _p_answer(model(tokens), pos, targets)
    name, mid = f"blocks.{layer}.hook_mlp_out", f"blocks.{layer}.hook_resid_mid"
    _, cache = model.run_with_cache(tokens, names_filter=lambda x: x in (name, mid))
    mean_out = cache[name].mean(0, keepdim=True)
    # Logit lens just before the MLP: the final norm (if any) recomputed on resid_mid, then the unembedding.
    resid = cache[mid]
    pre = _p_answer(
        model.unembed(model.ln_final(resid) if model.cfg.normalization_type else resid), pos, targets
    )
    ablated = model.run_with_hooks(tokens, fwd_hooks=[(name, lambda a, hook: mean_out.expand_as(a).clone())])
    drop = float((base - _p_answer(ablated, pos, targets)).mean())
    total = float(effect.sum(-1).mean())
    k = next((k for k in range(1, t.max_key_neurons + 1) if ranking.share(k) >= t.neuron_share), None)
    key = ranking.top(k) if k else []
    role = "contributes to the answer" if drop >= t.mlp_drop else "none"
    s.findings = {
        "layer": layer,
        "p_answer": float(base.mean()),
        "mean_ablation_drop": drop,
        "p_answer_before_mlp": float(pre.mean()),
        "direct_effect_total": total,
        "key_neurons": key,
        "role": role,
        "thresholds": {
            "mlp_drop": t.mlp_drop,
            "neuron_share": t.neuron_share,
            "max_key_neurons": t.max_key_neurons,
        },
        "ranking": ranking.to_dict(),
    }
    s.lines.append(f"Measured at {where}; MLP of layer {layer}.")
    s.lines.append(
        f"Logit lens: mean p(answer) {float(pre.mean()):.3f} read just before the MLP (resid_mid), "
        f"{float(base.mean()):.3f} after it (the model's output)."
    )
    s.lines.append(
        f"Role: {role}: mean-ablating the MLP lowers mean p(answer) from {float(base.mean()):.3f} by "
        f"{drop:.3f} (threshold {t.mlp_drop}); its neurons' total direct effect on the answer logit is "
        f"{total:+.3f}."
    )
    if key:
        s.lines.append(
            f"Key neurons {key}: together {ranking.share(len(key)):.0%} of the positive direct effect "
            f"(>= {t.neuron_share:.0%}, at most {t.max_key_neurons} neurons)."
        )
    else:
        s.lines.append(
            f"No key neurons: the top {t.max_key_neurons} carry {ranking.share(t.max_key_neurons):.0%} "
            f"of the positive direct effect (< {t.neuron_share:.0%}); the effect is distributed."
        )
    top = ranking.top(min(8, len(ranking.order)))
    s.tables.append(
        Table(
            ["neuron", "mean direct effect"],
            [[i, float(ranking.mean_effect[i])] for i in top],
            "Top neurons by mean direct effect on the answer logit",
        )
    )
    return s


def _p_answer(logits: Tensor, pos: Tensor, targets: Tensor) -> Tensor:
    rows = torch.arange(len(pos), device=logits.device)
    return logits[rows, pos].float().softmax(-1)[rows, targets]


# -- memory probes -----------------------------------------------------------------------------------------------
def probes_section(ctx: ReportContext) -> Section:
    """Token -> token memories in each head's OV circuit (W_E, W_V W_O, W_U): does the head copy or suppress?"""
    s = Section("probes", "Associative-memory probes: each head's OV circuit")
    why = _no_heads(ctx)
    probes, why_mod = _module("mechmem.analysis.probes")
    if why or why_mod:
        s.skipped = why or why_mod
        return s
    model = ctx.model
    w_e, w_u = model.W_E.detach(), model.W_U.detach()
    if w_u.shape[1] != w_e.shape[0]:
        s.skipped = "input and output vocabularies differ, so token -> same-token memories are undefined"
        return s
    tokens = torch.arange(w_e.shape[0], device=w_e.device)
    rows, findings = [], []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            ov = model.blocks[layer].attn.W_V[head] @ model.blocks[layer].attn.W_O[head]
            scores = probes.recall_scores(w_e, ov.detach(), w_u.T)
            copy = float((scores.argmax(-1) == tokens).float().mean())
            suppress = float((scores.argmin(-1) == tokens).float().mean())
            rows.append([f"L{layer}H{head}", copy, suppress])
            findings.append(
                {
                    "name": f"L{layer}H{head}.OV",
                    "matrix": f"blocks.{layer}.attn.OV[{head}]",
                    "copy_recall": copy,
                    "suppress_recall": suppress,
                }
            )
    s.findings = {"probes": findings, "chance": 1.0 / len(tokens)}
    s.lines.append(
        f"Copy recall: fraction of tokens t whose own logit is the highest in W_E[t] OV W_U; suppress "
        f"recall: the lowest. Chance is about {1.0 / len(tokens):.2f}. Direct path only (layer-0 "
        f"embeddings), so later-layer heads that read other heads' outputs can score low."
    )
    s.tables.append(Table(["head", "copy recall", "suppress recall"], rows, "OV token memories"))
    return s


# -- ablation and patching summaries -------------------------------------------------------------------------
def ablation_section(ctx: ReportContext) -> Section:
    """Mean ablation of every head and MLP layer: the change in the task's loss."""
    s = Section("ablation", "Ablation: mean-ablating each head and MLP")
    why = _no_heads(ctx) or (None if ctx.task is not None else "no task: no loss to measure")
    ablation, why_mod = _module("mechmem.analysis.ablation")
    if why or why_mod:
        s.skipped = why or why_mod
        return s
    tokens, metric, desc = ablation.task_metric(ctx.task, "loss", ctx.n_samples, generator=ctx.generator(6))
    reference = ctx.task.eval_batch(ctx.n_samples, generator=ctx.generator(7)).tokens
    result = ablation.ablate_heads(
        ctx.model,
        tokens.to(ctx.device),
        metric,
        methods=("mean",),
        reference=reference.to(ctx.device),
        metric_name=desc,
    )
    s.findings = result.to_dict()
    rows = [
        [
            (
                "MLP"
                if r["component"] == "mlp"
                else "attn"
                if r["head"] is None
                else f"L{r['layer']}H{r['head']}"
            )
            + ("" if r["head"] is not None else f" L{r['layer']}"),
            r["metric"],
            r["delta"],
        ]
        for r in result.rows()
    ]
    rows.sort(key=lambda r: -abs(r[2]))
    s.lines.append(f"Metric: {desc}; baseline {result.baseline:.4f}. Largest change first.")
    s.tables.append(
        Table(["ablated", "loss", "delta"], rows[:10], "Mean ablation (reference: a second eval batch)")
    )
    return s


def patching_section(ctx: ReportContext) -> Section:
    """Activation patching on the task's clean/corrupted pair: head outputs and the residual stream (denoising)."""
    s = Section("patching", "Activation patching: clean into corrupted")
    why = _no_heads(ctx) or (None if ctx.task is not None else "no task: no clean/corrupted pair")
    patching, why_mod = _module("mechmem.analysis.patching")
    if why or why_mod:
        s.skipped = why or why_mod
        return s
    try:
        pair = ctx.task.patching_pair(ctx.n_samples, generator=ctx.generator(8)).to(ctx.device)
    except NotImplementedError as exc:
        s.skipped = str(exc)
        return s
    results = patching.run_sweeps(
        ctx.model, pair, ("attn_head_out_all_pos", "resid_pre"), direction="denoising"
    )
    heads, resid = results["attn_head_out_all_pos"], results["resid_pre"]
    restored = heads.normalised()
    s.findings = {name: r.to_dict() for name, r in results.items()}
    s.lines.append(
        f"Metric: {heads.metric}; clean {heads.clean:.3f}, corrupted {heads.corrupted:.3f}. Each activation is "
        f"patched from the clean run into the corrupted one; 'restored' = (patched - corrupted) / (clean - corrupted), "
        f"1 = the clean answer is fully restored."
    )
    rows = [
        [f"L{l}H{h}", float(heads.values[l, h]), float(restored[l, h])]
        for l in range(restored.shape[0])
        for h in range(restored.shape[1])
    ]
    rows.sort(key=lambda r: -abs(r[2]) if r[2] == r[2] else 0.0)
    s.tables.append(
        Table(["head", "metric", "restored"], rows[:10], "Head outputs (all positions), denoising")
    )
    s.add_figure("resid_pre", patching.plot_patching(resid))
    return s
