"""The circuit decided by the evidence (docs/decisions.md, "Which edges the circuit has" and "The circuit is
what the kept set needs").

    from mechmem.analysis.circuits.decided import decided_circuit
    circuit, source = decided_circuit(model, task, seed=0)      # a `Circuit`; circuit.edge_verdicts()

Two stages share one alpha, split equally over the four families (`FAMILIES`). The edge stage tests every
edge's share s = sum(m(full) - m(edge ablated)) / sum(m(full) - m(every edge ablated)) against `EDGE_SHARE`
on |s| over doubling rounds of new prompts (a test decided or precise at a look is frozen there). The circuit
is the edges decided in plus those the kept set needs (`select_edges`). The criteria stage judges it on new
prompts (`discovery.judge_criteria`) and measures the named heads it leaves out. Above `max_exact` edges a
screening draw, set aside, chooses which edges are tested (`discovery.score_edges`); the rest are untested.
"""

import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from mechmem.analysis.circuits.discovery import (
    EDGE_STEPS,
    circuit_pair,
    criteria_moments,
    judge_criteria,
    marginal_intervals,
    score_edges,
)
from mechmem.analysis.circuits.edges import ABLATIONS, EdgePatcher, Graph, build_graph
from mechmem.analysis.circuits.record import CRITERIA, THRESHOLDS, Circuit, LeftOut
from mechmem.analysis.sequential import run_rounds
from mechmem.analysis.stats import (
    CIRCUIT_POLICY,
    EDGE_SHARE,
    NO,
    YES,
    Band,
    Decision,
    DecisionPolicy,
    RatioMoments,
    judge,
    no_open_tests,
    normal_interval,
    standard_error,
)
from mechmem.models.checks import (
    check_choice,
    check_count,
    check_heads,
    check_instance,
    check_memory_mb,
    check_model,
    check_seed,
    check_share,
    check_tokens,
)
from mechmem.models.parts import model_device
from mechmem.tasks.base import PatchingPair, check_task

FAMILIES = 1 + len(CRITERIA)
"""The circuit analysis's families of tests: `edge` and the three measured criteria (alpha split equally)."""
SELECTION_BAND = Band(0.9, 1.1)
"""Edges are removed while the faithfulness of what remains, on the edge stage's prompts, stays inside this
band (`select_edges`); fixed before the rule's first run (docs/decisions.md)."""


def stage_policy(policy: DecisionPolicy, families: int) -> DecisionPolicy:
    """`policy` at the alpha of `families` of the analysis's `FAMILIES` (the union bound over both stages)."""
    return replace(policy, alpha=policy.alpha * families / FAMILIES)


@dataclass(frozen=True)
class EdgeStage:
    """What the edge stage measured."""

    graph: Graph
    tested: Tensor
    """[edge] bool: the edges the stage tested (every edge, or the screening's exactly scored ones)."""
    decision: Decision
    """The family "edge": one test per tested edge, in graph order."""
    values: Tensor
    """[tested edge, prompt]: metric(full) - metric(edge ablated) on every prompt of the stage; NaN on the
    rounds after the edge's test froze (decided or precise: not measured again)."""
    reference: Tensor
    """The clean inputs mean ablation averages over (the first round's, or the caller's)."""
    screening: Any
    """The screening's `ScoredEdges` on graphs above `max_exact` (or with attribution), else None."""
    pairs: tuple[PatchingPair, ...] = ()
    """Every round's prompts, in order (what `select_edges` judges removals on)."""

    def scores(self) -> tuple[Tensor, Tensor]:
        """[edge] each edge's mean score and its standard error over the stage's prompts (where untested, the
        screening's estimate and its standard error)."""
        n, screening = len(self.tested), self.screening
        scores = screening.scores.clone() if screening is not None else torch.zeros(n)
        stderr = screening.stderr.clone() if screening is not None else torch.full((n,), float("nan"))
        for row, edge in zip(self.values, self.tested.nonzero().flatten().tolist()):
            measured = row[~row.isnan()]  # the edge's prompts: those before it froze
            scores[edge] = measured.double().mean().float()
            stderr[edge] = standard_error(measured, dim=0).float()
        return scores, stderr

    @property
    def kept(self) -> Tensor:
        """[edge] bool: the edges decided in."""
        kept = torch.zeros_like(self.tested)
        kept[self.tested.nonzero().flatten()] = self.decision["edge"].code == YES
        return kept


def decide_edges(
    model: torch.nn.Module,
    task: Any,
    generator: torch.Generator,
    *,
    policy: DecisionPolicy,
    ablation: str,
    memory_mb: float,
    max_exact: int,
    with_attribution: bool,
    steps: int,
    share: float,
    reference: Tensor | None,
) -> EdgeStage:
    """The edge stage: screening where the graph needs one, then rounds of new prompts, path-patching only
    the edges still open, until no edge test is open. It stops with `stopped` "no behaviour" once the gap is
    shown inside (-min_gap, min_gap) at the criteria's gap level, on the screening draw too (a stopping rule
    only: docs/decisions.md, "Measuring only what is still open")."""
    device, graph = model_device(model), build_graph(model)
    n_edges = len(graph.edges)
    tested, screening = torch.ones(n_edges, dtype=torch.bool), None
    gap_policy = stage_policy(policy, len(CRITERIA))
    gap_z = gap_policy.z(1, len(CRITERIA))

    def gap_test(gap: RatioMoments) -> Any:
        return judge(gap, THRESHOLDS["gap"], z=gap_z, policy=gap_policy, absolute=True, name="gap")

    def absent(gap: RatioMoments) -> bool:
        return bool(gap_test(gap).code == NO)

    state: dict[str, Any] = {"reference": reference, "gap": None, "absent": False}

    def draw(k: int, gen: torch.Generator) -> tuple[PatchingPair, EdgePatcher, Tensor]:
        """k new prompts, their patcher (mean ablation over the first draw's, or the caller's, reference)
        and full - empty [prompt]."""
        pair = circuit_pair(model, task, k, generator=gen)[0].to(device)
        patcher = EdgePatcher(model, pair, ablation, reference=state["reference"], memory_mb=memory_mb)
        state["reference"] = pair.clean if state["reference"] is None else state["reference"]
        full, empty = patcher.full_and_empty().detach().cpu()
        return pair, patcher, full - empty

    if n_edges > max_exact or with_attribution:
        _, patcher, gap = draw(policy.first, generator)
        state["absent"] = absent(RatioMoments.from_values(gap.double()))
        if state["absent"]:  # no behaviour, no screening: every edge out, untested; this is the first look
            tested, state["screened"] = torch.zeros(n_edges, dtype=torch.bool), gap
        else:
            screening = score_edges(patcher, max_exact, with_attribution, steps=steps)
            tested = screening.exact.clone()
    edges = [e for e, t in zip(graph.edges, tested.tolist()) if t]

    def measure(k: int, gen: torch.Generator, measured: dict[str, Tensor]) -> tuple[Any, dict[str, Any]]:
        """(this round's values [tested edge, k] and prompts, the edge family's moments)."""
        screened = state.pop("screened", None)
        if screened is not None and not edges and len(screened) == k:  # docs/decisions.md: the first look
            state["gap"] = RatioMoments.from_values(screened.double())
            values = torch.zeros(0, k)
            return (values, None), {"edge": RatioMoments.from_values(values.T, screened)}
        pair, patcher, diff = draw(k, gen)
        gap = RatioMoments.from_values(diff.double())
        state["gap"] = gap if state["gap"] is None else state["gap"] + gap
        open_ = measured.get("edge", torch.ones(len(edges), dtype=torch.bool))
        values = torch.full((len(edges), k), float("nan"))  # frozen edges are not measured again
        if bool(open_.any()):
            values[open_] = patcher.exact([e for e, o in zip(edges, open_.tolist()) if o]).detach().cpu()
        return (values, pair), {"edge": RatioMoments.from_values(values.nan_to_num(0.0).T, diff)}

    def shown_absent(families: dict[str, Any]) -> bool:
        return state["absent"] or (not no_open_tests(families) and absent(state["gap"]))

    run = run_rounds(
        measure,
        {"edge": share},
        policy=stage_policy(policy, 1),
        generator=generator,
        absent=shown_absent,
        absolute=("edge",),
        axes={"edge": ("edge",)},
        freeze=("edge",),
    )
    decision = run.decision
    if decision.stopped == "no behaviour":
        decision = replace(decision, info=decision.info | {"gap": gap_test(state["gap"]).to_dict()})
    values = torch.cat([v for v, _ in run.records], dim=1)
    pairs = tuple(p for _, p in run.records if p is not None)
    return EdgeStage(graph, tested, decision, values, state["reference"], screening, pairs)


def select_edges(
    model: torch.nn.Module, stage: EdgeStage, *, ablation: str, memory_mb: float
) -> tuple[Tensor, int]:
    """([edge] bool: every edge decided in plus those the kept set needs, the circuit evaluations it took).

    From every edge, blocks of the others (untested first, then by |score|, smallest first) are removed while
    the faithfulness of what remains, on the stage's prompts pooled, stays inside `SELECTION_BAND`; a block
    that leaves it is halved, down to single edges, which then stay (docs/decisions.md)."""
    sure, n_edges = stage.kept, len(stage.graph.edges)
    if stage.decision.stopped == "no behaviour" or not stage.pairs or bool(sure.all()):
        return sure.clone(), 0
    shapes: dict[tuple[int, ...], list[PatchingPair]] = {}
    for pair in stage.pairs:  # one patcher per prompt length, its rounds pooled
        shapes.setdefault(tuple(pair.clean.shape[1:]), []).append(pair)
    fields = PatchingPair.__dataclass_fields__
    pooled = (PatchingPair(*(torch.cat([getattr(p, f) for p in g]) for f in fields)) for g in shapes.values())
    patchers = [
        EdgePatcher(model, pair, ablation, reference=stage.reference, memory_mb=memory_mb) for pair in pooled
    ]

    def total(masks: Tensor) -> Tensor:
        return sum(patcher.evaluate(masks).double().sum(1) for patcher in patchers)

    full, empty = sum(patcher.full_and_empty().double().sum(1) for patcher in patchers).tolist()
    if full == empty:
        return sure.clone(), 0
    scores, _ = stage.scores()
    order = sorted(
        (i for i in range(n_edges) if not sure[i]),
        key=lambda i: (bool(stage.tested[i]), abs(float(scores[i]))),
    )
    keep, evaluations = torch.ones(n_edges, dtype=torch.bool), 0

    def remove(block: list[int]) -> None:
        nonlocal evaluations
        trial = keep.clone()
        trial[block] = False
        evaluations += 1
        value = float(total(trial[None]))
        if SELECTION_BAND.lower <= (value - empty) / (full - empty) <= SELECTION_BAND.upper:
            keep[block] = False
        elif len(block) > 1:
            remove(block[: len(block) // 2])
            remove(block[len(block) // 2 :])

    if order:
        remove(order)
    return keep, evaluations


def judge_circuit(
    model: torch.nn.Module,
    task: Any,
    kept: Tensor,
    reference: Tensor,
    generator: torch.Generator,
    *,
    policy: DecisionPolicy,
    ablation: str,
    memory_mb: float,
    outgoing: Tensor | None = None,
) -> tuple[Decision, Tensor, str]:
    """The criteria stage on rounds of new prompts: (the decision, the per-prompt values [4 + 2 h, prompt]:
    full, empty, circuit, complement, then per row of `outgoing` [h, edge] the full model without those edges
    and the circuit with them, the pair's source)."""
    device = model_device(model)
    rounds: list[Tensor] = []
    source: list[str] = []
    every = torch.ones_like(kept)
    masks = [every, ~every, kept, ~kept]
    for row in outgoing if outgoing is not None else []:
        masks += [every & ~row, kept | row]

    def draw(k: int, gen: torch.Generator) -> dict[str, RatioMoments]:
        pair, words = circuit_pair(model, task, k, generator=gen)
        source.append(words)
        patcher = EdgePatcher(model, pair.to(device), ablation, reference=reference, memory_mb=memory_mb)
        rounds.append(patcher.evaluate(torch.stack(masks)).detach().cpu())
        return criteria_moments(rounds[-1][:4])

    decision = judge_criteria(draw, stage_policy(policy, len(CRITERIA)), generator, stop_at_no=True)
    return decision, torch.cat(rounds, dim=1), source[0]


def left_out_heads(circuit_heads: list[str], heads: list[str], graph: Any) -> tuple[list[str], Tensor]:
    """(the `heads` not among `circuit_heads`, per such head its outgoing edges [edge]); checks the names."""
    names = [n.name for n in graph.nodes if n.kind == "head"]
    unknown = [h for h in heads if h not in names]
    if unknown:
        raise ValueError(f"heads {unknown} are not heads of this model (its heads: {', '.join(names)})")
    out = [h for h in dict.fromkeys(heads) if h not in circuit_heads]
    masks = torch.tensor([[e.sender.name == h for e in graph.edges] for h in out], dtype=torch.bool)
    return out, masks.reshape(len(out), len(graph.edges))


def measured_left_out(names: list[str], masks: Tensor, values: Tensor) -> tuple[LeftOut, ...]:
    """Each left-out head's `LeftOut` from the criteria stage's per-prompt values (`judge_circuit`)."""
    full, empty, circuit, _, *rest = values.double()

    def interval(num: Tensor) -> tuple[float, float, float]:
        m = RatioMoments.from_values(num, full - empty)
        r, se = float(m.ratio()), float(m.stderr())
        return (r, *normal_interval(r, se))

    return tuple(
        LeftOut(name, int(mask.sum()), interval(full - without), interval(plus - circuit))
        for name, mask, without, plus in zip(names, masks, rest[0::2], rest[1::2])
    )


def decided_circuit(
    model: torch.nn.Module,
    task: Any = None,
    *,
    seed: int = 0,
    policy: DecisionPolicy = CIRCUIT_POLICY,
    ablation: str = "mean",
    memory_mb: float = 256.0,
    share: float = EDGE_SHARE,
    max_exact: int = 256,
    with_attribution: bool = False,
    steps: int = EDGE_STEPS,
    reference: Tensor | None = None,
    heads: list[str] | tuple[str, ...] = (),
) -> tuple[Circuit, str]:
    """(the circuit whose edges and verdict are decided over rounds of prompts, the pair's source in words).

    Args:
        share: an edge is in when its share of the gap is decided >= share in size (`EDGE_SHARE`).
        max_exact, with_attribution, steps: which edges are tested on large graphs (`score_edges`).
        reference: the inputs mean ablation averages over (default: the first round's clean prompts).
        heads: head names (e.g. those the role step names); each one the circuit leaves out is measured on
            the criteria's prompts and reported with the reason (`Circuit.left_out`).
    `scores` and `stderr` are over the edge stage's prompts; values, intervals and `n` over the criteria's.

    Example:
        >>> import mechmem
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> circuit, source = mechmem.decided_circuit(model, None)
        >>> circuit.verdict, sorted(circuit.edge_names())
        ('yes', ['L0H2->L1H1.k', 'L1H1->logits', 'embed->L0H2.v', 'embed->L1H1.q', 'embed->L1H1.v'])
    """
    check_model(model)
    if task is not None:
        check_task(task, model)
    check_seed(seed)
    check_instance("policy", policy, DecisionPolicy, " (e.g. CIRCUIT_POLICY.with_budget(n))")
    check_choice("ablation", ablation, ABLATIONS)
    check_memory_mb(memory_mb)
    check_share("share", share)
    check_count("max_exact", max_exact, minimum=0)
    check_count("steps", steps, minimum=0)
    if reference is not None:
        check_tokens(model, reference, "reference")
    start = time.perf_counter()
    if heads:
        check_heads(model, list(heads))
        left_out_heads([], list(heads), build_graph(model))  # an unknown head name fails before any work
    generator = torch.Generator().manual_seed(seed)
    engine = {"ablation": ablation, "memory_mb": memory_mb}
    stage = decide_edges(
        model, task, generator, policy=policy, max_exact=max_exact, with_attribution=with_attribution,
        steps=steps, share=share, reference=reference, **engine
    )  # fmt: skip
    kept, evaluations = select_edges(model, stage, **engine)
    mid = time.perf_counter()
    in_circuit = [e.sender.name for e, k in zip(stage.graph.edges, kept.tolist()) if k]
    out_names, outgoing = left_out_heads(in_circuit, list(heads), stage.graph)
    decision, prompt_values, source = judge_circuit(
        model, task, kept, stage.reference, generator, policy=policy, outgoing=outgoing, **engine
    )
    left_out = measured_left_out(out_names, outgoing, prompt_values)
    prompt_values = prompt_values[:4]
    end = time.perf_counter()
    screening, search = stage.screening, "sequential edge tests, then removal judged on what remains"
    method = "exact path patching of every edge"
    if screening is not None:
        method = screening.method + f" (screening draw of {policy.first} prompts); the tested edges exactly"
    means = prompt_values.double().mean(1).tolist()
    return Circuit(
        stage.graph,
        *stage.scores(),
        stage.tested.clone(),
        kept,
        values=dict(zip(("full", "empty", "circuit", "complement"), means)),
        method=method,
        ablation=ablation,
        n=decision.n,
        attribution=None if screening is None else screening.attribution,
        threshold=share,
        timings={"edges": mid - start, "criteria": end - mid, "total": end - start},
        attribution_check=None if screening is None else screening.check,
        intervals=marginal_intervals(decision),
        pruning={"search": search, "evaluations": evaluations},
        decision=decision,
        discovery_n=stage.decision.n + (policy.first if screening is not None else 0),
        held_out=True,
        prompt_values=prompt_values,
        edge_decision=stage.decision,
        joint=kept & ~stage.kept,
        left_out=left_out,
    ), source
