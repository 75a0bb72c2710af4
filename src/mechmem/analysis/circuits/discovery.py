"""Circuit discovery on one draw: score every edge, prune to the smallest circuit reaching a target
faithfulness, measure it.

    from mechmem.analysis.circuits.discovery import circuit_pair, discover_circuit
    pair, _ = circuit_pair(model, task, 64, generator=torch.Generator().manual_seed(0))
    circuit = discover_circuit(model, pair, ablation="mean")        # a `Circuit`; circuit.to_dict() for JSON

Scores: exact path patching of every edge or, above `max_exact` edges, edge attribution patching (EAP,
`edge_attribution`) of every edge with exact path patching of the `RESCORE_EDGES` it ranks highest plus
`CHECK_EDGES` drawn with a fixed seed; when EAP fails its agreement check there (`attribution.TRUST`), every
edge is scored exactly (up to `max_fallback` edges). Pruning: the shortest prefix of the |score| ranking whose
faithfulness reaches `target`, or every edge with |score| >= threshold x |gap|. With e = every edge ablated
and gap = m(full) - m(e):
    faithfulness = (m(circuit) - m(e)) / gap        the circuit alone, every other edge ablated
    completeness = (m(full) - m(full minus circuit)) / gap      what ablating only the circuit's edges removes
ratios of sums over prompts, judged with the gap by the sequential rule (docs/decisions.md) against
`CONFIDENCE`. `discover_circuit` judges at one look, on the prompts that chose the edges;
`decided.decided_circuit` decides the edges over rounds and judges the criteria on new prompts.
"""

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechmem.analysis.circuits.edges import EdgePatcher, Graph
from mechmem.analysis.circuits.record import THRESHOLDS, Circuit, edge_frame
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
from mechmem.models.checks import check_count, check_model, check_number, check_seed
from mechmem.tasks.base import PatchingPair, check_pair, check_task
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask

REPEATS_HALF = 16
"""Longest r of the generic repeats pair [r, r] (cost grows with the length; induction needs no more)."""
CHECK_EDGES = 32
"""Edges outside EAP's top `RESCORE_EDGES` that are also scored exactly, to measure EAP's agreement."""
RESCORE_EDGES = 32
"""On graphs above `max_exact` edges: the edges EAP ranks highest that are re-scored exactly (at most
`max_exact`; docs/report.md, "Rules written before the run")."""
EDGE_STEPS = 4
"""Default of `edge_attribution(steps=...)`: EAP-IG with 4 steps (docs/circuits.md, "First order or integrated
gradients": closer to exact path patching than EAP; 16 steps no better)."""


def circuit_pair(
    model: torch.nn.Module, task: Any, n: int, *, generator: torch.Generator
) -> tuple[PatchingPair, str]:
    """(the task's clean/corrupted pair, its source in words); for a bare model or a task without a pair, the
    generic repeats pair, and the words say so (`mechmem.analysis.distribution.prompt_fit` checks its fit)."""
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
    """`circuit_pair` drawn from a generator seeded with `seed` (the report and `mechmem circuit` alike).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair, source = mechmem.circuit_prompts(model, task, 16, seed=0)
        >>> tuple(pair.clean.shape)
        (16, 16)
    """
    check_model(model)
    if task is not None:
        check_task(task, model)
    check_count("n", n)
    return circuit_pair(model, task, n, generator=torch.Generator().manual_seed(check_seed(seed)))


def _prune(
    patcher: EdgePatcher,
    scores: Tensor,
    target: float | None,
    threshold: float | None,
    full: float,
    empty: float,
    per_round: int = 8,
) -> tuple[Tensor, int]:
    """(kept edges, circuit evaluations): by threshold on |score| / |gap|, else the shortest |score| prefix
    reaching `target`, by a bisection evaluating `per_round` sizes per round (1: a binary search). Where
    faithfulness does not grow with the prefix, a prefix k reaching it with k - 1 not."""
    if threshold is not None:
        return scores.abs() >= threshold * abs(full - empty), 0
    order = scores.abs().argsort(descending=True, stable=True)

    def mask(k: int) -> Tensor:
        out = torch.zeros(len(order), dtype=torch.bool)
        out[order[:k]] = True
        return out

    lo, hi, evaluations = 0, len(order), 0  # faithfulness(0) = 0 < target <= 1 = faithfulness(all edges)
    gap = (full - empty) or math.nan
    while hi - lo > 1:
        sizes = sorted(
            {lo + max(1, (hi - lo) * i // (per_round + 1)) for i in range(1, per_round + 1)} - {hi}
        )
        faith = (patcher.evaluate(torch.stack([mask(k) for k in sizes])).mean(1) - empty) / gap
        evaluations += len(sizes)
        reached = [k for k, f in zip(sizes, faith.tolist()) if f >= target]
        hi = reached[0] if reached else hi
        lo = max([k for k in sizes if k < hi], default=lo)
    return mask(hi), evaluations


def edge_attribution(
    patcher: EdgePatcher, steps: int = EDGE_STEPS, *, per_prompt: bool = False
) -> Float[Tensor, "edge ..."]:
    """Every edge's score estimated from gradients (`EdgePatcher.attribution`; [edge, prompt] with
    `per_prompt`): steps = 0 is EAP on the clean run, steps = k EAP-IG over k runs whose embeddings lie
    (i + 1/2) / k of the way from clean to ablated."""
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
    """Every edge's score (`ScoredEdges`): exact path patching of every edge, or above `max_exact` edges of
    the min(rescore, max_exact) EAP ranks highest and `CHECK_EDGES` others, the rest keeping their estimate;
    every edge exactly when EAP fails its agreement check (up to `max_fallback`, default 4 x max_exact)."""
    edges, start = patcher.graph.edges, time.perf_counter()
    n_edges, chosen, attribution, check = len(edges), torch.arange(len(edges)), None, None
    scores, stderr = torch.zeros(n_edges), torch.full((n_edges,), math.nan)
    if n_edges > max_exact or with_attribution:
        estimates = edge_attribution(patcher, steps, per_prompt=True)
        attribution, stderr = estimates.mean(1), standard_error(estimates, dim=1)
        scores = attribution.clone()
    mid = time.perf_counter()
    estimate = "EAP" if not steps else f"EAP-IG ({steps} steps)"
    method = "exact path patching of every edge"
    if n_edges > max_exact:
        order = attribution.abs().argsort(descending=True, stable=True)
        top = min(rescore, max_exact)
        rest = order[top:]
        drawn = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(0))[:CHECK_EDGES]]
        chosen = torch.cat([order[:top], drawn]).sort().values
        method = f"{estimate} on all {n_edges} edges, exact path patching on {len(chosen)} of them"
    per_prompt = patcher.exact([edges[i] for i in chosen.tolist()])
    if attribution is not None:
        check = judge(attribution[chosen], per_prompt.mean(1)) | {"estimate": estimate}
    if check is not None and not check["trusted"] and len(chosen) < n_edges:
        agreed = f"{estimate} agreed at Pearson {check['pearson']:.2f} < {TRUST['pearson']}"
        if n_edges <= (4 * max_exact if max_fallback is None else max_fallback):
            chosen, per_prompt = torch.arange(n_edges), patcher.exact(edges)
            method = f"exact path patching of every edge ({agreed} on {check['cells']} edges)"
        else:
            method += f"; UNTRUSTED ranking: {agreed}"
    exact = torch.zeros(n_edges, dtype=torch.bool)
    scores[chosen], exact[chosen] = per_prompt.mean(1), True
    stderr[chosen] = standard_error(per_prompt, dim=1)
    timings = {"attribution": mid - start, "exact": time.perf_counter() - mid}
    return ScoredEdges(scores, stderr, exact, attribution, timings, check, method)


@dataclass(frozen=True)
class ScoredEdges:
    """What `score_edges` measured: one entry per edge of the patcher's graph."""

    scores: Float[Tensor, " edge"]
    stderr: Float[Tensor, " edge"]
    """Standard error over prompts of each score (where only estimated, of the per-prompt estimates: not its
    error as an estimate of the exact score); NaN with one prompt."""
    exact: Bool[Tensor, " edge"]
    """Whether the edge was scored by exact path patching (else `scores` holds its estimate)."""
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
    """The criteria's moments from per-prompt values of the full model, every edge ablated, the circuit and
    its complement (rows in that order): "gap", "faithfulness", "completeness" (the module docstring)."""
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
    """The sequential decision of the criteria (`THRESHOLDS`; the gap on |gap|) over `draw(k, generator)`'s
    moments (`criteria_moments`). With `stop_at_no`, sampling stops once one is decided "no" (`stopped` "a
    criterion decided no": docs/decisions.md, 'A "no" ends the criteria stage')."""
    gen = generator or torch.Generator().manual_seed(0)

    def settled(families: dict[str, Any]) -> bool:
        return no_open_tests(families) or (stop_at_no and any(int(f.code) == NO for f in families.values()))

    decision = decide(draw, THRESHOLDS, policy=policy, generator=gen, absolute=("gap",), settled=settled)
    if decision.stopped == "settled" and not no_open_tests(decision.families):
        decision = replace(decision, stopped="a criterion decided no")
    return decision


def marginal_intervals(decision: Decision) -> dict[str, tuple[float, float]]:
    """Each family's marginal 95% interval (lower, upper) of a decision of scalar tests (the criteria)."""
    return {k: (float(f.lower), float(f.upper)) for k, f in decision.families.items()}


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
    """Score every edge (`score_edges`), prune to `target` faithfulness (or keep every edge with |score| >=
    threshold x |gap|), and measure the circuit on the same prompts.

    Args:
        ablation: "corrupted", "mean" or "zero"; reference: the mean ablation's inputs.
        with_attribution: also compute EAP when every edge is scored exactly (for the agreement).
        steps: 0 for EAP, k for EAP-IG with k interpolation steps (`edge_attribution`).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> circuit = mechmem.discover_circuit(model, pair, max_exact=64)
        >>> circuit.verdict, round(circuit.values["circuit"], 1) == round(circuit.values["full"], 1)
        ('yes', True)
    """
    check_pair(pair, model)
    check_number("target", target, low=0.0, above=True, high=1.0)
    check_number("threshold", threshold, low=0.0, none=True)
    check_count("max_exact", max_exact, minimum=0)
    check_count("steps", steps, minimum=0)
    start = time.perf_counter()
    patcher = EdgePatcher(model, pair, ablation, reference=reference, memory_mb=memory_mb)
    setup = time.perf_counter()
    edges = score_edges(patcher, max_exact, with_attribution, steps=steps)
    scored = time.perf_counter()
    ends = patcher.full_and_empty()
    full, empty = ends.mean(1).tolist()
    per_round = 1 if len(patcher.graph.edges) > max_exact else 8  # binary search above max_exact edges
    kept, evaluations = _prune(patcher, edges.scores, target, threshold, full, empty, per_round)
    per_prompt = torch.cat([ends, patcher.evaluate(torch.stack([kept, ~kept]))])
    search = "binary search" if per_round == 1 else f"bisection, {per_round} sizes per round"
    pruning = {"search": search if threshold is None else "threshold", "evaluations": evaluations}
    once = replace(CIRCUIT_POLICY, first=len(pair.clean), budget=len(pair.clean))  # judged at one look
    decision = judge_criteria(lambda k, generator: criteria_moments(per_prompt), once)
    end = time.perf_counter()
    timings = edges.timings | {"setup": setup - start, "prune": end - scored, "total": end - start}
    return Circuit(
        patcher.graph,
        edges.scores,
        edges.stderr,
        edges.exact,
        kept,
        values=dict(zip(("full", "empty", "circuit", "complement"), per_prompt.mean(1).tolist())),
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
    """The patching `agreement` (Pearson, Spearman, top-k overlap) of EAP with the exact scores."""
    if circuit.attribution is None:
        raise ValueError("the circuit was discovered without attribution (with_attribution=True)")
    idx, full, empty = circuit.exact.nonzero().flatten(), circuit.values["full"], circuit.values["empty"]
    as_result = [
        PatchingResult("edges", ("edge",), full - x[idx], "noising", circuit.metric, full, empty)
        for x in (circuit.attribution, circuit.scores)
    ]
    return agreement(*as_result, k=k)
