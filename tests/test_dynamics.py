"""Training dynamics: transitions on hand-made curves, a synthetic checkpoint series whose order of
events is known, agreement with the trainer's own log, and the script's outputs and one-line errors."""

import json
import math

import pytest
import torch
from helpers import SAVE_EVERY, assert_no_hooks, load_script, write_series

from mechmem.analysis.dynamics import (
    QUANTITIES,
    CurvePoint,
    EvalData,
    FixedCircuit,
    iter_models,
    run_dynamics,
    set_levels,
    step_files,
)
from mechmem.analysis.dynamics.views import metrics_agreement, metrics_curves
from mechmem.analysis.transitions import (
    Rule,
    event_order,
    find_event,
    format_order,
    level,
    level_crossing,
    steepest,
    steepest_change,
)
from mechmem.cli import run_script

pytestmark = pytest.mark.usefixtures("one_thread")
PREV_AT, INDUCTION_AT = 60, 140
"""The synthetic schedule: the previous-token head forms at step 60, the induction head at step 140."""


# -- transitions on hand-made curves -------------------------------------------------------------------------
def test_level_crossing_interpolates_between_saves():
    event = level_crossing([0, 10, 20, 30], [0.0, 0.2, 0.6, 1.0], level(0.5))
    assert event.interval == (10, 20) and event.step == pytest.approx(17.5)
    assert not event.at_start and event.reached


def test_level_crossing_down_and_first_crossing_only():
    down = level_crossing([0, 10, 20], [4.0, 3.0, 1.0], level(2.0, "down"))
    assert down.step == pytest.approx(15.0)
    blip = level_crossing([0, 10, 20, 30, 40], [0.0, 0.6, 0.1, 0.1, 0.9], level(0.5))
    assert blip.step == pytest.approx(0 + 0.5 / 0.6 * 10)


def test_curve_that_never_crosses_is_not_reached():
    event = level_crossing([0, 10, 20], [0.1, 0.3, 0.49], level(0.5), "flat")
    assert not event.reached and event.step is None and event.interval is None
    assert "not reached" in event.describe()
    assert format_order([event]) == "no event reached"


def test_crossing_at_the_first_save_is_marked_at_start():
    event = level_crossing([50, 100], [0.95, 1.0], level(0.9))
    assert event.at_start and event.step == 50 and "or before" in format_order([event])


def test_nan_values_are_skipped():
    event = level_crossing([0, 10, 20, 30], [0.0, math.nan, None, 1.0], level(0.5))
    assert event.step == pytest.approx(15.0) and event.interval == (0, 30)


def test_steepest_rise_and_fall():
    steps, values = [0, 10, 20, 30, 40], [0.0, 0.1, 0.8, 0.9, 1.0]
    assert steepest_change(steps, values, steepest()).step == 15.0
    assert steepest_change(steps, [5.0, 4.9, 4.0, 1.0, 0.9], steepest("down")).interval == (20, 30)
    assert not steepest_change(steps, [1.0, 0.8, 0.8, 0.5, 0.1], steepest("up")).reached
    # uneven save intervals: slope per step, not per save
    assert steepest_change([0, 10, 100], [0.0, 0.5, 1.0], steepest()).interval == (0, 10)


def test_event_order_and_bad_rules():
    events = [
        find_event([0, 10], [0.0, 1.0], level(0.25), "b"),
        find_event([0, 10], [0.0, 1.0], level(0.75), "a"),
        find_event([0, 10], [0.0, 0.1], level(0.5), "never"),
    ]
    assert [e.curve for e in event_order(events)] == ["b", "a"]
    assert format_order(events) == "b at 2, a at 8"
    with pytest.raises(ValueError):
        Rule("level", "up")
    with pytest.raises(ValueError):
        level_crossing([0, 10], [0.0], level(0.5))
    with pytest.raises(ValueError):
        level_crossing([10, 0], [0.0, 1.0], level(0.5))


# -- a synthetic series with a known order of events ---------------------------------------------------------
@pytest.fixture(scope="module")
def series(tmp_path_factory):
    out = tmp_path_factory.mktemp("series")
    write_series(out, PREV_AT, INDUCTION_AT)
    return out


@pytest.fixture(scope="module")
def series_result(series):
    return run_dynamics(series, ("loss", "heads", "probes"), n=64)


def test_steps_are_read_in_numeric_order(series, series_result):
    assert [s for s, _ in step_files(series)] == list(range(10, 201, 10))
    assert series_result.steps == list(range(10, 201, 10))
    assert all(len(v) == 20 for v in series_result.curves.values())


def test_synthetic_series_events_match_the_schedule(series_result):
    events = {e.curve: e for e in series_result.events}
    prev, induction = events["L0H2.previous_token"], events["L1H1.induction"]
    assert abs(prev.step - PREV_AT) <= SAVE_EVERY and abs(induction.step - INDUCTION_AT) <= SAVE_EVERY
    order = [e.curve for e in event_order(series_result.events)]
    assert order.index("L0H2.previous_token") < order.index("L1H1.induction")
    assert abs(events["loss"].step - INDUCTION_AT) <= SAVE_EVERY  # the loss falls when induction forms
    assert abs(events["qk_prev_pos.L0H2"].step - PREV_AT) <= SAVE_EVERY  # the positional key memory of L0H2
    distractors = [f"L{l}H{h}.induction" for l in (0, 1) for h in range(3) if (l, h) != (1, 1)]
    assert not any(events[c].reached for c in distractors)


def test_swapped_schedule_swaps_the_order(tmp_path):
    write_series(tmp_path, prev_at=140, induction_at=60)
    events = {e.curve: e for e in run_dynamics(tmp_path, ("heads",), n=32).events}
    # the induction head's weights are in place early, but it cannot work before the previous-token head does
    assert abs(events["L0H2.previous_token"].step - 140) <= SAVE_EVERY
    assert events["L1H1.induction"].step >= events["L0H2.previous_token"].step - SAVE_EVERY


def test_every_quantity_on_one_step_leaves_no_hooks(series):
    *_, (_, ckpt) = iter_models(step_files(series))  # the last step, where the planted heads have their roles
    planted = FixedCircuit(("L0H2->L1H1.k", "L1H1->logits"), "the planted heads' edges")  # not decided here
    data = EvalData(ckpt.task, 32, 0, torch.device("cpu"), planted)
    for quantity in QUANTITIES.values():
        values = quantity.fn(ckpt.model, data)
        assert values and all(isinstance(v, CurvePoint) for v in values.values()), quantity.name
        assert_no_hooks(ckpt.model)


def test_set_levels_changes_the_rule(series_result):
    set_levels(series_result, {"L1H1.induction": 0.95})
    assert series_result.rules["L1H1.induction"] == level(0.95)
    set_levels(series_result, {"L1H1.induction": 0.5})
    with pytest.raises(Exception, match="matches no curve"):
        set_levels(series_result, {"nothing*": 0.5})


# -- agreement with the trainer's log ------------------------------------------------------------------------
def test_probes_from_checkpoints_equal_the_logged_probes(tmp_path):
    """The birth trainer logs its memory probes at step s
    before the update, i.e. on the weights of step_s.pt."""
    from mechmem.config import Preset, TrainConfig
    from mechmem.tasks.birth.models import simplified_config
    from mechmem.tasks.birth.task import BirthConfig
    from mechmem.training.run import train_preset

    preset = Preset(
        simplified_config(d_vocab=65, n_ctx=32, d_model=32, freeze_embeddings=True, freeze_unembedding=True),
        BirthConfig(seq_len=32, n_triggers=3, fixed_triggers=True),
        TrainConfig(
            steps=60,
            batch_size=16,
            lr=0.5,
            optimizer="sgd",
            momentum=0.9,
            eval_every=10,
            eval_samples=16,
            save_every=10,
        ),
        "tiny birth run",
    )
    train_preset("birth", preset, out_dir=tmp_path, progress=False)
    result = run_dynamics(tmp_path, ("probes",), n=8)
    steps, logged = metrics_curves(tmp_path)
    for name in ("wo2_recall", "wk2_recall", "wk1_recall"):
        at = {
            s: v for s, v in zip(steps, logged[name]) if v is not None
        }  # the last record holds only evaluations
        shared = [i for i, s in enumerate(result.steps) if s in at]
        assert len(shared) == len(result.steps) - 1
        assert [at[result.steps[i]] for i in shared] == pytest.approx(
            [result.curves[name][i] for i in shared]
        ), name
    rows = metrics_agreement(result, tmp_path)
    assert {r["metric"] for r in rows} >= {"wo2_recall", "wk2_recall", "wk1_recall"}
    assert all(r["within"] for r in rows)


# -- the script ----------------------------------------------------------------------------------------------
def test_script_writes_json_and_figures(series, tmp_path, capsys):
    code = run_script(
        load_script("dynamics").main,
        [str(series), "--out", str(tmp_path), "--n-samples", "32", "--level", "*.induction=0.6"],
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "order of events:" in printed and "L0H2.previous_token at" in printed
    data = json.loads((tmp_path / "dynamics.json").read_text())
    assert data["steps"] == list(range(10, 201, 10)) and set(data["quantities"]) == {
        "loss",
        "heads",
        "probes",
    }
    assert data["rules"]["L1H1.induction"]["level"] == 0.6
    assert {e["curve"] for e in data["events"]} >= {"L1H1.induction", "loss"}
    for q in ("loss", "heads", "probes"):
        assert (tmp_path / f"dynamics_{q}.png").stat().st_size > 0


@pytest.mark.parametrize("case", ["empty", "corrupt", "mixed", "quantity"])
def test_script_bad_input_is_one_line_exit_2(series, tmp_path, capsys, case):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    args = [str(run)]
    if case in ("corrupt", "mixed"):
        for name in ("step_10.pt", "step_20.pt"):
            (run / "checkpoints" / name).write_bytes((series / "checkpoints" / name).read_bytes())
    if case == "corrupt":
        data = (run / "checkpoints" / "step_20.pt").read_bytes()
        (run / "checkpoints" / "step_20.pt").write_bytes(data[: len(data) // 2])
    if case == "mixed":
        from mechmem.checkpoint import load_checkpoint, save_checkpoint

        other = load_checkpoint(series / "checkpoints" / "step_30.pt")
        save_checkpoint(
            run / "checkpoints" / "step_30.pt",
            model=other.model,
            model_config=other.model_config,
            task_name="repeats",
            task_config={"d_vocab": 12, "half": 10},
        )
    if case == "quantity":
        args += ["--quantities", "heads,nope"]
    assert run_script(load_script("dynamics").main, args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    assert not (run / "dynamics.json").exists()


# -- the report ----------------------------------------------------------------------------------------------
def test_report_section_shows_the_order_of_events(series):
    from mechmem.report.dynamics_section import dynamics_section

    planted = FixedCircuit(("L0H2->L1H1.k", "L1H1->logits"), "the planted heads' edges")
    s = dynamics_section(series, circuit=planted)
    assert s.skipped is None and set(s.figures) == {"loss", "heads", "probes", "circuit"}
    assert any("follow the planted heads' edges: 2 edges" in line for line in s.lines)
    order = [row[0] for row in s.tables[0].rows]
    assert order.index("L0H2.previous_token") < order.index("L1H1.induction")
    assert any("Order of events: " in line for line in s.lines)


def test_report_section_without_step_checkpoints_is_skipped(tmp_path):
    from mechmem.report.dynamics_section import dynamics_section

    s = dynamics_section(tmp_path)
    assert s.skipped and "no step checkpoints" in s.skipped and "--save-every" in s.skipped


def test_run_directory_of_a_step_checkpoint_and_of_the_final_one(series):
    from mechmem.analysis.dynamics import run_dir_of

    assert run_dir_of(series / "checkpoints" / "step_200.pt") == series
    assert run_dir_of(series / "ckpt.pt") == series


# Slow (a whole report, ~60 s): by default the test above finds the run directory,
# test_report_section_shows_the_order_of_events checks the section, and analyses/report.py runs in
# test_report_cli.py::test_demo_writes_index_and_reuses_checkpoints.
@pytest.mark.slow
def test_report_script_finds_the_run_directory(series, tmp_path):
    code = run_script(
        load_script("report").main,
        [str(series / "checkpoints" / "step_200.pt"), "--out", str(tmp_path), "--n-samples", "32"],
    )
    assert code == 0
    section = json.loads((tmp_path / "report.json").read_text())["sections"]["dynamics"]
    assert section["skipped"] is None and section["findings"]["steps"][-1] == 200


def test_two_files_for_one_step_are_refused(series, tmp_path):
    (tmp_path / "checkpoints").mkdir()
    for name in ("step_10.pt", "step_0000010.pt"):
        (tmp_path / "checkpoints" / name).write_bytes((series / "checkpoints" / "step_10.pt").read_bytes())
    with pytest.raises(Exception, match="more than one checkpoint for step"):
        step_files(tmp_path)


def test_flag_pairs_split_where_curve_names_allow():
    from mechmem.analysis.transitions import parse_levels, parse_pairs

    assert parse_pairs(["probe_recall_p=L0H0.role=recall"], "--match") == {
        "probe_recall_p": "L0H0.role=recall"
    }
    assert parse_levels(["L0H0.role=recall=0.4", "*.induction=0.5"]) == {
        "L0H0.role=recall": 0.4,
        "*.induction": 0.5,
    }
    for bad in (["x"], ["=1"], ["a=b"]):
        with pytest.raises(Exception, match="--level"):
            parse_levels(bad)


def test_a_model_without_attention_heads_gets_only_the_loss(tmp_path):
    from mechmem.training.run import train_preset

    train_preset("facts", "quick", out_dir=tmp_path, steps=20, save_every=10, progress=False)
    result = run_dynamics(tmp_path, ("loss", "heads", "probes"), n=8)
    assert result.steps == [10, 20] and result.groups["heads"] == [] and set(result.curves) == {"loss", "acc"}


def test_composition_curves_are_the_weights_scores_against_the_random_band(tmp_path):
    from mechmem.analysis.composition import composition_scores

    write_series(tmp_path, prev_at=20, induction_at=20, last=40)  # both planted heads blended in at step 20
    result = run_dynamics(tmp_path, ("composition",), n=8)
    *_, (_, ckpt) = iter_models(step_files(tmp_path))
    found = composition_scores(ckpt.model, generator=torch.Generator().manual_seed(4))  # EvalData's offset 4
    k = found.scores["K"][:, :, 1, 1].nan_to_num(float("-inf")).max()
    last, band = result.point("L1H1.K_composition"), result.point("random.K_composition")
    assert last.exact and last.value == pytest.approx(float(k)) and last.value > band.upper
    assert (band.value, band.lower, band.upper) == (
        found.baseline.mean,
        found.baseline.lower,
        found.baseline.upper,
    )
    assert "random.K_composition" not in result.rules
    assert 10 <= {e.curve: e for e in result.events}["L1H1.K_composition"].step <= 30  # steepest rise
