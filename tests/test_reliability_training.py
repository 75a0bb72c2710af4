"""Training: --resume continues only the identical run, fresh runs never mix with old files, one
writer per directory, and no checkpoint is ever written from non-finite weights (the last step included)."""

import shutil

import pytest
import torch

from mechmem.checkpoint import load_checkpoint, read_payload
from mechmem.errors import MechmemError, TrainingDiverged
from mechmem.models.weights import canonical_state_dict
from mechmem.tasks import build_task
from mechmem.training.run import train_preset
from mechmem.training.rundir import run_lock

SMALL = {"steps": 20, "batch_size": 16, "eval_every": 10, "eval_samples": 32}


def _run(out, **overrides):
    return train_preset("permutation", "task1-quick", out_dir=out, progress=False, **{**SMALL, **overrides})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "seed5"
    _run(out, seed=5)
    return out


def test_resume_of_a_copied_run_with_other_settings_names_the_fields(finished, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    with pytest.raises(MechmemError, match=r"different run \(train\.seed 5 != 9, train\.steps 20 != 15\)"):
        _run(copy, seed=9, steps=15, resume=True)
    assert read_payload(copy / "ckpt.pt")["train_config"]["seed"] == 5  # untouched


def test_resume_of_the_identical_finished_run_keeps_its_weights(finished, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    before = read_payload(finished / "ckpt.pt")["state_dict"]
    after = canonical_state_dict(_run(copy, seed=5, resume=True).model)
    assert all(torch.equal(before[k], after[k].cpu()) for k in before)


def test_fresh_run_into_an_old_directory_is_refused_then_overwrite_clears_it(finished, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    (copy / "checkpoints").mkdir()
    shutil.copy(copy / "ckpt.pt", copy / "checkpoints" / "step_0009999.pt")  # a stale later step
    with pytest.raises(MechmemError, match="already holds a run .*--resume.*--overwrite"):
        _run(copy, seed=9)
    (copy / "train.log").write_text("a launcher's log")
    _run(copy, seed=9, steps=10, overwrite=True)
    assert not (copy / "checkpoints").exists() and (copy / "train.log").exists()
    assert read_payload(copy / "ckpt.pt")["train_config"]["seed"] == 9
    assert _run(copy, seed=9, steps=10, resume=True).summary  # and it resumes as itself, not the stale step


def test_a_second_writer_is_stopped_by_the_lock(tmp_path):
    out = tmp_path / "busy"
    with run_lock(out), pytest.raises(MechmemError, match=r"being written by another process \(pid \d+\)"):
        _run(out, seed=1)
    assert not (out / "metrics.jsonl").exists()
    _run(out, seed=1)  # released


def _poison_from(monkeypatch, first_bad_step: int) -> None:
    """From step `first_bad_step` on, the loss stays finite but
    its gradient is NaN, so the update ruins the weights."""
    task_cls = type(build_task("permutation"))
    original_batch, original_loss = task_cls.train_batch, task_cls.loss
    calls = {"n": 0}

    def counted(self, n, *, generator):
        calls["n"] += 1
        return original_batch(self, n, generator=generator)

    def loss(self, logits, batch):
        value = original_loss(self, logits, batch)
        if calls["n"] - 1 >= first_bad_step and logits.requires_grad:
            value = value + torch.sqrt(logits.sum() * 0.0)  # 0 in value, NaN in gradient
        return value

    monkeypatch.setattr(task_cls, "train_batch", counted)
    monkeypatch.setattr(task_cls, "loss", loss)


def test_blown_up_weights_are_never_saved_as_a_step_checkpoint(tmp_path, monkeypatch):
    _poison_from(monkeypatch, 14)  # step 14's update makes the weights NaN; a step checkpoint is due at 15
    with pytest.raises(TrainingDiverged, match="at step 14"):
        _run(tmp_path / "r", seed=1, save_every=5)
    saved = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir())
    assert saved == ["step_0000005.pt", "step_0000010.pt"] and not (tmp_path / "r" / "ckpt.pt").exists()
    for name in saved:
        state = read_payload(tmp_path / "r" / "checkpoints" / name)["state_dict"]
        assert all(torch.isfinite(t).all() for k, t in state.items() if not k.endswith("IGNORE"))  # -inf mask


def test_blow_up_on_the_last_step_is_an_error_and_the_last_good_checkpoint_stays(tmp_path, monkeypatch):
    _poison_from(monkeypatch, SMALL["steps"] - 1)
    with pytest.raises(TrainingDiverged, match=f"weights became non-finite at step {SMALL['steps'] - 1}"):
        _run(tmp_path / "r", seed=1)
    assert not (tmp_path / "r" / "ckpt.pt").exists()
    good = read_payload(tmp_path / "r" / "resume.pt")
    assert good["extra"]["trainer"]["step"] == 10
    monkeypatch.undo()
    result = _run(tmp_path / "r", seed=1, resume=True)
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    assert load_checkpoint(tmp_path / "r" / "ckpt.pt").train["seed"] == 1
