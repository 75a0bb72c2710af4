"""The circuit's edge stage measures only what is still open (docs/decisions.md, "Measuring only what is still
open"): an edge test decided or precise at a look is frozen there and not path-patched again, and the stage
stops when the gap it would share out is shown absent."""

import math

import pytest
import torch
from helpers import assert_no_hooks, build_model, trained_induction_model

from mechmem.analysis.circuits.decided import decide_edges, decided_circuit
from mechmem.analysis.planted import planted_induction_model
from mechmem.analysis.stats import UNDECIDED, DecisionPolicy


@pytest.fixture(scope="module")
def trained():
    return trained_induction_model()


def stage(model, budget: int):
    return decide_edges(
        model,
        None,
        torch.Generator().manual_seed(0),
        policy=DecisionPolicy(first=32, budget=budget),
        ablation="mean",
        memory_mb=256.0,
        max_exact=256,
        with_attribution=False,
        steps=1,
        share=0.05,
        reference=None,
    )


def test_frozen_edges_keep_the_look_that_decided_them_and_are_not_measured_again(trained):
    full = stage(trained, 512)
    edge = full.decision["edge"]
    units = edge.units
    # this model has edges frozen at several looks and others measured to the budget
    assert units is not None and len(set(units.tolist())) >= 3, units
    # a test's units are exactly the prompts it was measured on; later rounds are missing (NaN)
    measured = (~full.values.isnan()).sum(1)
    assert torch.equal(measured, units.long()), (measured, units)
    frozen = units < full.decision.n
    assert bool(((edge.code[frozen] != UNDECIDED) | edge.precise[frozen]).all())
    # a frozen edge's estimate is the one on its own prompts: the same as a run that stopped at that look
    short = stage(trained, 64)
    assert short.decision["edge"].units is not None
    both = (units == 64) & (short.decision["edge"].units == 64)
    assert bool(both.any())
    torch.testing.assert_close(edge.mean[both], short.decision["edge"].mean[both])
    # the reported score of every tested edge is the mean over the prompts it was measured on
    scores, stderr = full.scores()
    where = full.tested.nonzero().flatten()
    expected = torch.stack([row[~row.isnan()].double().mean() for row in full.values]).float()
    torch.testing.assert_close(scores[where], expected)
    assert bool(stderr[where].isfinite().all())
    assert_no_hooks(trained)


def test_the_stage_stops_at_the_first_look_when_the_gap_is_shown_absent():
    random_model = build_model(0, n_ctx=24, d_vocab=12)
    circuit, _ = decided_circuit(random_model, None, seed=0)
    assert circuit.edge_decision.stopped == "no behaviour"
    assert circuit.edge_decision.looks == (64,)
    assert circuit.criteria()["behaviour"] == "no"  # judged again by the criteria stage, on held-out prompts
    assert "gap was shown smaller than 1.0 in size (corrected interval [" in circuit.undecided_edges()
    # a model with the behaviour runs the stage as before
    planted, _ = decided_circuit(planted_induction_model(), None, seed=0)
    assert planted.edge_decision.stopped == "settled" and planted.verdict == "yes"
    assert_no_hooks(random_model)


def test_frozen_edges_reach_the_json_and_the_frame(trained):
    circuit, _ = decided_circuit(trained, None, seed=0)
    record = circuit.to_dict()["edge_decision"]["families"]["edge"]
    units = circuit.edge_decision["edge"].units
    assert units is not None and bool((units < circuit.edge_decision.n).any())  # some edges froze early
    assert record["units"] == [float(u) for u in units.tolist()]
    frame = circuit.edge_decision.to_dataframe()
    assert frame["n"].tolist() == units.tolist()
    assert all(math.isfinite(u) for u in record["units"])


def test_a_screening_draw_without_behaviour_screens_and_tests_no_edge():
    """On graphs that need screening (here forced with max_exact=0) the screening draw's own full and empty
    runs decide whether any edge is scored: without behaviour none is, with it the screening runs."""
    random_model = build_model(0, n_ctx=24, d_vocab=12)
    circuit, _ = decided_circuit(random_model, None, seed=0, max_exact=0)
    assert circuit.edge_decision.stopped == "no behaviour"
    assert circuit.edge_decision.looks == (64,)
    assert circuit.attribution is None  # nothing was screened
    assert len(circuit.edge_decision["edge"].mean) == 0  # and nothing tested
    assert circuit.edge_names() == [] and circuit.criteria()["behaviour"] == "no"
    planted, _ = decided_circuit(planted_induction_model(), None, seed=0, max_exact=0)
    assert planted.attribution is not None and len(planted.edge_decision["edge"].mean) > 0
    assert planted.edge_decision.stopped != "no behaviour" and len(planted.edge_names()) > 0
    assert_no_hooks(random_model)


def test_the_screening_draw_without_behaviour_is_the_edge_stages_first_look(monkeypatch):
    """docs/decisions.md: with no behaviour on the screening draw the edge stage draws no new prompts; the
    criteria stage still draws its own."""
    from mechmem.analysis.circuits import decided

    drawn, real = [], decided.circuit_pair
    monkeypatch.setattr(decided, "circuit_pair", lambda *a, **k: drawn.append(a[2]) or real(*a, **k))
    circuit, _ = decided_circuit(build_model(0, n_ctx=24, d_vocab=12), None, seed=0, max_exact=0)
    assert circuit.edge_decision.looks == (64,) and circuit.edge_decision.stopped == "no behaviour"
    assert drawn == [64, 64]  # the screening draw and the criteria stage's first look, no third draw
    decided_circuit(planted_induction_model(), None, seed=0, max_exact=0)
    assert len(drawn) > 4  # with behaviour, the edge stage draws its own rounds after screening


def test_a_criterion_decided_no_ends_the_criteria_stage_and_only_with_the_rule():
    """'A "no" ends the criteria stage': the faithfulness of a gap near 0 stays open, the gap is decided no at
    once; with the rule the stage stops at its first look, without it it runs to its budget."""
    from mechmem.analysis.circuits.discovery import criteria_moments, judge_criteria

    def draw(k, generator):  # full - empty ~ 0.001 + noise: gap absent, faithfulness undecidable
        full = 0.001 + 0.01 * torch.randn(k, generator=generator)
        empty = torch.zeros(k)
        circuit = 0.5 * full + 0.01 * torch.randn(k, generator=generator)
        return criteria_moments(torch.stack([full, empty, circuit, full - circuit]))

    policy = DecisionPolicy(first=32, budget=256)
    stopped = judge_criteria(draw, policy, torch.Generator().manual_seed(0), stop_at_no=True)
    plain = judge_criteria(draw, policy, torch.Generator().manual_seed(0))
    assert stopped.looks == (32,) and stopped.stopped == "a criterion decided no"
    assert stopped["gap"].verdicts() == ["no"]
    assert stopped["faithfulness"].verdicts() == ["undecided"]
    assert plain.looks == (32, 64, 128, 256) and plain.stopped == "budget"


def test_a_circuit_asked_for_twice_runs_once_with_the_same_values(monkeypatch):
    from mechmem.analysis.circuits.edges import EdgePatcher
    from mechmem.tasks import build_task

    model = planted_induction_model()
    task = build_task("repeats", {"d_vocab": 12, "half": 8})
    pair = task.patching_pair(16, generator=torch.Generator().manual_seed(0))
    patcher = EdgePatcher(model, pair, "mean")
    n = len(patcher.graph.edges)
    every, some = torch.ones(n, dtype=torch.bool), torch.arange(n) % 3 == 0
    ran: list[int] = []
    real = EdgePatcher.run

    def counted(self, variants):
        ran.append(len(variants))
        return real(self, variants)

    monkeypatch.setattr(EdgePatcher, "run", counted)
    twice = patcher.evaluate(torch.stack([every, ~every, some, ~every, every]))
    assert ran == [3]
    once = torch.cat([patcher.evaluate(row[None]) for row in (every, ~every, some)])
    torch.testing.assert_close(twice, once[[0, 1, 2, 1, 0]])
    assert float((twice[0] - twice[1]).abs().max()) > 0.1  # the circuits differ
    assert_no_hooks(model)
