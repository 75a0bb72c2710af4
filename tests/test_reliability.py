"""The cases themselves: every bad input to a
script ends in one `error:` line and exit 2, before any work.

Also: strict JSON, a digest over every field, config field types,
a task that does not fit its model, user tasks.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ROOT, load_script
from script_cases import USER_TASK

from mechmem.analysis.planted import planted_induction_model
from mechmem.checkpoint import load_checkpoint, payload_digest, save_checkpoint, save_model
from mechmem.cli import dumps, run_script, write_json
from mechmem.errors import CheckpointError, MechmemError

SCRIPTS = ("ablate_heads", "circuit", "detect_heads", "logit_lens", "patch", "probe_memory", "report")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_model(planted_induction_model(), tmp_path_factory.mktemp("rel") / "ckpt.pt")


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


CASES = {
    "out_is_a_file": (["--out", "{file}"], "exists and is not a directory"),
    "out_not_writable": (["--out", "/proc/mechmem/out"], "not writable"),
    "seed_too_large": (["--seed", str(2**70)], "outside [0, 2**63)"),
    "seed_negative": (["--seed", "-1"], "outside [0, 2**63)"),
    "seed_not_int": (["--seed", "abc"], "'abc' is not an integer"),
    "unknown_flag": (["--bogus"], "unrecognized arguments: --bogus"),
    "n_samples_huge": (["--n-samples", "1000000"], "the bound is"),  # the memory estimate's
    "n_samples_beyond_max": (["--n-samples", "1000000000"], "is more than 1048576"),  # the stated maximum's
    "n_samples_zero": (["--n-samples", "0"], "at least"),
    "task_module_missing": (["--task-module", "/no/such/tasks.py"], "no such file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_refuses_bad_flags_in_one_line_before_any_work(ckpt, tmp_path, capsys, script, case):
    argv, expected = CASES[case]
    (tmp_path / "file").write_text("x")
    out = tmp_path / "never"
    argv = [a.format(file=tmp_path / "file") for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(out)]
    assert run_script(load_script(script).main, [str(ckpt), *argv]) == 2
    assert expected in one_error_line(capsys)
    assert not out.exists()  # nothing was created: the checks ran before any work


def test_report_refuses_too_few_samples(ckpt, tmp_path, capsys):
    assert (
        run_script(load_script("report").main, [str(ckpt), "--n-samples", "1", "--out", str(tmp_path / "r")])
        == 2
    )
    assert "--n-samples must be at least 32" in one_error_line(capsys)


def test_ablate_heads_bad_choice_is_one_line(ckpt, capsys):
    assert run_script(load_script("ablate_heads").main, [str(ckpt), "--methods", "bogus"]) == 2
    assert "invalid choice" in one_error_line(capsys)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["permutation"], "TASK and --preset are required"),
        (["permutation", "--preset", "task1-quick", "--seed", "abc"], "'abc' is not an integer"),
        (["permutation", "--preset", "task1-quick", "--steps", "-1"], "must be at least 0"),
        (["permutation", "--preset", "task1-quick", "--threads", "0"], "must be at least 1"),
        (["permutation", "--preset", "task1-quick", "--resume", "--overwrite"], "exclude each other"),
        (["permutation", "--preset", "task1-quick", "--out", "{file}"], "exists and is not a directory"),
    ],
)
def test_train_script_bad_flags_are_one_line(tmp_path, capsys, argv, expected):
    (tmp_path / "file").write_text("x")
    argv = [a.format(file=tmp_path / "file") for a in argv]
    assert run_script(load_script("train").main, argv) == 2
    assert expected in one_error_line(capsys)


def test_help_still_prints_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        load_script("detect_heads").main(["--help"])
    assert exc.value.code == 0 and "--task-module" in capsys.readouterr().out


# -- checkpoints ---------------------------------------------------------------------------------------------
def _resave(src: Path, dst: Path, edit, *, redigest: bool) -> Path:
    payload = torch.load(src, weights_only=True)
    edit(payload)
    if redigest:
        payload["digest"] = payload_digest(payload)
    torch.save(payload, dst)
    return dst


def test_config_field_of_the_wrong_type_is_a_clear_error(ckpt, tmp_path, capsys):
    bad = _resave(
        ckpt, tmp_path / "abc.pt", lambda p: p["model_config"].update(n_layers="abc"), redigest=True
    )
    with pytest.raises(CheckpointError, match="field n_layers must be int, got 'abc'"):
        load_checkpoint(bad)
    assert run_script(load_script("detect_heads").main, [str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "n_layers must be int" in one_error_line(capsys)


@pytest.mark.parametrize(
    "edit",
    [
        lambda p: p["metrics"].update(eval_acc=1.0),
        lambda p: p.update(extra={"trainer": {"step": 7}}),
        lambda p: p.update(mechmem_version="9.9"),
    ],
    ids=["metrics", "trainer_state", "version"],
)
def test_digest_covers_every_field(ckpt, tmp_path, edit):
    bad = _resave(ckpt, tmp_path / "edit.pt", edit, redigest=False)
    with pytest.raises(CheckpointError, match="digest mismatch"):
        load_checkpoint(bad)


def test_version_1_files_still_load(ckpt, tmp_path):
    def to_v1(p):
        p["format_version"] = 1

    old = _resave(ckpt, tmp_path / "v1.pt", to_v1, redigest=True)
    assert load_checkpoint(old).task_name == "repeats"


def test_a_file_that_is_not_a_checkpoint_gets_a_clear_message(tmp_path):
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2), path)  # a whole pickled module, as people often save
    with pytest.raises(CheckpointError, match="not a mechmem checkpoint .it holds pickled Python objects"):
        load_checkpoint(path)


def test_task_that_does_not_fit_the_model_is_refused_at_load(ckpt, tmp_path, capsys):
    bad = _resave(ckpt, tmp_path / "big.pt", lambda p: p["task_config"].update(d_vocab=500), redigest=True)
    with pytest.raises(CheckpointError, match="does not fit the model: vocabulary 500 > model's 12"):
        load_checkpoint(bad)


def test_default_task_config_that_does_not_fit_is_refused_at_save(tmp_path):
    from helpers import build_model, build_transformer_cfg

    model, cfg = build_model(n_ctx=5), build_transformer_cfg(n_ctx=5)
    with pytest.raises(MechmemError, match="context 9 > model's 5"):
        save_checkpoint(
            tmp_path / "c.pt", model=model, model_config=cfg, task_name="permutation", task_config=None
        )
    assert not (tmp_path / "c.pt").exists()


def test_strict_json_writes_null_for_nan_and_inf(tmp_path):
    path = write_json(tmp_path / "x.json", {"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf}})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}}


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"non-standard JSON constant {name} written")


@pytest.mark.parametrize(
    "value",
    [math.nan, -math.inf, np.float64("nan"), (1.0, math.inf), {"deep": [{"x": math.nan}]}],
    ids=["nan", "-inf", "numpy_nan", "tuple", "nested"],
)
def test_json_writer_turns_every_non_finite_float_into_null(value, tmp_path):
    """The one JSON writer (`dumps`, and `write_json` on top of it) never lets NaN or Infinity through,
    however deeply a float sits; a strict parser reads what it wrote."""
    text = dumps({"value": value, "kept": 0.5})
    parsed = json.loads(text, parse_constant=_refuse_constant)
    assert parsed["kept"] == 0.5 and "NaN" not in text and "Infinity" not in text
    again = json.loads(
        write_json(tmp_path / "x.json", {"value": value}).read_text(), parse_constant=_refuse_constant
    )
    assert again["value"] == parsed["value"]


@pytest.mark.subprocess
def test_scripts_load_user_tasks_with_task_module(tmp_path):
    from mechmem.tasks import load_task_module

    module = tmp_path / "my_tasks.py"
    module.write_text(USER_TASK)
    load_task_module(module)
    path = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=planted_induction_model(),
        model_config=load_checkpoint_config(),
        task_name="rel_user_count",
        task_config=None,
    )
    script = ROOT / "analyses" / "detect_heads.py"
    without = subprocess.run(  # a fresh process: this one has the task registered
        [sys.executable, str(script), str(path), "--n-samples", "4"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert without.returncode == 2 and "unknown task 'rel_user_count'" in without.stderr
    assert "--task-module" in without.stderr and len(without.stderr.strip().splitlines()) == 1
    argv = [str(path), "--n-samples", "4", "--task-module", str(module), "--out", str(tmp_path / "out")]
    assert run_script(load_script("detect_heads").main, argv) == 0


def load_checkpoint_config():
    from mechmem.analysis.planted import planted_config

    return planted_config()


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1", "abc"])
def test_memory_budget_flags_refuse_nan_and_non_positive_values(value, ckpt, tmp_path, capsys):
    argv = [str(ckpt), "--memory-mb", value, "--out", str(tmp_path / "o")]
    assert run_script(load_script("patch").main, argv) == 2  # the script itself, not a stand-in parser
    assert one_error_line(capsys).startswith("error: argument --memory-mb: ")
    assert not (tmp_path / "o").exists()
