"""analyses/report.py and analyses/demo.py: outputs, one-line errors, index page."""

import json

import pytest
from helpers import load_script

from mechmem.cli import run_script


@pytest.fixture(scope="module")
def planted_ckpt(tmp_path_factory):
    from mechmem.checkpoint import save_checkpoint
    from mechmem.tasks.permutation import PermutationConfig
    from mechmem_papers.permutation import planted

    path = tmp_path_factory.mktemp("planted") / "ckpt.pt"
    save_checkpoint(
        path,
        model=planted.planted_permutation_model(),
        model_config=planted.planted_permutation_config(),
        task_name="permutation",
        task_config=PermutationConfig(repeat_ratio=0.3),
    )
    return path


# Slow (a whole report, ~40 s): by default analyses/report.py runs on the same planted model in
# test_demo_writes_index_and_reuses_checkpoints, and test_report.py checks the roles and the three files.
@pytest.mark.slow
def test_report_script_writes_three_files(planted_ckpt, tmp_path, capsys):
    out = tmp_path / "rep"
    assert (
        run_script(load_script("report").main, [str(planted_ckpt), "--out", str(out), "--n-samples", "64"])
        == 0
    )
    printed = capsys.readouterr().out
    assert "L1H0 elimination" in printed and "L1H1 recall" in printed
    assert {p.name for p in out.iterdir()} >= {"report.md", "report.html", "report.json", "figures"}
    data = json.loads((out / "report.json").read_text())
    roles = {(h["layer"], h["head"]): h["role"] for h in data["sections"]["circuit"]["findings"]["heads"]}
    assert roles == {(0, 0): "previous-token", (0, 1): "none", (1, 0): "elimination", (1, 1): "recall"}


@pytest.mark.parametrize(
    "argv", [["/no/such/ckpt.pt"], ["{ckpt}", "--n-samples", "0"], ["{ckpt}", "--device", "tpu"]]
)
def test_report_script_bad_input_is_one_line(argv, planted_ckpt, tmp_path, capsys):
    argv = [a.format(ckpt=planted_ckpt) for a in argv] + ["--out", str(tmp_path)]
    assert run_script(load_script("report").main, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_demo_writes_index_and_reuses_checkpoints(tmp_path, monkeypatch):
    """The demo with its training stubbed by an existing checkpoint: reports, index links, skip-if-trained."""
    from mechmem.checkpoint import save_checkpoint
    from mechmem.report import demo
    from mechmem.tasks.permutation import PermutationConfig, PermutationTask
    from mechmem.training import Preset, TrainConfig
    from mechmem_papers.permutation import planted

    # A "planted" preset whose finished run is the planted model: reused, since it is this very run.
    preset = Preset(planted.planted_permutation_config(), PermutationConfig(repeat_ratio=0.3), TrainConfig())
    monkeypatch.setitem(PermutationTask.presets, "planted", preset)
    runs, reports = tmp_path / "runs", tmp_path / "reports"
    save_checkpoint(
        runs / "planted" / "ckpt.pt",
        model=planted.planted_permutation_model(),
        model_config=preset.model,
        task_name="permutation",
        task_config=preset.task,
        train_config=preset.train,
    )
    model = demo.DemoModel("planted", "permutation", "planted")
    calls = []
    real = demo.run_in_log
    monkeypatch.setattr(demo, "run_in_log", lambda fn, log: (calls.append(log.name), real(fn, log))[1])
    rows = demo.run_demo(runs, reports, models=[model], jobs=1, n_samples=32)
    assert calls == ["report.log"]  # the run directory holds this very run, so nothing was trained
    assert rows[0]["report_rc"] == 0 and "recall" in rows[0]["circuit"]
    index = (reports / "index.html").read_text()
    assert 'href="planted/report.html"' in index and "probe p(recall)" in index
    assert (reports / "planted" / "report.html").exists()


def test_demo_rejects_unknown_models(capsys):
    assert run_script(load_script("demo").main, ["--models", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown demo model")


def test_demo_skips_a_model_whose_preset_is_not_installed():
    from mechmem.report.demo import DEMO_MODELS, DemoModel, available

    ghost = DemoModel("ghost", "permutation", "no-such-preset")
    assert available([*DEMO_MODELS, ghost]) == list(DEMO_MODELS)


@pytest.mark.slow
def test_demo_end_to_end_smoke(tmp_path, capsys):
    """Train two demo models for a few steps in forked jobs, report on them, write the index."""
    argv = ["--out", str(tmp_path / "runs"), "--reports", str(tmp_path / "reports"), "--steps", "20"]
    argv += ["--n-samples", "32", "--models", "permutation-task1", "permutation-task2"]
    assert run_script(load_script("demo").main, argv) == 0
    index = (tmp_path / "reports" / "index.html").read_text()
    assert 'href="permutation-task1/report.html"' in index and 'href="permutation-task2/report.html"' in index
    assert "final-step acc" in capsys.readouterr().out
