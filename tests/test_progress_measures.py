"""Circuit progress measures over step checkpoints (restricted / excluded loss, faithfulness) against each
checkpoint's circuit evaluated by hand, their invariants, the default circuit, and two runs side by side."""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from helpers import assert_no_hooks, load_script, write_series

from mechmem.analysis.circuits import EdgePatcher, build_graph
from mechmem.analysis.dynamics import (
    QUANTITIES,
    DynamicsComparison,
    EvalData,
    FixedCircuit,
    iter_models,
    progress_measures,
    run_dynamics,
    step_files,
)
from mechmem.analysis.interventions.engine import intervened_logits
from mechmem.analysis.stats import Z_95
from mechmem.cli import run_script

pytestmark = pytest.mark.usefixtures("one_thread")
N = 16
PLANTED = ("embed->L0H2.v", "L0H2->L1H1.k", "embed->L1H1.q", "embed->L1H1.v", "L1H1->logits")
"""The planted induction circuit's edges (the decided circuit of the planted model)."""


@pytest.fixture(scope="module")
def early(tmp_path_factory):
    """Both planted heads blended in around step 15 (checkpoints at 10, 20, 30)."""
    out = tmp_path_factory.mktemp("early")
    write_series(out, prev_at=15, induction_at=15, last=30)
    return out


@pytest.fixture(scope="module")
def late(tmp_path_factory):
    """The same, with the induction head blended in around step 25."""
    out = tmp_path_factory.mktemp("late")
    write_series(out, prev_at=15, induction_at=25, last=30)
    return out


@pytest.fixture(scope="module")
def planted_result(early):
    return run_dynamics(early, ("circuit",), n=N, circuit=FixedCircuit(PLANTED, "planted"))


def answer_loss(logits, pair):
    """Cross-entropy of the correct answer at the answer position, per prompt, the naive way."""
    rows = [logits[i, int(pair.answer_pos[i])] for i in range(len(pair))]
    return torch.stack([torch.nn.functional.cross_entropy(r, c) for r, c in zip(rows, pair.correct)])


def test_progress_measures_equal_each_checkpoint_evaluated_by_hand(early, planted_result):
    for i, (step, ckpt) in enumerate(iter_models(step_files(early))):
        data = EvalData(ckpt.task, N, 0, torch.device("cpu"))
        pair = data.circuit_pair(ckpt.model)
        patcher = EdgePatcher(ckpt.model, pair, "mean")  # the default metric: the logit difference
        keep = torch.tensor([e.name in PLANTED for e in patcher.graph.edges])
        every = torch.ones_like(keep)
        full, empty, circuit = patcher.evaluate(torch.stack([every, ~every, keep])).double()
        faithful = float((circuit - empty).sum() / (full - empty).sum())
        assert planted_result.curves["circuit.faithfulness"][i] == pytest.approx(faithful, abs=1e-6), step
        losses = {}
        for name, kept in (("full", every), ("restricted", keep), ("excluded", ~keep)):
            logits = intervened_logits(ckpt.model, pair.clean, patcher.circuit_variant(kept))
            losses[f"{name}_loss"] = answer_loss(logits, pair).double()
        losses["excluded_gap"] = losses["excluded_loss"] - losses["full_loss"]  # paired per prompt
        for name, loss in losses.items():
            point = planted_result.point(f"circuit.{name}", i)
            half = Z_95 * float(loss.std()) / math.sqrt(N)
            assert point.value == pytest.approx(float(loss.mean()), abs=1e-6), (step, name)
            assert point.upper - point.value == pytest.approx(half, abs=1e-6)
        assert_no_hooks(ckpt.model)


def test_the_planted_circuit_forms_where_it_was_blended_in(planted_result):
    events = {e.curve: e for e in planted_result.events}
    assert 10 <= events["circuit.restricted_loss"].step <= 20
    assert 10 <= events["circuit.faithfulness"].step <= 20
    last = {c: planted_result.point(c) for c in planted_result.groups["circuit"]}
    assert last["circuit.restricted_loss"].upper < math.log(2) < last["circuit.excluded_gap"].lower
    assert 10 <= events["circuit.excluded_gap"].step <= 20 and "circuit.excluded_loss" not in events
    assert last["circuit.faithfulness"].lower > 0.8


def test_invariants_every_edge_kept_and_no_edge_in_the_circuit(early):
    *_, (_, ckpt) = iter_models(step_files(early))
    data = EvalData(ckpt.task, N, 0, torch.device("cpu"))
    pair = data.circuit_pair(ckpt.model)
    every = tuple(e.name for e in build_graph(ckpt.model).edges)
    whole = progress_measures(ckpt.model, pair, FixedCircuit(every, "all"))
    torch.testing.assert_close(whole.of("restricted"), whole.of("full"), atol=1e-6, rtol=0)
    none = progress_measures(ckpt.model, pair, FixedCircuit((), "none"))
    torch.testing.assert_close(none.of("excluded"), none.of("full"), atol=1e-6, rtol=0)
    torch.testing.assert_close(none.of("restricted"), none.of("empty"), atol=1e-6, rtol=0)
    gap = QUANTITIES["circuit"].fn(
        ckpt.model, EvalData(ckpt.task, N, 0, torch.device("cpu"), FixedCircuit((), ""))
    )
    assert gap["circuit.excluded_gap"].value == pytest.approx(0.0, abs=1e-6)
    data = EvalData(ckpt.task, N, 0, torch.device("cpu"), FixedCircuit(every, "every edge"))
    points = QUANTITIES["circuit"].fn(ckpt.model, data)
    assert points["circuit.faithfulness"].value == pytest.approx(1.0, abs=1e-6)
    assert points["circuit.restricted_loss"].value == pytest.approx(
        points["circuit.full_loss"].value, abs=1e-6
    )


def test_default_circuit_is_the_final_checkpoints_decided_circuit(early, monkeypatch):
    from mechmem.analysis.dynamics import progress

    *_, (_, last) = iter_models(step_files(early))
    final_weights = last.model.blocks[1].attn.W_K.detach().clone()
    seen = []

    def decided(model, task, *, seed, ablation):
        seen.append((model.blocks[1].attn.W_K.detach().clone(), seed, ablation))
        return SimpleNamespace(edge_names=lambda: ["L0H2->L1H1.k", "L1H1->logits"]), "pair"

    monkeypatch.setattr(progress, "decided_circuit", decided)
    result = run_dynamics(early, ("circuit",), n=N, seed=3)
    assert len(seen) == 1 and torch.equal(seen[0][0], final_weights) and seen[0][1:] == (3, "mean")
    assert result.info["circuit"]["edges"] == ["L0H2->L1H1.k", "L1H1->logits"]
    assert "step_30.pt" in result.info["circuit"]["source"]


def test_a_model_without_heads_skips_the_circuit_with_its_reason(tmp_path):
    from mechmem.training.run import train_preset

    train_preset("facts", "quick", out_dir=tmp_path, steps=4, save_every=2, progress=False)
    result = run_dynamics(tmp_path, ("loss", "circuit"), n=8)
    assert result.groups["circuit"] == [] and set(result.curves) == {"loss", "acc"}
    assert "attention" in result.info["circuit"]["skipped"]


def test_a_run_compared_with_itself_differs_by_zero(planted_result):
    both = DynamicsComparison(planted_result, planted_result, planted_result.steps, [])
    frame = both.to_dataframe()
    assert len(frame) == 5 * 3 and (frame["difference"] == 0).all()
    assert frame["lower"].notna().all() and (frame["lower"] < 0).all() and (frame["upper"] > 0).all()
    assert all(e["b_minus_a"] in (0, None) for e in both.events())


@pytest.fixture(scope="module")
def script_run(early, late, tmp_path_factory):
    """`mechmem dynamics EARLY --compare LATE --quantities circuit --circuit-heads L0H2,L1H1`."""
    out = tmp_path_factory.mktemp("compare")
    args = [str(early), "--compare", str(late), "--quantities", "circuit", "--n-samples", str(N)]
    assert (
        run_script(load_script("dynamics").main, [*args, "--circuit-heads", "L0H2,L1H1", "--out", str(out)])
        == 0
    )
    return json.loads((out / "dynamics_compare.json").read_text()), out


def test_a_planted_difference_shows_where_expected(script_run):
    data, _ = script_run
    rows = {(r["curve"], r["step"]): r for r in data["rows"]}
    # the late run's induction head is still mostly blended out at step 20: its loss is higher, beyond the
    # interval; both have it by step 30
    at_20 = rows[("circuit.full_loss", 20)]
    assert at_20["lower"] > 0 and at_20["b"] > at_20["a"]
    assert rows[("circuit.full_loss", 30)]["difference"] < rows[("circuit.full_loss", 20)]["lower"]
    events = {e["curve"]: e for e in data["events"]}
    assert events["circuit.restricted_loss"]["b_minus_a"] >= 5


def test_script_compare_writes_the_table_figure_and_events(script_run, capsys):
    data, out = script_run
    assert data["differences"] == [] and data["steps"] == [10, 20, 30]
    assert "independent" in data["interval"] and {"step_a", "step_b"} <= set(data["events"][0])
    assert (out / "dynamics_compare_circuit.png").stat().st_size > 0


@pytest.mark.parametrize("flag", ["--circuit-edges=L0H2->L1H9.k", "--circuit-heads=L7H0"])
def test_script_unknown_circuit_names_are_one_line_exit_2(early, tmp_path, capsys, flag):
    args = [str(early), "--quantities", "circuit", flag, "--out", str(tmp_path)]
    assert run_script(load_script("dynamics").main, args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "not" in err
