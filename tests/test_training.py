"""The trainer: determinism, exact resume, the NaN guard, frozen parameters, schedules."""

import json

import pytest
import torch

from mechmem.errors import MechmemError, TrainingDiverged
from mechmem.models import build_model
from mechmem.models.weights import canonical_state_dict
from mechmem.tasks import build_task, get_preset
from mechmem.training import TrainConfig, lr_at, train
from mechmem.training.run import train_preset

SMALL = {"steps": 40, "batch_size": 32, "eval_every": 10, "eval_samples": 64}


def _run(tmp_path=None, **overrides):
    kw = {**SMALL, **overrides}
    return train_preset("permutation", "task2-quick", out_dir=tmp_path, progress=False, **kw)


def _state(model):
    return {k: v.clone() for k, v in canonical_state_dict(model).items()}


# Slow (three trainings, ~40 s): by default test_interrupted_then_resumed_equals_uninterrupted needs two
# same-seed runs to agree bit for bit.
@pytest.mark.slow
def test_same_seed_gives_identical_weights_and_other_seed_differs():
    a, b, c = _run(seed=1), _run(seed=1), _run(seed=2)
    for name, tensor in _state(a.model).items():
        assert torch.equal(tensor, _state(b.model)[name]), name
    assert not torch.equal(a.model.embed.W_E, c.model.embed.W_E)


class _Interrupt(Exception):
    pass


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path, monkeypatch):
    full = _run(tmp_path / "full", save_every=15)
    task_cls = type(build_task("permutation"))
    original = task_cls.train_batch
    calls = {"n": 0}

    def flaky(self, n, *, generator):
        calls["n"] += 1
        if calls["n"] == 38:
            raise _Interrupt
        return original(self, n, generator=generator)

    monkeypatch.setattr(task_cls, "train_batch", flaky)
    with pytest.raises(_Interrupt):
        _run(tmp_path / "cut", save_every=15)
    monkeypatch.setattr(task_cls, "train_batch", original)
    resumed = _run(tmp_path / "cut", save_every=15, resume=True)
    for name, tensor in _state(full.model).items():
        assert torch.equal(tensor, _state(resumed.model)[name]), name
    lines = lambda d: [json.loads(s) for s in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
    assert lines("full") == lines("cut")
    assert not (tmp_path / "cut" / "resume.pt").exists()


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(MechmemError, match="no checkpoint"):
        _run(tmp_path, resume=True)


def test_nan_loss_stops_with_a_clear_message(monkeypatch):
    task_cls = type(build_task("permutation"))
    monkeypatch.setattr(task_cls, "loss", lambda self, logits, batch: logits.sum() * float("nan"))
    with pytest.raises(TrainingDiverged, match="loss became nan at step 0"):
        _run()


def test_frozen_parameters_never_change_and_frozen_until_releases():
    spec = get_preset("permutation", "task1-quick")
    model_cfg = spec.model.replace(frozen=("embed.W_E",))
    model = build_model(model_cfg, generator=torch.Generator().manual_seed(0))
    before = _state(model)
    cfg = TrainConfig(**SMALL, frozen_until=(("blocks.0.attn.W_K", 20),))
    task = build_task("permutation", spec.task)
    seen = {}
    original = task.train_batch

    def spy(n, *, generator):
        step = len(seen)
        seen[step] = model.blocks[0].attn.W_K.detach().clone()
        return original(n, generator=generator)

    task.train_batch = spy
    train(model, task, cfg, model_config=model_cfg, progress=False)
    after = _state(model)
    assert torch.equal(before["embed.W_E"], after["embed.W_E"])
    assert not torch.equal(before["blocks.0.attn.W_Q"], after["blocks.0.attn.W_Q"])
    assert torch.equal(seen[20], before["blocks.0.attn.W_K"])  # no update during steps 0..19
    assert not torch.equal(seen[21], seen[20])


def test_lr_schedules():
    cfg = TrainConfig(steps=110, lr=1.0, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0) and lr_at(110, cfg) == pytest.approx(0.1)
    assert lr_at(60, cfg) == pytest.approx(0.55)
    lin = cfg.replace(schedule="linear", warmup_steps=0)
    assert lr_at(55, lin) == pytest.approx(0.55)
    assert lr_at(5, cfg.replace(schedule="constant", warmup_steps=0)) == 1.0


def test_one_answer_to_is_this_the_same_run(tmp_path):
    """`finished_run` (reuse), `--resume` and the dynamics all ask `rundir.run_differences`."""
    from mechmem.checkpoint import read_payload
    from mechmem.training.run import preset_identity
    from mechmem.training.rundir import finished_run, payload_identity, run_differences

    out = tmp_path / "run"
    _run(out, seed=3)
    same = preset_identity("permutation", "task2-quick", seed=3, **SMALL)
    assert payload_identity(read_payload(out / "ckpt.pt")) == same
    assert finished_run(out, same)
    other = preset_identity("permutation", "task2-quick", seed=4, **SMALL)
    assert not finished_run(out, other) and not finished_run(tmp_path / "missing", same)
    assert run_differences(read_payload(out / "ckpt.pt"), other) == ["train.seed 3 != 4"]
    assert run_differences(read_payload(out / "ckpt.pt"), other, parts=("model", "task")) == []
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ckpt.pt").write_bytes(b"not a checkpoint")
    assert not finished_run(tmp_path / "bad", same)
    with pytest.raises(MechmemError, match="is a different run .*train.seed 3 != 4"):
        _run(out, seed=4, resume=True)


def test_the_one_option_parser():
    from dataclasses import dataclass
    from pathlib import Path

    from mechmem.config import apply_options

    @dataclass(frozen=True)
    class Spec:
        n: int = 1
        lr: float = 0.1
        flag: bool = True
        ds: tuple[int, ...] = (8,)
        names: tuple[str, ...] = ("a",)
        where: Path = Path("x")
        text: str | None = None

    got = apply_options(
        Spec(),
        {"n": "3", "lr": "0.5", "flag": "0", "ds": "16,32", "names": "b,c", "where": "y", "text": "t"},
    )
    assert got == Spec(3, 0.5, False, (16, 32), ("b", "c"), Path("y"), "t")
    assert apply_options(Spec(), {"n": "7"}, parsers={"n": lambda s: int(s) * 2}).n == 14
    for options, names, message in (
        ({"colour": "red"}, None, "unknown option 'colour'"),
        ({"text": "t"}, ["n"], "unknown option 'text' \\(known: n\\)"),
        ({"n": "x"}, None, "--set n=x: invalid literal"),
        ({"flag": "yes"}, None, "--set flag=yes: takes 0 or 1"),
    ):
        with pytest.raises(MechmemError, match=message):
            apply_options(Spec(), options, names)
