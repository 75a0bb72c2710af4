"""The circuit keeps what the kept set needs, and its faithfulness is judged two-sided (docs/decisions.md,
"The circuit is what the kept set needs", "Faithful means inside a band", "Not measurable here", "Named heads
the circuit leaves out"): planted models whose answers are known by construction."""

import pytest
import torch
from helpers import assert_no_hooks, build_model

import mechmem
from mechmem.analysis.circuits.decided import decided_circuit, judge_circuit, measured_left_out
from mechmem.analysis.circuits.edges import build_graph
from mechmem.analysis.circuits.record import Circuit, band_verdict, not_measurable
from mechmem.analysis.planted import planted_induction_model, planted_split_model
from mechmem.analysis.stats import NO, UNDECIDED, YES, Band, DecisionPolicy, RatioMoments, judge
from mechmem.report.circuit_graph import summary_lines

MOVERS = ["L0H0", "L0H1", "L0H2", "L0H3"]


@pytest.fixture(scope="module")
def task():
    return mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})


@pytest.fixture(scope="module")
def split(task):
    model = planted_split_model()
    circuit, _ = decided_circuit(model, task, seed=0, heads=[*MOVERS, "L0H4"])
    assert_no_hooks(model)
    return circuit


def test_a_job_split_over_four_heads_keeps_all_four(split):
    graph = split.graph
    mover_edges = [i for i, e in enumerate(graph.edges) if e.sender.name in MOVERS]
    decided_in = split.kept & ~split.joint
    # No edge out of a mover carries 5% of the gap alone: the share tests put none of them in ...
    assert not decided_in[mover_edges].any()
    # ... yet each mover carries a quarter jointly, so the circuit keeps all four.
    assert set(MOVERS) <= set(split.heads())
    assert (
        split.joint[mover_edges].sum() >= 20
    )  # at most two of the 24 mover -> reader edges can go (4% each)
    low, high = split.intervals["faithfulness"]
    assert 0.8 <= low and high <= 1.25
    assert split.verdict == "yes"
    record = split.to_dict()
    assert set(MOVERS) <= set(record["heads"]) and len(record["kept_jointly"]) == int(split.joint.sum())


def test_every_edge_decided_in_stays_and_the_selection_says_so(split):
    shares = split.edge_shares()
    decided = [v == "in" for v in split.edge_verdicts()]
    assert all(split.kept[i] for i, d in enumerate(decided) if d)
    assert (shares["corrected_lower"][split.joint].abs() < 0.05).all()  # none of them would pass alone
    lines = summary_lines(split, "the repeats pair")
    assert f"{int(split.joint.sum())} more kept jointly" in lines[1]


def test_a_named_head_left_out_is_reported_with_its_joint_effect(split):
    (zero_head,) = split.left_out  # L0H4 writes nothing; the movers are in the circuit
    assert zero_head.head == "L0H4" and zero_head.share[0] == pytest.approx(0.0, abs=1e-6)
    assert "idle on these prompts, or a backup" in zero_head.reason()
    lines = summary_lines(split, "the repeats pair", {"L0H4": "induction"})
    assert any(line.startswith("Roles and circuit disagree: L0H4 (induction)") for line in lines)
    assert split.to_dict()["left_out"][0]["head"] == "L0H4"


def test_left_out_heads_measure_what_their_edges_carry(task):
    model = planted_split_model()
    graph = build_graph(model)
    every = torch.ones(len(graph.edges), dtype=torch.bool)
    without = every & ~torch.tensor([e.sender.name == "L0H0" for e in graph.edges])
    # A circuit without mover L0H0 (every other edge kept) loses its quarter; the record's numbers equal a
    # hand computation from the per-prompt values.
    _, values, _ = judge_circuit(
        model,
        task,
        without,
        task.patching_pair(64, generator=torch.Generator().manual_seed(5)).clean,
        torch.Generator().manual_seed(2),
        policy=DecisionPolicy(first=32, budget=64),
        ablation="mean",
        memory_mb=256.0,
        outgoing=(~without)[None],
    )
    full, empty, kept = values[0].double(), values[1].double(), values[2].double()
    gap = (full - empty).sum()
    assert float((kept - empty).sum() / gap) == pytest.approx(0.75, abs=0.03)
    (left,) = measured_left_out(["L0H0"], (~without)[None], values)
    assert left.share[0] == pytest.approx(float((full - values[4].double()).sum() / gap), abs=1e-9)
    assert left.added[0] == pytest.approx(float((values[5].double() - kept).sum() / gap), abs=1e-9)
    assert left.share[0] == pytest.approx(0.25, abs=0.03) and left.added[0] == pytest.approx(0.25, abs=0.03)
    assert left.share[1] < left.share[0] < left.share[2] and left.edges == int((~without).sum())


def test_a_circuit_that_overshoots_fails_and_says_so(task):
    model = planted_split_model(suppressor=0.3)  # L1H6 writes -0.3 of the answer
    graph = build_graph(model)
    kept = torch.tensor([e.sender.name != "L1H6" for e in graph.edges])
    policy = DecisionPolicy(first=64, budget=128)
    reference = task.patching_pair(64, generator=torch.Generator().manual_seed(9)).clean
    decision, values, _ = judge_circuit(
        model,
        task,
        kept,
        reference,
        torch.Generator().manual_seed(0),
        policy=policy,
        ablation="mean",
        memory_mb=256.0,
    )
    faithfulness = decision["faithfulness"]
    assert float(faithfulness.mean) == pytest.approx(1 / 0.7, rel=0.03)
    assert faithfulness.verdicts() == ["no"] and faithfulness.ceiling == 1.25
    circuit = Circuit(
        graph,
        torch.zeros(len(kept)),
        torch.zeros(len(kept)),
        torch.ones(len(kept), dtype=torch.bool),
        kept,
        values=dict(zip(("full", "empty", "circuit", "complement"), values.double().mean(1).tolist())),
        method="given",
        timings={"total": 0.0},
        ablation="mean",
        decision=decision,
        intervals={k: (float(f.lower), float(f.upper)) for k, f in decision.families.items()},
    )
    assert circuit.overshoots() and circuit.verdict == "no"
    assert "overshoots" in " ".join(summary_lines(circuit, "the repeats pair"))
    # The decided circuit keeps the suppressor: without it what remains leaves the selection band.
    decided, _ = decided_circuit(model, task, seed=0, policy=DecisionPolicy(first=64, budget=128))
    assert "L1H6" in decided.heads() and not decided.overshoots()


def test_a_gap_near_zero_prints_no_ratio():
    random_model = build_model(0, n_ctx=24, d_vocab=12)
    circuit, _ = decided_circuit(random_model, None, seed=0)
    reasons = circuit.unreadable()
    assert "includes 0" in reasons["faithfulness"] and "includes 0" in reasons["completeness"]
    text = " ".join(summary_lines(circuit, "the repeats pair"))
    assert "Faithfulness: not measurable here (the gap's 95% interval" in text
    assert f"{circuit.faithfulness:.3f}" not in text
    assert "not measurable" in repr(circuit) and circuit.to_dict()["not_measurable"]["faithfulness"]


def test_not_measurable_reads_the_denominator_and_the_width():
    assert not_measurable((0.9, 1.0), (2.0, 3.0)) == ""
    assert "includes 0" in not_measurable((0.9, 1.0), (-0.1, 3.0))
    assert "wider than 1.0" in not_measurable((-60826.0, 61204.0), (0.35, 2.04))
    assert "no interval" in not_measurable((float("nan"), float("nan")), (1.0, 2.0))


def test_a_band_is_judged_two_sided():
    band = Band(0.8, 1.25)
    policy = DecisionPolicy(first=32, budget=32)

    def judged(mean: float, spread: float):
        values = mean + spread * torch.linspace(-1, 1, 32)
        return judge(RatioMoments.from_values(values), band, z=2.0, policy=policy)

    assert int(judged(1.0, 0.05).code) == YES
    assert int(judged(1.4, 0.05).code) == NO  # above the band: overshoots
    assert int(judged(0.5, 0.05).code) == NO
    edge = judged(1.2, 0.5)
    assert int(edge.code) == UNDECIDED and float(edge.n_needed) > 32  # counted from the nearer end, 1.25
    assert [band_verdict(*i, band) for i in ((0.9, 1.1), (1.3, 1.5), (0.7, 0.9))] == [
        "yes",
        "no",
        "undecided",
    ]
    with pytest.raises(ValueError):
        Band(1.0, 1.0)


def test_the_planted_induction_circuit_is_unchanged():
    circuit, _ = decided_circuit(planted_induction_model(), None, seed=0)
    assert sorted(circuit.edge_names()) == [
        "L0H2->L1H1.k",
        "L1H1->logits",
        "embed->L0H2.v",
        "embed->L1H1.q",
        "embed->L1H1.v",
    ]
    assert not circuit.joint.any()


def test_an_unknown_head_name_fails_before_any_work():
    with pytest.raises(ValueError, match=r"head L5H0 is not in the model"):
        decided_circuit(planted_induction_model(), None, heads=["L1H1", "L5H0"])
