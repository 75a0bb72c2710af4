"""Circuit discovery: score every edge, prune to the smallest circuit reaching a target faithfulness, measure
it.

    from mechmem.analysis.circuits.discovery import circuit_pair, discover_circuit
    pair, _ = circuit_pair(model, task, 64, generator=torch.Generator().manual_seed(0))
    circuit = discover_circuit(model, pair, ablation="mean")        # a `Circuit`; circuit.to_dict() for JSON

Scores (`mechmem.analysis.circuits`, run by the intervention engine): exact path patching of every edge, or,
on graphs with more than `max_exact` edges, edge attribution patching (EAP, `edge_attribution`) of every edge
followed by exact path patching of a fixed number of edges whatever the graph's size: the `RESCORE_EDGES`
(at most `max_exact`) EAP ranks highest plus `CHECK_EDGES` others drawn with a fixed seed (the rest keep their
EAP estimate). The estimate flags itself: its agreement with the exact
scores on those edges is stored in `Circuit.attribution_check` (`attribution.judge`, rule
`attribution.TRUST`); when it fails, every edge is scored exactly (up to `max_fallback` edges; beyond, the
method says the ranking is untrusted). Pruning: edges ranked by |score|; the circuit is the shortest prefix of
the ranking whose faithfulness reaches `target` (found by a batched bisection over the prefix length, or on
graphs above `max_exact` edges a binary search costing log2(edges) circuit evaluations; see `_prune`), or,
with `threshold`, every edge whose |score| is at least threshold x |gap|. Measures, with e =
every edge ablated and gap = m(full) - m(e):
    faithfulness = (m(circuit) - m(e)) / gap        the circuit alone, every other edge ablated
    completeness = (m(full) - m(full minus circuit)) / gap      what ablating only the circuit's edges removes
Gap, faithfulness and completeness are ratios of sums over prompts; their verdict (`CONFIDENCE`) follows the
sequential rule (`mechmem.analysis.sequential`, docs/decisions.md). `discover_circuit` on a fixed pair judges
it at one look, on the prompts that chose the edges; `mechmem.analysis.circuits.decided.decided_circuit`
decides every edge by its share of the gap over rounds of prompts and then judges the criteria on new ones.
Each criterion is "yes" when its whole corrected interval passes, "no" when it fails, else "undecided" (with
the prompts that would decide it); the circuit is confident ("yes") when every criterion is yes, "no" when
one is no. `intervals` holds the marginal 95% intervals, for reading.
    behaviour    |gap| interval vs min_gap (the behaviour exists)
    faithful     faithfulness interval inside [min_faithfulness, max_faithfulness] (the circuit alone keeps
                 about the full model's behaviour: neither much less nor much more)
    sparse       at most max_edge_fraction of the edges are kept (a count: yes or no)
    complete     completeness interval vs min_faithfulness (ablating only the circuit removes most of it)
Here the prefix is chosen on one draw; each edge's standard error is reported next to its score.

The record they fill, `Circuit`, and the confidence rule live in `mechmem.analysis.circuits.record`.
"""

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechmem.analysis.circuits.edges import EdgePatcher, Graph
from mechmem.analysis.circuits.record import CONFIDENCE, CRITERIA, THRESHOLDS, Circuit, edge_frame
from mechmem.analysis.frames import short_repr
from mechmem.analysis.patching import PatchingResult
from mechmem.analysis.patching.attribution import TRUST, agreement, judge
from mechmem.analysis.sequential import decide
from mechmem.analysis.stats import (
    CIRCUIT_POLICY,
    NO,
    Decision,
    DecisionPolicy,
    RatioMoments,
    no_open_tests,
    standard_error,
)
from mechmem.tasks.base import PatchingPair
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask

REPEATS_HALF = 16
"""Longest r of the generic repeats pair [r, r] (cost grows with the length; induction needs no more)."""
CHECK_EDGES = 32
"""Edges outside EAP's top `RESCORE_EDGES` that are also scored exactly, to measure EAP's agreement."""
RESCORE_EDGES = 32
"""On graphs above `max_exact` edges: the edges EAP ranks highest that are re-scored exactly (at most
`max_exact`). A fixed number, so the exact work grows with the layers (each edge one pass), not with the edges
(layers^2). Fixed before any measurement (docs/report.md, "Rules written before the run")."""
EDGE_STEPS = 4
"""Default of `edge_attribution(steps=...)`: EAP-IG with 4 steps. Measured (docs/circuits.md, "First order or
integrated gradients"): against exact path patching of every edge, Pearson 0.64 -> 0.81 on the planted model
and 0.46 -> 0.94, 0.57 -> 0.82 on a held-out 3-layer LayerNorm/GELU model (two seeds), for 4 passes instead of
1 (16 steps: no better)."""


def circuit_pair(
    model: torch.nn.Module, task: Any, n: int, *, generator: torch.Generator
) -> tuple[PatchingPair, str]:
    """The task's clean/corrupted pair, with the pair's source in words; the generic repeats pair is only the
    fallback for a bare model or a task without a pair (its words say so): a model trained on other data may
    not do on random repeats what it does on its own (`mechmem.analysis.distribution.prompt_fit` checks)."""
    if task is not None:
        try:
            return task.patching_pair(n, generator=generator), f"the {task.name} task's clean/corrupted pair"
        except NotImplementedError:
            pass
    config = RepeatsConfig.for_model(model)
    config = RepeatsConfig.for_model(model, half=min(config.half, REPEATS_HALF))
    pair = RepeatsTask(config).patching_pair(n, generator=generator)
    why = "a bare model" if task is None else f"the {task.name} task has no pair"
    words = f"fallback ({why}): the generic repeated-random-tokens pair ([r, r], |r| = {config.half}, first "
    return pair, words + "copy of the answer changed)"


def circuit_prompts(model: torch.nn.Module, task: Any, n: int, seed: int) -> tuple[PatchingPair, str]:
    """The prompts of a circuit for `seed`: `circuit_pair` drawn from a generator seeded with `seed`. The
    report's edge section and mechmem circuit both call this, so they measure the same prompts for the
    same seed.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair, source = mechmem.circuit_prompts(model, task, 16, seed=0)
        >>> tuple(pair.clean.shape)
        (16, 16)
    """
    return circuit_pair(model, task, n, generator=torch.Generator().manual_seed(seed))


def _prune(
    patcher: EdgePatcher,
    scores: Tensor,
    target: float | None,
    threshold: float | None,
    full: float,
    empty: float,
    per_round: int = 8,
) -> tuple[Tensor, int]:
    """The kept edges and the circuit evaluations it took: by threshold on |score| / |gap|, else the shortest
    |score| prefix reaching `target`.

    The prefix is found by a batched bisection: each round evaluates `per_round` sizes spread over the bracket
    (one engine call) and keeps the sub-bracket where faithfulness first reaches the target; per_round = 1 is
    a binary search (ceil(log2 edges) evaluations). It returns the shortest prefix when faithfulness grows
    with the prefix, else a prefix k reaching it with k - 1 not.
    """
    if threshold is not None:
        return scores.abs() >= threshold * abs(full - empty), 0
    order = scores.abs().argsort(descending=True, stable=True)

    def mask(k: int) -> Tensor:
        out = torch.zeros(len(order), dtype=torch.bool)
        out[order[:k]] = True
        return out

    lo, hi = 0, len(order)  # faithfulness(0) = 0 < target <= 1 = faithfulness(all edges)
    evaluations = 0
    while hi - lo > 1:
        sizes = sorted(
            {lo + max(1, (hi - lo) * i // (per_round + 1)) for i in range(1, per_round + 1)} - {hi}
        )
        faith = (patcher.evaluate(torch.stack([mask(k) for k in sizes])).mean(1) - empty) / (
            (full - empty) or math.nan
        )
        evaluations += len(sizes)
        reached = [k for k, f in zip(sizes, faith.tolist()) if f >= target]
        hi = reached[0] if reached else hi
        lo = max([k for k in sizes if k < hi], default=lo)
    return mask(hi), evaluations


def edge_attribution(
    patcher: EdgePatcher, steps: int = EDGE_STEPS, *, per_prompt: bool = False
) -> Float[Tensor, "edge ..."]:
    """Every edge's score estimated from gradients: -(u_ablated - u_clean) . d metric / d port, summed over
    prompts, positions and d_model (the sign of `EdgePatcher.exact`); with `per_prompt`, [edge, prompt]: each
    prompt's estimate, whose mean is that score.

    steps = 0: the gradient on the clean run (EAP, one forward and one backward pass;
    `EdgePatcher.attribution`). steps = k: integrated gradients (EAP-IG): the gradient averaged over k runs
    whose token and position embeddings lie (i + 1/2) / k of the way from their clean to their ablated values
    (k passes).
    """
    alphas = (None,) if steps == 0 else tuple((i + 0.5) / steps for i in range(steps))
    return patcher.attribution(alphas, per_prompt=per_prompt)


def score_edges(
    patcher: EdgePatcher,
    max_exact: int,
    with_attribution: bool,
    *,
    steps: int = EDGE_STEPS,
    max_fallback: int | None = None,
    rescore: int = RESCORE_EDGES,
) -> "ScoredEdges":
    """Every edge's score (`ScoredEdges`): exact path patching of every edge, or, when there are more than
    `max_exact`, of the min(rescore, max_exact) edges EAP ranks highest and `CHECK_EDGES` others (the rest
    keep their EAP estimate); every edge exactly when EAP fails its agreement check (up to `max_fallback`,
    default 4 x max_exact)."""
    edges, start = patcher.graph.edges, time.perf_counter()
    n_edges, attribution, check = len(edges), None, None
    max_fallback = 4 * max_exact if max_fallback is None else max_fallback
    if n_edges > max_exact or with_attribution:
        estimates = edge_attribution(patcher, steps, per_prompt=True)
        attribution, attribution_stderr = estimates.mean(1), standard_error(estimates, dim=1)
    mid = time.perf_counter()
    chosen = torch.arange(n_edges)
    estimate = "EAP" if not steps else f"EAP-IG ({steps} steps)"
    method = "exact path patching of every edge"
    if n_edges > max_exact:
        order = attribution.abs().argsort(descending=True, stable=True)
        top = min(rescore, max_exact)
        rest = order[top:]
        drawn = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(0))[:CHECK_EDGES]]
        chosen = torch.cat([order[:top], drawn]).sort().values
    per_prompt = patcher.exact([edges[i] for i in chosen.tolist()])
    if attribution is not None:
        check = judge(attribution[chosen], per_prompt.mean(1)) | {"estimate": estimate}
        if n_edges > max_exact:
            method = f"{estimate} on all {n_edges} edges, exact path patching on {len(chosen)} of them"
    if check is not None and not check["trusted"] and len(chosen) < n_edges:
        if n_edges <= max_fallback:
            chosen = torch.arange(n_edges)
            per_prompt = patcher.exact(edges)
            method = (
                f"exact path patching of every edge ({estimate} agreed at Pearson {check['pearson']:.2f} < "
                f"{TRUST['pearson']} on {check['cells']} edges)"
            )
        else:
            method += (
                f"; UNTRUSTED ranking: {estimate} agreed at Pearson {check['pearson']:.2f} "
                f"< {TRUST['pearson']}"
            )
    scores = attribution.clone() if attribution is not None else torch.zeros(n_edges)
    stderr = attribution_stderr.clone() if attribution is not None else torch.full((n_edges,), math.nan)
    exact = torch.zeros(n_edges, dtype=torch.bool)
    scores[chosen], exact[chosen] = per_prompt.mean(1), True
    stderr[chosen] = standard_error(per_prompt, dim=1)
    timings = {"attribution": mid - start, "exact": time.perf_counter() - mid}
    return ScoredEdges(scores, stderr, exact, attribution, timings, check, method)


@dataclass(frozen=True)
class ScoredEdges:
    """What `score_edges` measured: one entry per edge of the patcher's graph."""

    scores: Float[Tensor, " edge"]
    """The exact score where `exact`, else the EAP estimate."""
    stderr: Float[Tensor, " edge"]
    """Standard error over prompts of each score: the exact one's, or where only estimated the estimate's
    (the spread of the per-prompt EAP or EAP-IG values: it covers the estimate's mean over prompts, not its
    error as an estimate of the exact score); NaN with one prompt."""
    exact: Bool[Tensor, " edge"]
    """Whether the edge was scored by exact path patching."""
    attribution: Float[Tensor, " edge"] | None
    """Every edge's EAP (or EAP-IG) estimate, when one was computed."""
    timings: dict[str, float]
    """Seconds spent on attribution and on exact scoring."""
    check: dict[str, Any] | None
    """The estimate's agreement with the exact scores on the exactly scored edges (`attribution.judge`)."""
    method: str
    """How the edges were scored, in words."""

    def to_dataframe(self, graph: Graph | None = None) -> Any:
        """One row per edge (`edge_frame`); with the patcher's `graph`, the edges' names too."""
        return edge_frame(self.scores, self.stderr, self.exact, self.attribution, graph)

    def __repr__(self) -> str:
        return short_repr(
            "ScoredEdges",
            f"{len(self.scores)} edges, {int(self.exact.sum())} exact",
            f"largest |score| {float(self.scores.abs().max()):.3g}" if len(self.scores) else "",
            f"method {self.method[:80]!r}",
        )


def criteria_moments(values: Float[Tensor, "4 batch"]) -> dict[str, RatioMoments]:
    """The sequential decision's families from per-prompt metric values of the full model, every edge ablated,
    the circuit and its complement (rows in that order): "gap" = mean(full - empty), "faithfulness" =
    sum(circuit - empty) / sum(full - empty), "completeness" = sum(full - complement) / sum(full - empty)."""
    full, empty, circuit, complement = values.detach().double().cpu()
    gap = full - empty
    return {
        "gap": RatioMoments.from_values(gap),
        "faithfulness": RatioMoments.from_values(circuit - empty, gap),
        "completeness": RatioMoments.from_values(full - complement, gap),
    }


def judge_criteria(
    draw: Any, policy: DecisionPolicy, generator: torch.Generator | None = None, *, stop_at_no: bool = False
) -> Decision:
    """The sequential decision of the measured criteria (`THRESHOLDS`; the gap on |gap|): `draw(k,
    generator)` gives the moments (`criteria_moments`) of k new prompts. With `stop_at_no`, sampling also
    stops once one criterion is decided "no" (the verdict is then "no" whatever the others say; `stopped`
    reads "a criterion decided no": docs/decisions.md, 'A "no" ends the criteria stage')."""
    gen = generator or torch.Generator().manual_seed(0)

    def settled(families: dict[str, Any]) -> bool:
        return no_open_tests(families) or (stop_at_no and any(int(f.code) == NO for f in families.values()))

    decision = decide(draw, THRESHOLDS, policy=policy, generator=gen, absolute=("gap",), settled=settled)
    if decision.stopped == "settled" and not no_open_tests(decision.families):
        decision = replace(decision, stopped="a criterion decided no")
    return decision


def single_look(values: Float[Tensor, "4 batch"], policy: DecisionPolicy = CIRCUIT_POLICY) -> Decision:
    """The criteria of one fixed set of prompts, judged by the sequential rule at one look (K = 1)."""
    n = values.shape[1]
    once = DecisionPolicy(policy.alpha, n, n, policy.precision, policy.min_units)
    return judge_criteria(lambda k, generator: criteria_moments(values), once)


def marginal_intervals(decision: Decision) -> dict[str, tuple[float, float]]:
    """Each family's marginal 95% interval (lower, upper) of a decision of scalar tests (the criteria)."""
    return {k: (float(f.lower), float(f.upper)) for k, f in decision.families.items()}


def _prune_and_measure(
    patcher: EdgePatcher, scores: Tensor, target: float, threshold: float | None, max_exact: int
) -> tuple[Tensor, dict[str, float], Tensor, dict[str, Any]]:
    """(kept edges, the four circuit values, their per-prompt values [4 batch], how the pruning searched):
    the full model and every edge ablated, the pruning (binary search above `max_exact` edges, else the
    8-per-round bisection), then the circuit and its complement."""
    every = torch.ones(len(patcher.graph.edges), dtype=torch.bool)
    ends = patcher.evaluate(torch.stack([every, ~every]))
    full, empty = ends.mean(1).tolist()
    per_round = 1 if len(every) > max_exact else 8
    kept, evaluations = _prune(patcher, scores, target, threshold, full, empty, per_round)
    parts = patcher.evaluate(torch.stack([kept, ~kept]))
    circuit_value, complement = parts.mean(1).tolist()
    search = "binary search" if per_round == 1 else f"bisection, {per_round} sizes per round"
    pruning = {"search": search if threshold is None else "threshold", "evaluations": evaluations}
    values = {"full": full, "empty": empty, "circuit": circuit_value, "complement": complement}
    return kept, values, torch.cat([ends, parts]), pruning


def discover_circuit(
    model: torch.nn.Module,
    pair: PatchingPair,
    *,
    ablation: str = "mean",
    reference: Tensor | None = None,
    target: float = 0.9,
    threshold: float | None = None,
    max_exact: int = 256,
    with_attribution: bool = False,
    memory_mb: float = 256.0,
    steps: int = EDGE_STEPS,
) -> Circuit:
    """Score every edge (exact, or above `max_exact` edges EAP then exact on a fixed sample), prune, and
    measure the circuit.

    Args:
        ablation: "corrupted", "mean" or "zero" (`mechmem.analysis.circuits`); reference: mean-ablation
        inputs. target: faithfulness the pruned circuit must reach (ignored with `threshold`).
        threshold: keep every edge with |score| >= threshold x |m(full) - m(every edge ablated)| instead.
        with_attribution: also compute EAP when every edge is scored exactly (for the agreement).
        steps: 0 for EAP, k for EAP-IG with k interpolation steps (`edge_attribution`).
        max_exact: graphs with more edges are scored by EAP with `RESCORE_EDGES` + `CHECK_EDGES` edges exact
            and pruned by binary search (`_prune` with one evaluation per round); smaller ones exactly, pruned
            by the 8-per-round bisection.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> circuit = mechmem.discover_circuit(model, pair, max_exact=64)
        >>> circuit.verdict, round(circuit.values["circuit"], 1) == round(circuit.values["full"], 1)
        ('yes', True)
    """
    start = time.perf_counter()
    patcher = EdgePatcher(model, pair, ablation, reference=reference, memory_mb=memory_mb)
    setup = time.perf_counter()
    edges = score_edges(patcher, max_exact, with_attribution, steps=steps)
    scored = time.perf_counter()
    kept, values, per_prompt, pruning = _prune_and_measure(
        patcher, edges.scores, target, threshold, max_exact
    )
    decision = single_look(per_prompt)
    end = time.perf_counter()
    timings = edges.timings | {"setup": setup - start, "prune": end - scored, "total": end - start}
    return Circuit(
        patcher.graph,
        edges.scores,
        edges.stderr,
        edges.exact,
        kept,
        values=values,
        method=edges.method,
        ablation=ablation,
        n=len(pair.clean),
        attribution=edges.attribution,
        target=None if threshold is not None else target,
        threshold=threshold,
        timings=timings,
        attribution_check=edges.check,
        intervals=marginal_intervals(decision),
        pruning=pruning,
        decision=decision,
        discovery_n=len(pair.clean),
        prompt_values=per_prompt.detach().cpu(),
    )


def attribution_agreement(circuit: Circuit, k: int = 10) -> dict[str, float]:
    """Pearson and Spearman correlation and top-k overlap of the EAP estimates with the exact scores (the
    patching `agreement`, over the exactly scored edges)."""
    if circuit.attribution is None:
        raise ValueError("the circuit was discovered without attribution (with_attribution=True)")
    idx = circuit.exact.nonzero().flatten()
    as_result = [
        PatchingResult(
            "edges",
            ("edge",),
            circuit.values["full"] - x[idx],
            "noising",
            circuit.metric,
            circuit.values["full"],
            circuit.values["empty"],
        )
        for x in (circuit.attribution, circuit.scores)
    ]
    return agreement(*as_result, k=k)


__all__ = [
    "CHECK_EDGES",
    "CONFIDENCE",
    "CRITERIA",
    "EDGE_STEPS",
    "RESCORE_EDGES",
    "THRESHOLDS",
    "Circuit",
    "ScoredEdges",
    "attribution_agreement",
    "circuit_pair",
    "circuit_prompts",
    "criteria_moments",
    "discover_circuit",
    "edge_attribution",
    "judge_criteria",
    "marginal_intervals",
    "score_edges",
]
