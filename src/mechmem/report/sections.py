"""Evidence gathering: one function per analysis, each returning a report `Section`.

A section that does not apply returns with `skipped` set to the reason. Each section draws its data from its
own generator seeded from the context's seed; head roles are measured once and shared through the context.
No section knows any particular task: tasks supply what is task-specific through the `Task` contract.
"""

import math
from dataclasses import dataclass
from typing import Any

import torch

from mechmem.analysis import ablation, composition, heads, neurons, patching, probes
from mechmem.analysis.ablation import attribution as ablation_attribution
from mechmem.analysis.distribution import own_data_fit, repeats_fit
from mechmem.analysis.frames import position_labels
from mechmem.analysis.mlp_role import FAMILY as MLP_FAMILY
from mechmem.analysis.mlp_role import decided_mlp_role
from mechmem.analysis.patching.decided import decision_lines
from mechmem.analysis.roles import RoleResult
from mechmem.analysis.stats import (
    ABLATION_DELTA,
    ABLATION_POLICY,
    MLP_POLICY,
    PATCH_POLICY,
    PATCH_SHARE,
    VERDICTS,
    format_interval,
    mean_interval,
)
from mechmem.errors import MechmemError
from mechmem.models.backend import is_transformer_lens_model
from mechmem.models.parts import Head, model_device
from mechmem.report.document import Section, Table
from mechmem.report.interactive import EXAMPLES, ablation_map, attention_view, sweep_map


@dataclass
class ReportContext:
    """What every section needs: the model, its task (None for a bare model), sample size, seed and roles."""

    model: torch.nn.Module
    task: Any
    n_samples: int
    seed: int
    roles: RoleResult
    """Every head's role and evidence, measured once for the whole report."""
    memory_mb: float = 256.0
    """Memory budget (MB) of the sections' batched passes and cached runs (patching, edges)."""

    def generator(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1000 + offset)

    @property
    def device(self) -> torch.device:
        return model_device(self.model)


def _needs_task(ctx: ReportContext, what: str) -> str | None:
    return None if ctx.task is not None else f"no task: {what}"


def _needs_hooks(ctx: ReportContext) -> str | None:
    """Why an analysis that hooks a HookedTransformer's activations does not apply (None when it does)."""
    if is_transformer_lens_model(ctx.model):
        return None
    name = type(ctx.model).__name__
    return f"{name} is not a HookedTransformer: it has none of the hook points this analysis uses"


def optimum_section(ctx: ReportContext) -> Section:
    """The task's own evaluation and headline, its optimum where known, and the prompt fit of its data."""
    s = Section("optimum", "Task performance and closeness to the optimum")
    if ctx.task is None:
        s.skipped = "no task: a bare model has no evaluation"
        return s
    metrics = ctx.task.evaluate(ctx.model, generator=ctx.generator(1), n=ctx.n_samples)
    s.findings["metrics"] = metrics
    s.findings["headline"] = ctx.task.headline(metrics)
    s.lines.append(f"Headline: {s.findings['headline'] or 'n/a'} (on {ctx.n_samples} evaluation sequences).")
    batch = ctx.task.eval_batch(ctx.n_samples, generator=ctx.generator(10))
    optimum = ctx.task.optimal_loss(batch)
    if optimum is not None:  # the model's masked loss next to the optimal predictor's, on the same sequences
        model_loss = float(ctx.task.loss(ctx.model(batch.tokens.to(ctx.device)).float().cpu(), batch))
        s.findings.update(optimal_loss=optimum, model_loss_same_batch=model_loss)
        s.lines.append(
            f"Masked loss {model_loss:.4f} vs {optimum:.4f} for the task's optimal predictor on the same "
            f"{ctx.n_samples} evaluation sequences (gap {model_loss - optimum:+.4f})."
        )
    fit = own_data_fit(ctx.model, ctx.task, "eval", ctx.n_samples, generator=ctx.generator(13))
    s.findings["prompt_fit"] = fit.to_dict()
    s.lines.append(fit.message)
    rows = [[k, float(v)] for k, v in metrics.items() if isinstance(v, (int, float))]
    s.tables.append(Table(["metric", "value"], rows, "Task evaluation", floatfmt=".4f"))
    return s


def heads_section(ctx: ReportContext) -> Section:
    """Previous-token, duplicate-token and induction scores (from the roles), attention heatmaps, and the
    heads' composition scores read off the weights."""
    s = Section("heads", "Attention patterns: previous-token, duplicate-token, induction")
    s.skipped = heads.no_attention_reason(ctx.model)
    if s.skipped:
        return s
    keys = [k for k in heads.BUILTIN_PATTERNS if k in {key for h in ctx.roles.heads for key in h.evidence}]
    if not keys:
        s.skipped = (
            f"context n_ctx={ctx.model.cfg.n_ctx} is too short for repeated sequences and there is no task"
        )
        return s
    scores = {k: ctx.roles.evidence(k) for k in keys}
    s.findings = {
        "axes": ["layer", "head"],
        "scores": {k: v.tolist() for k, v in scores.items()},
        "n": ctx.roles.info.get("pattern_n"),
    }
    patterns = ctx.roles.info.get("patterns", {})
    probes = [f"{p}: {k} sequences" for p, k in zip(patterns.get("probes", []), patterns.get("probe_n", []))]
    s.lines.append(
        "Score = attention mass on the pattern's keys (1 = a perfect head), the highest over the probes "
        f"({'; '.join(probes)}: a probe stops once no name can change); a role needs the lower "
        "end of the interval corrected for every head, pattern, probe, token and look >= the threshold on "
        "some probe, or for at least two query tokens (docs/analyses.md, Role rule; docs/decisions.md)."
    )
    halves = heads.probe_halves(ctx.model.cfg.n_ctx, ctx.model.cfg.d_vocab)
    if halves:  # the longest random probe, against the task's own data
        fit = repeats_fit(ctx.model, ctx.task, max(halves), ctx.n_samples, generator=ctx.generator(11))
        s.findings["prompt_fit"] = fit.to_dict()
        s.lines.append(fit.message)
    rows = [[h.name, *(h.evidence[k] for k in keys)] for h in ctx.roles.heads]
    s.tables.append(Table(["head", *keys], rows, "Detection scores"))
    s.add_figure("scores", heads.plot_head_scores(heads.HeadScores(scores, data="best over the probes")))
    if ctx.task is not None:
        examples = ctx.task.eval_batch(EXAMPLES, generator=ctx.generator(3)).tokens
        source = "evaluation sequences"
    else:
        half = max(2, ctx.model.cfg.n_ctx // 2)
        examples = heads.repeated_random_tokens(
            EXAMPLES, half, ctx.model.cfg.d_vocab, generator=ctx.generator(2), distinct=False
        )[:, : ctx.model.cfg.n_ctx]
        source = f"repeated random tokens [r, r], |r| = {half}"
    patterns = heads.attention_patterns(ctx.model, examples.to(ctx.device))
    names = ctx.task.token_names() if ctx.task is not None else None
    s.add_figure("attention", heads.plot_attention(patterns[:, 0], examples[0], token_names=names))
    roles = {h.name: h.role for h in ctx.roles.heads}
    s.interactive["attention"] = attention_view(patterns, examples, names, roles, source=source)
    add_composition(s, ctx.model, ctx.generator(14))
    return s


def add_composition(s: Section, model: torch.nn.Module, generator: torch.Generator) -> None:
    """The top Q-, K- and V-composition pairs above the random baseline (drawn from `generator`): a line, a
    table, the heatmaps and findings["composition"] (or the reason there are none)."""
    if reason := composition.no_pairs_reason(model):
        s.findings["composition"] = {"skipped": reason}
        s.lines.append(f"Composition scores: none ({reason}).")
        return
    found = composition.composition_scores(model, generator=generator)
    s.findings["composition"] = found.to_dict()
    rows = found.top_rows(3, above_only=True)
    b = found.baseline
    s.lines.append(
        "Composition (Elhage et al. 2021; read off the weights, no data): ||W_OV W||_F / (||W_OV||_F "
        "||W||_F) between an earlier head's OV circuit and a later head's QK circuit (Q), its transpose (K) "
        f"or its OV circuit (V); random Gaussian matrices of the same shapes score {b.text()} (mean, 95% "
        f"range over {b.draws} draws). Of the top three pairs per mode, {len(rows)} score above that range."
    )
    if rows:
        s.tables.append(Table(composition.TOP_HEADERS, rows, "Composition pairs above the random baseline"))
    s.add_figure("composition", composition.plot_composition(found))


def mlp_section(ctx: ReportContext) -> Section:
    """The last MLP's direct effect on the answer logit, its key neurons, and its mean-ablation effect."""
    s = Section("mlp", "MLP: direct effect on the answer and key neurons")
    s.skipped = _needs_hooks(ctx) or _needs_task(ctx, "no answers to attribute")
    if s.skipped is None and ctx.model.cfg.attn_only:
        s.skipped = "the model is attention-only"
    if s.skipped is None and getattr(ctx.model.cfg, "parallel_attn_mlp", False):
        s.skipped = "attention and MLP run in parallel: there is no resid_mid before the MLP to read"
    if s.skipped:
        return s
    t = ctx.roles.thresholds
    found = decided_mlp_role(
        ctx.model, ctx.task, seed=ctx.seed, policy=MLP_POLICY.with_budget(ctx.n_samples), threshold=t.mlp_drop
    )
    layer, test = found.layer, found.decision[MLP_FAMILY]
    ranking = neurons.rank_neurons(found.effect, layer)
    base, pre, drop = found.p_answer, found.p_before, float(found.drops.mean())
    spread = {name: [float(b) for b in mean_interval(x)[1:]] for name, x in (("p", base), ("pre", pre))}
    spread["drop"] = [float(test.lower), float(test.upper)]
    total = float(found.effect.sum(-1).mean())
    k = next((k for k in range(1, t.max_key_neurons + 1) if ranking.share(k) >= t.neuron_share), None)
    key = ranking.top(k) if k else []
    role = found.role
    s.findings = {
        "layer": layer,
        "p_answer": float(base.mean()),
        "p_answer_interval": spread["p"],
        "mean_ablation_drop": drop,
        "mean_ablation_drop_interval": spread["drop"],
        "p_answer_before_mlp": float(pre.mean()),
        "p_answer_before_mlp_interval": spread["pre"],
        "direct_effect_total": total,
        "key_neurons": key,
        "role": role,
        "n": found.n,
        "decision": found.decision.to_dict(),
        "thresholds": {k: getattr(t, k) for k in ("mlp_drop", "neuron_share", "max_key_neurons")},
        "ranking": ranking.to_dict(),
    }
    decided = f"looks {', '.join(map(str, found.decision.looks))}, {found.decision.stopped}"
    needed = float(test.n_needed)
    if role == "undecided":
        decided += (
            f"; about {int(needed)} sequences would decide it"
            if math.isfinite(needed)
            else "; too few sequences to judge it"
            if math.isnan(needed)
            else "; the drop sits on the threshold"
        )
    s.lines += [
        (
            f"Measured at the last answer position of {found.n} evaluation sequences, drawn in rounds until "
            f'the role was decided ({decided}; docs/decisions.md, "The MLP\'s role"); MLP of layer {layer}.'
        ),
        (
            f"Logit lens: mean p(answer) {float(pre.mean()):.3f} {format_interval(*spread['pre'])} read just "
            f"before the MLP (resid_mid), {float(base.mean()):.3f} {format_interval(*spread['p'])} after it "
            "(the model's output; 95% intervals over the sequences)."
        ),
        (
            f"Role: {role}: mean-ablating the MLP (per-position mean over a reference batch of evaluation "
            f"sequences) lowers mean p(answer) from {float(base.mean()):.3f} by {drop:.3f} "
            f"{format_interval(*spread['drop'])} (threshold {t.mlp_drop}, judged on the interval corrected "
            f"for the looks: [{float(test.corrected_lower):.3f}, {float(test.corrected_upper):.3f}]); its "
            f"neurons' total direct effect on the answer logit is {total:+.3f}."
        ),
    ]
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
    rows = [[i, float(ranking.mean_effect[i])] for i in ranking.top(min(8, len(ranking.order)))]
    caption = "Top neurons by mean direct effect on the answer logit"
    s.tables.append(Table(["neuron", "mean direct effect"], rows, caption))
    return s


def probes_section(ctx: ReportContext) -> Section:
    """Token -> token memories in each head's OV circuit (W_E W_V W_O W_U): does it copy or suppress?"""
    s = Section("probes", "Associative-memory probes: each head's OV circuit")
    s.skipped = heads.no_attention_reason(ctx.model)
    if s.skipped:
        return s
    model = ctx.model
    if model.cfg.d_vocab_out != model.cfg.d_vocab:
        s.skipped = "input and output vocabularies differ, so token -> same-token memories are undefined"
        return s
    rows, findings = [], []
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            probe = probes.ov_copy_probe(model, layer, head)
            copy, suppress = probe.recall, probe.extra["suppress_recall"]
            rows.append([str(Head(layer, head)), copy, suppress])
            findings.append(
                {
                    "name": f"{Head(layer, head)}.OV",
                    "matrix": f"blocks.{layer}.attn.OV[{head}]",
                    "copy_recall": copy,
                    "suppress_recall": suppress,
                }
            )
    chance = 1.0 / model.cfg.d_vocab
    s.findings = {"probes": findings, "chance": chance}
    s.lines.append(
        f"Copy recall (`probes.ov_copy_probe`): fraction of tokens t whose own logit is the highest in "
        f"W_E[t] OV W_U; suppress recall: the lowest. Chance is about {chance:.2f}. Direct path only "
        f"(layer-0 embeddings), so later-layer heads that read other heads' outputs can score low."
    )
    s.tables.append(Table(["head", "copy recall", "suppress recall"], rows, "OV token memories"))
    return s


EXACT_PATCHING_CELLS = 512
"""Above this many cells in the patching section's sweeps (layers x (heads + positions)), they are estimated
by attribution patching (`decided_patching(method="attribution")`) instead of patching every cell."""


def ablation_section(ctx: ReportContext) -> Section:
    """Mean ablation of every head and MLP layer: the change in the task's loss."""
    s = Section("ablation", "Ablation: mean-ablating each head and MLP")
    s.skipped = (
        _needs_hooks(ctx) or heads.no_attention_reason(ctx.model) or _needs_task(ctx, "no loss to measure")
    )
    if s.skipped:
        return s
    above = ablation_attribution.EXACT_ABLATION_VARIANTS
    result = ablation.decided_ablation(
        ctx.model,
        ctx.task,
        seed=ctx.seed,
        policy=ABLATION_POLICY.with_budget(ctx.n_samples),
        estimate=ablation.n_variants(ctx.model) > above,
    )
    s.findings = result.to_dict()
    if "check" in result.info:
        c = result.info["check"]
        s.lines.append(
            f"{result.info['method']} (above {above} ablations); estimate vs "
            f"exact on {c['cells']} sampled ablations: Pearson {c['pearson']:.2f}, Spearman "
            f"{c['spearman']:.2f}, top-{c['k']} overlap {c['top_k']:.2f} (trusted at Pearson >= "
            f"{c['threshold']})."
        )
    rows, d = [], result.decision
    corrected = zip(d.corrected_lower.flatten().tolist(), d.corrected_upper.flatten().tolist())
    for r, verdict, bounds in zip(result.rows(), d.verdicts(), corrected):
        layer = f"{'MLP' if r['component'] == 'mlp' else 'attn'} L{r['layer']}"
        ablated = layer if r["head"] is None else str(Head(r["layer"], r["head"]))
        interval = format_interval(r["delta_lower"], r["delta_upper"])
        rows.append([ablated, r["metric"], r["delta"], interval, format_interval(*bounds), verdict])
    rows.sort(key=lambda r: -abs(r[2]))
    s.lines.append(f"Metric: {result.metric_name}; baseline {result.baseline:.4f}. Largest change first.")
    s.lines.append(ablation.decision_line(result))
    s.lines.append(CORRECTED_NOTE)
    headers = ["ablated", "loss", "delta", "95% interval", "corrected interval"]
    headers.append(f"matters (|delta| >= {ABLATION_DELTA})")
    s.tables.append(Table(headers, rows[:10], "Mean ablation (reference: a second eval batch)"))
    s.interactive["heatmaps"] = {
        "title": "Ablation: change in the loss per component",
        "maps": [ablation_map(result)],
        "positive": "the loss rises when the component is ablated (it helps)",
        "note": "",
    }
    return s


CORRECTED_NOTE = (
    "'corrected interval': the interval the verdict is judged on, widened for the number of tests and looks "
    "(a marginal 95% interval can clear the threshold while the verdict stays undecided)."
)


def _head_patching_table(by_head: patching.PatchingResult) -> Table:
    """The ten heads whose output restores most of the clean behaviour, with intervals and verdicts (and
    the share's corrected interval the verdict is judged on)."""
    restored, iv, d = by_head.normalised(), by_head.intervals, by_head.decision
    rows = [
        [str(Head(l, h)), float(by_head.values[l, h]), float(restored[l, h])]
        + ([] if iv is None else [format_interval(iv.normalised_lower[l, h], iv.normalised_upper[l, h])])
        + [float(d.mean[l, h]), format_interval(d.corrected_lower[l, h], d.corrected_upper[l, h])]
        + [VERDICTS[int(d.code[l, h])]]
        for l in range(restored.shape[0])
        for h in range(restored.shape[1])
    ]
    rows.sort(key=lambda r: -abs(r[2]) if r[2] == r[2] else 0.0)
    headers = ["head", "metric", "restored"] + ([] if iv is None else ["95% interval"])
    headers += ["share", "corrected interval", f"matters (|share| >= {PATCH_SHARE})"]
    return Table(headers, rows[:10], "Head outputs (all positions), denoising")


def patching_section(ctx: ReportContext) -> Section:
    """Activation patching (denoising) on the task's clean/corrupted pair: head outputs, residual stream."""
    s = Section("patching", "Activation patching: clean into corrupted")
    s.skipped = (
        _needs_hooks(ctx)
        or heads.no_attention_reason(ctx.model)
        or _needs_task(ctx, "no clean/corrupted pair")
    )
    if s.skipped:
        return s
    try:
        example = ctx.task.patching_pair(1, generator=ctx.generator(8)).clean[0]
    except NotImplementedError as exc:
        s.skipped = str(exc)
        return s
    n_pos, positions = len(example), position_labels(example, ctx.task.token_names())
    cfg = ctx.model.cfg
    large = cfg.n_layers * (cfg.n_heads + n_pos) > EXACT_PATCHING_CELLS
    # exact: every sweep the model has (as `mechmem patch`); estimated: the two the table and figure read
    names = ("attn_head_out_all_pos", "resid_pre") if large else patching.model_sweeps(ctx.model)
    try:
        found = patching.decided_patching(
            ctx.model,
            ctx.task,
            names,
            seed=ctx.seed,
            policy=PATCH_POLICY.with_budget(ctx.n_samples),
            method="attribution" if large else "exact",
            memory_mb=ctx.memory_mb,
        )
    except MechmemError as exc:  # an architecture patching does not run on: this section only
        s.skipped = str(exc)
        return s
    results = found.results
    by_head, resid = results["attn_head_out_all_pos"], results["resid_pre"]
    for r in results.values():
        if r.check is not None:
            c = r.check
            s.lines.append(
                f"{r.sweep}: {r.method}; estimate vs exact on {c['cells']} sampled cells: Pearson "
                f"{c['pearson']:.2f}, Spearman {c['spearman']:.2f}, top-{c['k']} overlap {c['top_k']:.2f}."
            )
    s.findings = {name: r.to_dict() for name, r in results.items()}
    s.findings["decision"] = found.record()
    s.lines.append(
        f"Metric: {by_head.metric}; clean {by_head.clean:.3f}, corrupted {by_head.corrupted:.3f}. "
        "Each activation is patched from the clean run into the corrupted one; "
        "'restored' = (patched - corrupted) / (clean - corrupted), "
        f"1 = the clean answer is fully restored."
    )
    s.lines += patching.interval_lines(results)
    s.lines += decision_lines(found)
    s.lines.append(CORRECTED_NOTE)
    s.tables.append(_head_patching_table(by_head))
    s.add_figure("resid_pre", patching.plot_patching(resid, positions=positions))
    s.interactive["heatmaps"] = {
        "title": f"Patching sweeps ({len(results)}): metric after each patch",
        "maps": [sweep_map(r, positions) for r in results.values()],
        "positive": "the patch restores the clean behaviour",
        "note": (
            "Denoising: each cell patches one activation from the clean run into the corrupted one. "
            "Positions are labelled with the tokens of one example clean prompt."
        ),
    }
    return s
