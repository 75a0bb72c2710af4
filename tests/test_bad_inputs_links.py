"""Bad inputs and faults, second round: links planted in output folders, an overwrite that cannot finish, runs
the disk or the clock cannot hold, malformed checkpoints and run logs, signals, models from elsewhere.

Each case runs a real script in-process (`run_script(main, argv)`; in a subprocess where a signal must arrive)
and checks what a user sees: the exit status, one `error:` line, and that nothing outside the output folder
changed (`script_cases.snapshot`).
"""

import errno
import json
import os
import signal
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch
from helpers import ROOT, wait_for
from script_cases import FAST, SCRIPTS, classify, load_main, run_case, snapshot

from mechmem.analysis.planted import planted_induction_model
from mechmem.checkpoint import load_checkpoint, payload_digest, save_model
from mechmem.cli import run_script
from mechmem.errors import CheckpointError, MechmemError

pytestmark = pytest.mark.usefixtures("as_a_user_runs")  # see conftest.py

TRAIN = ["permutation", "--preset", "task1-quick", "--steps", "4", "--no-progress"]
"""A run of a few seconds."""


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return save_model(planted_induction_model(), tmp_path_factory.mktemp("good") / "ckpt.pt")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished four-step training run (ckpt.pt with trainer state, metrics.jsonl)."""
    out = tmp_path_factory.mktemp("run") / "R"
    assert run_script(load_main("train"), [*TRAIN, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def stepped_run(tmp_path_factory):
    """The same run with step checkpoints (what `dynamics` reads beside metrics.jsonl)."""
    out = tmp_path_factory.mktemp("run") / "R"
    assert run_script(load_main("train"), [*TRAIN, "--save-every", "2", "--out", str(out)]) == 0
    return out


def copy_run(run: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for path in run.rglob("*"):
        target = dst / path.relative_to(run)
        if path.is_dir():
            target.mkdir()
        else:
            target.write_bytes(path.read_bytes())
    return dst


def one_line(status, err, expected: int = 2) -> None:
    lines = err.strip().splitlines()
    assert status == expected and len(lines) == 1 and lines[0].startswith("error: "), (status, err)


def resave(source: Path, path: Path, edit) -> Path:
    """`source` with `edit(payload)` applied and the digest computed again (where the edit can be hashed)."""
    payload = torch.load(source, weights_only=True)
    edit(payload)
    try:
        payload["digest"] = payload_digest(payload)
    except (RuntimeError, TypeError, NotImplementedError):
        payload["digest"] = "0" * 64
    torch.save(payload, path)
    return path


def argv_for(script: str, source: Path, out: Path) -> list[str]:
    if script == "train":
        return [*TRAIN, "--out", str(out)]
    return [str(source), "--out", str(out), *FAST.get(script, [])]


# -- nothing outside the output folder -----------------------------------------------------------------------
@pytest.mark.parametrize("script", [*SCRIPTS, "train"])
def test_a_lock_planted_as_a_link_is_refused_not_followed(script, good, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("a user's file\n")
    out = tmp_path / "O"
    out.mkdir()
    (out / ".lock").symlink_to(victim)
    status, err, _, _ = run_case(script, argv_for(script, good, out), capsys, out)
    one_line(status, err)
    assert "symbolic link" in err and victim.read_text() == "a user's file\n"


def test_a_dangling_metrics_link_is_not_written_through(tmp_path, capsys):
    out, target = tmp_path / "R", tmp_path / "elsewhere.jsonl"
    out.mkdir()
    (out / "metrics.jsonl").symlink_to(target)
    status, err, _, _ = run_case("train", [*TRAIN, "--out", str(out)], capsys, out)
    one_line(status, err)
    assert not target.exists()
    status, err, _, _ = run_case("train", [*TRAIN, "--out", str(out), "--overwrite"], capsys, out)
    assert status == 0 and not target.exists() and not (out / "metrics.jsonl").is_symlink(), err


@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "fresh"])
def test_a_linked_checkpoints_folder_is_refused_and_left_alone(overwrite, tmp_path, capsys):
    other = tmp_path / "users"
    other.mkdir()
    (other / "step_0000010.pt").write_bytes(b"a user's file")
    out = tmp_path / "R"
    out.mkdir()
    (out / "checkpoints").symlink_to(other, target_is_directory=True)
    argv = [*TRAIN, "--save-every", "2", "--out", str(out)] + (["--overwrite"] if overwrite else [])
    before = snapshot(other)
    status, err, _, _ = run_case("train", argv, capsys, out)
    one_line(status, err)
    assert "symbolic link" in err and snapshot(other) == before


# -- half-written -------------------------------------------------------------------------------------------
def test_an_overwrite_that_cannot_remove_a_file_keeps_the_old_run_whole(
    run_dir, tmp_path, capsys, monkeypatch
):
    out = copy_run(run_dir, tmp_path / "R")
    real_unlink, real_replace = os.unlink, os.replace

    def immutable(path):  # what `chattr +i metrics.jsonl` does to unlink and rename
        if Path(path).name == "metrics.jsonl":
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "unlink", lambda p, *a, **k: immutable(p) or real_unlink(p, *a, **k))
    monkeypatch.setattr(os, "replace", lambda s, d, *a, **k: immutable(s) or real_replace(s, d, *a, **k))
    before = snapshot(out)
    status, err, _, after = run_case("train", [*TRAIN, "--out", str(out), "--overwrite"], capsys, out)
    one_line(status, err)
    assert after == before


# -- hangs: runs the disk or the clock cannot hold -----------------------------------------------------------
@pytest.mark.parametrize("steps", [str(2**70), str(10**10)])
def test_a_run_longer_than_the_clock_allows_is_refused_before_it_starts(steps, tmp_path, capsys):
    out = tmp_path / "R"
    argv = [
        "permutation",
        "--preset",
        "task1-quick",
        "--steps",
        steps,
        "--save-every",
        "1",
        "--out",
        str(out),
    ]
    status, err, _, _ = run_case("train", argv, capsys, out, limit_s=120)
    one_line(status, err)
    assert not out.exists()


def test_step_checkpoints_beyond_the_free_disk_are_refused_and_the_plan_is_said(
    tmp_path, capsys, monkeypatch
):
    import shutil

    Usage = namedtuple("Usage", "total used free")
    out = tmp_path / "R"
    status, err, _, _ = run_case("train", [*TRAIN[:-1], "--save-every", "2", "--out", str(out)], capsys, out)
    assert status == 0 and "will write 2 step checkpoints" in err
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**6, 10**6, 10**5))
    status, err, _, _ = run_case(
        "train", [*TRAIN, "--save-every", "1", "--out", str(tmp_path / "S")], capsys, out
    )
    one_line(status, err)
    assert "MB free" in err and not (tmp_path / "S").exists()


# -- tracebacks and garbage: malformed checkpoints -----------------------------------------------------------
def _set_config(key, value):
    def edit(payload):
        payload["model_config"][key] = value

    return edit


def _int_key(payload):
    payload["state_dict"][7] = torch.zeros(3)


def _sparse(payload):
    payload["state_dict"]["embed.W_E"] = payload["state_dict"]["embed.W_E"].to_sparse()


def _dtype(dtype):
    def edit(payload):
        payload["state_dict"]["embed.W_E"] = payload["state_dict"]["embed.W_E"].to(dtype)

    return edit


BAD = {
    "d_head_0": (_set_config("d_head", 0), "bad model config"),
    "integer_key": (_int_key, "not a weight name"),
    "sparse_weight": (_sparse, "not a dense tensor"),
    "int64_weight": (_dtype(torch.int64), "weight embed.W_E is int64, not floating point"),
    "bool_weight": (_dtype(torch.bool), "weight embed.W_E is bool, not floating point"),
    "complex_weight": (_dtype(torch.complex64), "weight embed.W_E is complex64, not floating point"),
    "d_model_200000": (_set_config("d_model", 200_000), "declares d_model 200000, more than the"),
    "n_ctx_1e9": (_set_config("n_ctx", 10**9), "config expects"),
    "d_vocab_out_1e9": (_set_config("d_vocab_out", 10**9), "declares d_vocab_out 1000000000, more than"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("script", ["ablate_heads", "detect_heads", "logit_lens"])
def test_malformed_weights_and_declared_sizes_are_one_line_before_any_allocation(
    script, case, good, tmp_path, capsys
):
    bad = resave(good, tmp_path / f"{case}.pt", BAD[case][0])
    out = tmp_path / "out"
    status, err, before, after = run_case(script, [str(bad), "--out", str(out)], capsys, out, limit_s=60)
    assert classify(status, err, before, after) == "one-line" and status == 2, err
    assert BAD[case][1] in err and not out.exists()


def test_a_rotary_model_with_a_huge_context_is_refused_by_its_buffers(tmp_path):
    from mechmem.models.backend import hooked_transformer_config, raw_hooked_transformer

    torch.manual_seed(0)
    cfg = hooked_transformer_config(
        n_layers=1, d_model=16, n_heads=2, d_head=8, n_ctx=10, d_vocab=14, attn_only=True,
        positional_embedding_type="rotary", rotary_dim=8,
    )  # fmt: skip
    path = save_model(raw_hooked_transformer(cfg).eval(), tmp_path / "rot.pt")
    bad = resave(path, tmp_path / "bad.pt", _set_config("n_ctx", 10**6))
    with pytest.raises(CheckpointError, match="bytes of buffers"):
        load_checkpoint(bad)


def test_a_json_lines_file_is_not_called_pickled_objects(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n')
    with pytest.raises(CheckpointError, match="not a file torch.save writes") as info:
        load_checkpoint(path)
    assert "pickled" not in str(info.value)


# -- tracebacks: run logs and trainer state ------------------------------------------------------------------
BAD_LINES = {
    "nested_100k": "[" * 100_000 + "]" * 100_000,
    "no_step": '{"loss": 1.0}',
    "list": "[1, 2]",
    "step_text": '{"step": "abc"}',
    "step_null": '{"step": null}',
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_resume_after_a_bad_metrics_line_is_one_line(case, run_dir, tmp_path, capsys):
    out = copy_run(run_dir, tmp_path / "R")
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write(BAD_LINES[case] + "\n")
    before = snapshot(out)
    status, err, _, after = run_case("train", [*TRAIN, "--out", str(out), "--resume"], capsys, out)
    one_line(status, err)
    assert "metrics.jsonl: line" in err and after == before


@pytest.mark.parametrize("case", ["nested_100k", "no_step"])
def test_dynamics_on_a_bad_metrics_line_is_one_line(case, stepped_run, tmp_path, capsys):
    out = copy_run(stepped_run, tmp_path / "R")
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write(BAD_LINES[case] + "\n")
    status, err, _, _ = run_case("dynamics", [str(out), "--quantities", "loss"], capsys, out)
    one_line(status, err)
    assert "metrics.jsonl: line" in err


@pytest.mark.parametrize("step", ["abc", 10**12, -50, True])
def test_resume_from_a_checkpoint_with_an_impossible_step_is_refused(step, run_dir, tmp_path, capsys):
    out = copy_run(run_dir, tmp_path / "R")

    def edit(payload):
        payload["extra"]["trainer"]["step"] = step

    resave(out / "ckpt.pt", out / "ckpt.pt", edit)
    before = snapshot(out)
    status, err, _, after = run_case("train", [*TRAIN, "--out", str(out), "--resume"], capsys, out)
    one_line(status, err)
    assert "--resume" in err and after == before


# -- tracebacks and garbage: flags ---------------------------------------------------------------------------
def test_a_memory_budget_beyond_any_machine_is_a_usage_error(good, tmp_path, capsys):
    status, err, _, _ = run_case("patch", [str(good), "--memory-mb", "1e308"], capsys, tmp_path)
    one_line(status, err)


def test_demo_into_a_file_is_one_line_before_any_job(tmp_path, capsys):
    file = tmp_path / "FILE"
    file.write_text("x")
    argv = ["--out", str(file), "--reports", str(tmp_path / "reports"), "--steps", "1"]
    status, err, _, _ = run_case("demo", argv, capsys, tmp_path)
    one_line(status, err)
    assert "not a directory" in err and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("script", ["ablate_heads", "train"])
def test_an_empty_out_is_refused_not_taken_for_the_default(script, good, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [*TRAIN, "--out", ""] if script == "train" else [str(good), "--out", ""]
    status, err, _, _ = run_case(script, argv, capsys, tmp_path)
    one_line(status, err)
    assert "--out is empty" in err


def test_a_task_module_that_exits_is_an_error_not_a_success(good, tmp_path, capsys):
    module = tmp_path / "exits.py"
    module.write_text("import sys\nsys.exit(0)\n")
    argv = [str(good), "--task-module", str(module), "--out", str(tmp_path / "O")]
    status, err, _, _ = run_case("ablate_heads", argv, capsys, tmp_path / "O")
    one_line(status, err)
    assert "sys.exit(0)" in err and not (tmp_path / "O").exists()


def test_a_thread_count_beyond_the_machine_is_a_usage_error(tmp_path, capsys):
    status, err, _, _ = run_case("train", [*TRAIN, "--threads", "1000000"], capsys, tmp_path)
    one_line(status, err)
    assert "--threads" in err


# -- signals -------------------------------------------------------------------------------------------------
def _lock_holder(out: Path) -> str | None:
    """The pid written in `out`'s lock file, or None while there is none."""
    try:
        return (out / ".lock").read_text().strip()
    except FileNotFoundError:
        return None


@pytest.mark.subprocess
@pytest.mark.parametrize("script", ["train", pytest.param("report", marks=pytest.mark.slow)])
def test_sigterm_is_an_interrupt_one_line_and_no_lock_left(script, good, tmp_path):
    out = tmp_path / "new"
    argv = (
        ["permutation", "--preset", "task1-quick", "--steps", "1000000", "--no-progress"]
        if script == "train"
        else [str(good), "--n-samples", "2048"]
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "analyses" / f"{script}.py"), *argv, "--out", str(out)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    # The lock file carries the child's pid once the lock is held, inside the block that removes it again.
    wait_for(lambda: _lock_holder(out) == str(proc.pid), proc, timeout_s=120)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "error: interrupted", err
    assert "Traceback" not in err and not (out / ".lock").exists()
    assert not out.exists() or {p.name for p in out.iterdir()} <= {"resume.pt", "metrics.jsonl"}


# -- models from elsewhere ---------------------------------------------------------------------------------
def test_metrics_records_are_validated_by_the_one_reader(tmp_path):
    from mechmem.training.rundir import read_metrics

    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    assert read_metrics(tmp_path) == [{"step": 0, "loss": 1.0}]
    (tmp_path / "metrics.jsonl").write_text('{"step": -1}\n')
    with pytest.raises(MechmemError, match="line 1 has no integer step"):
        read_metrics(tmp_path)


def test_a_hugging_face_folder_without_a_tokenizer_loads(tmp_path, capsys):
    """A tiny model needs no tokenizer (mechmem feeds token ids): a folder of config and weights is enough."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # transformers initialises from the global RNG; tests only
    config = LlamaConfig(
        vocab_size=40, max_position_embeddings=24, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
    )  # fmt: skip
    folder = tmp_path / "tiny-llama"
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    out = tmp_path / "out"
    argv = ["--hf", str(folder), "--out", str(out), "--n-samples", "8"]
    status, err, _, _ = run_case("detect_heads", argv, capsys, out)
    assert status == 0 and "error" not in err, err
    assert (out / "detect_heads.json").exists()
