"""A circuit's verdict under each ablation and its faithfulness over circuit sizes (`circuit_robustness`): the
planted induction circuit, whose answer under each ablation is known by construction, CPR and CMD against a
naive loop, the bootstrap intervals, an overshooting circuit, and the report's table."""

import json
from dataclasses import replace

import pytest
import torch
from helpers import assert_no_hooks

import mechmem
from mechmem.analysis.circuits import Circuit, EdgePatcher, build_graph, circuit_prompts, circuit_robustness
from mechmem.analysis.circuits.robust import HELD_OUT_SEED, size_grid
from mechmem.analysis.planted import planted_split_model
from mechmem.analysis.roles import RoleResult, RoleThresholds
from mechmem.report.circuit_graph import edges_section
from mechmem.report.sections import ReportContext

pytestmark = pytest.mark.usefixtures("one_thread")

POSITION_EDGES = ("pos->L0H2.q", "pos->L0H2.k", "pos->L1H1.k")
"""What the planted heads read from the position embedding: L0H2 finds t - 1 by position, L1H1 avoids
position 0. Constant over prompts, so these edges carry nothing under mean and corrupted ablation."""


@pytest.fixture(scope="module")
def planted():
    model = mechmem.planted_induction_model()
    circuit, _ = mechmem.decided_circuit(model, None)
    return model, circuit


@pytest.fixture(scope="module")
def robust(planted):
    model, circuit = planted
    result = circuit_robustness(model, None, circuit, n=32)
    assert_no_hooks(model)
    return result


def test_the_planted_circuit_is_faithful_unless_positions_are_zeroed(planted, robust):
    # The circuit has no position edges: mean and corrupted keep the positions; zero erases them, so L0H2
    # no longer finds the previous token and the induction head's keys are wrong.
    model, circuit = planted
    assert {a.ablation: a.verdict for a in robust.per_ablation} == {
        "mean": "yes",
        "corrupted": "yes",
        "zero": "no",
    }
    assert robust.verdict == "yes under mean and corrupted, no under zero"
    assert robust["zero"].criteria["faithful"] == "no" and robust["zero"].measures["faithfulness"][2] < 0.8
    names = [e.name for e in circuit.graph.edges]
    with_positions = replace(circuit, kept=circuit.kept | torch.tensor([n in POSITION_EDGES for n in names]))
    zero = circuit_robustness(model, None, with_positions, ablations=("zero",), n=16)
    assert zero["zero"].verdict == "yes" and zero.verdict.startswith("robust")


def test_the_curve_runs_from_0_to_1_and_holds_the_circuit_size(robust):
    assert robust.sizes[0] == 0 and robust.sizes[-1] == robust.n_edges == 71
    assert robust.circuit_size == 5 and 5 in robust.sizes
    assert robust.sizes == size_grid(71, 5) == (0, 1, 4, 5, 7, 14, 36, 71)
    for a in robust.per_ablation:
        assert torch.equal(a.curve[0], torch.zeros(3)) and torch.equal(a.curve[-1], torch.ones(3))


def test_cpr_and_cmd_equal_a_naive_loop(planted, robust):
    model, circuit = planted
    pair, _ = circuit_prompts(model, None, 32, HELD_OUT_SEED)
    order = circuit.scores.abs().argsort(descending=True, stable=True).tolist()
    for ablation in ("mean", "zero"):  # under corrupted every point is exactly 0 or 1
        patcher = EdgePatcher(model, pair, ablation)
        full, empty = patcher.full_and_empty().double().sum(1).tolist()
        f = []
        for k in robust.sizes:  # one size at a time
            keep = torch.zeros(71, dtype=torch.bool)
            keep[order[:k]] = True
            f.append((float(patcher.evaluate(keep[None]).double().sum()) - empty) / (full - empty))
        x = [k / 71 for k in robust.sizes]
        cpr = cmd = 0.0
        for i in range(1, len(x)):
            cpr += (x[i] - x[i - 1]) * (f[i] + f[i - 1]) / 2
            cmd += (x[i] - x[i - 1]) * (abs(1 - f[i]) + abs(1 - f[i - 1])) / 2
        measures = robust[ablation].measures
        assert robust[ablation].curve[:, 0].tolist() == pytest.approx(f, abs=1e-5)
        assert measures["cpr"][0] == pytest.approx(cpr, abs=1e-6)
        assert measures["cmd"][0] == pytest.approx(cmd, abs=1e-6)


def test_intervals_hold_the_estimate_and_shrink_with_more_prompts(planted, robust):
    model, circuit = planted
    for a in robust.per_ablation:
        for value, lower, upper in a.measures.values():
            assert lower - 1e-6 <= value <= upper + 1e-6
        assert bool(
            (a.curve[:, 1] <= a.curve[:, 0] + 1e-6).all() and (a.curve[:, 0] <= a.curve[:, 2] + 1e-6).all()
        )
    more = circuit_robustness(model, None, circuit, ablations=("mean",), n=128)

    def width(result, measure):
        _, lower, upper = result["mean"].measures[measure]
        return upper - lower

    # Under mean ablation the top 4 edges' faithfulness varies over prompts (the others are exact).
    for measure in ("gap", "cpr", "cmd"):
        assert 0 < width(more, measure) < width(robust, measure)


def test_a_circuit_that_overshoots_is_not_faithful():
    model = planted_split_model(suppressor=0.3)  # L1H6 writes -0.3 of the answer; the circuit leaves it out
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    graph = build_graph(model)
    n = len(graph.edges)
    kept = torch.tensor([e.sender.name != "L1H6" for e in graph.edges])
    circuit = Circuit(
        graph, torch.zeros(n), torch.zeros(n), torch.ones(n, dtype=torch.bool), kept, {}, "given", "mean"
    )
    result = circuit_robustness(model, task, circuit, ablations=("mean", "corrupted"), n=16)
    for a in result.per_ablation:
        assert a.measures["faithfulness"][1] > 1.25 and a.criteria["faithful"] == "no" and a.verdict == "no"


def test_records_and_bad_input(planted, robust):
    model, circuit = planted
    frame = robust.to_dataframe()
    assert list(frame.columns) == ["ablation", "measure", "edges", "fraction", "value", "lower", "upper"]
    assert len(frame) == 3 * (5 + len(robust.sizes))
    record = json.loads(json.dumps(robust.to_dict(), allow_nan=False))
    assert record["ablations"]["zero"]["verdict"] == "no" and record["sizes"] == list(robust.sizes)
    assert "CircuitRobustness(5 of 71 edges" in repr(robust)
    assert type(mechmem.plot(robust)).__name__ == "Figure"
    with pytest.raises(ValueError, match="ablations must be"):
        circuit_robustness(model, None, circuit, ablations=("resample",))
    with pytest.raises(ValueError, match="sizes must be edge counts"):
        circuit_robustness(model, None, circuit, sizes=[72])
    with pytest.raises(TypeError, match="Circuit"):
        circuit_robustness(model, None, "L1H1")


def test_the_report_section_has_the_robustness_table():
    model = mechmem.planted_induction_model()
    section = edges_section(ReportContext(model, None, 64, 0, RoleResult([], (), RoleThresholds())))
    table = next(t for t in section.tables if t.headers[:2] == ["ablation", "verdict"])
    assert [row[:2] for row in table.rows] == [["mean", "yes"], ["corrupted", "yes"], ["zero", "no"]]
    assert section.findings["robustness"]["verdict"] == "yes under mean and corrupted, no under zero"
    assert "robustness" in section.figures and any(line.startswith("CPR:") for line in section.lines)
