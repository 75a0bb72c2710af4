"""The analysis scripts' contract: outputs and schemas
on real checkpoints, one-line errors, graceful skips."""

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch
from helpers import ROOT, load_script

from mechmem.analysis.heads import repeated_random_tokens
from mechmem.analysis.planted import (
    INDUCTION_HEAD,
    PREVIOUS_TOKEN_HEAD,
    planted_config,
    planted_induction_model,
)
from mechmem.checkpoint import save_checkpoint
from mechmem.cli import run_script
from mechmem.config import ConfigMixin
from mechmem.models import build_model
from mechmem.tasks import Batch, PatchingPair, Task, get_preset, register_task

SCRIPTS = {
    "ablate_heads": "ablate_heads.json",
    "logit_lens": "logit_lens.json",
    "detect_heads": "detect_heads.json",
    "probe_memory": "memory_probes.json",
    "qk_attribution": "qk_attribution.json",
}


@dataclass(frozen=True)
class RepeatConfig(ConfigMixin):
    """Repeated random sequences [r, r]; the second half is predictable by induction."""

    d_vocab: int = 12
    """Number of tokens."""
    half: int = 10
    """Length of r."""


@register_task
class RepeatTask(Task):
    """Test-only task: predict the second copy of a random sequence."""

    name = "test_repeat"
    config_cls = RepeatConfig

    @property
    def d_vocab(self):
        return self.config.d_vocab

    @property
    def seq_len(self):
        return 2 * self.config.half - 1

    def train_batch(self, n, *, generator):
        seq = repeated_random_tokens(n, self.config.half, self.config.d_vocab, generator=generator)
        mask = torch.zeros(n, self.seq_len)
        mask[:, self.config.half :] = 1.0
        return Batch(seq[:, :-1], seq[:, 1:], mask)

    def patching_pair(self, n, *, generator):
        clean, corrupted = self.train_batch(n, generator=generator), self.train_batch(n, generator=generator)
        last = torch.full((n,), self.seq_len - 1)
        return PatchingPair(
            clean.tokens, corrupted.tokens, last, clean.targets[:, -1], corrupted.targets[:, -1]
        )


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    planted = save_checkpoint(
        root / "planted" / "ckpt.pt",
        model=planted_induction_model(),
        model_config=planted_config(),
        task_name="test_repeat",
        task_config=RepeatConfig(),
    )
    out = {"planted": planted}
    for kind, task, preset in (
        ("permutation", "permutation", "task2-quick"),
        ("birth", "birth", "quick_ffn"),
    ):
        spec = get_preset(task, preset)
        model = build_model(spec.model, generator=torch.Generator().manual_seed(0))
        out[kind] = save_checkpoint(
            root / kind / "ckpt.pt",
            model=model,
            model_config=spec.model,
            task_name=task,
            task_config=spec.task,
        )
    return out


# (n_layers, n_heads, has MLPs) of each checkpoint above
SHAPES = {"planted": (2, 3, False), "permutation": (1, 2, True), "birth": (2, 1, True)}


@pytest.mark.parametrize("kind", sorted(SHAPES))
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_scripts_write_json_png_and_table(checkpoints, tmp_path, capsys, script, kind):
    rc = run_script(
        load_script(script).main, [str(checkpoints[kind]), "--out", str(tmp_path), "--n-samples", "16"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "-----" in out  # a printed table
    data = json.loads((tmp_path / SCRIPTS[script]).read_text())
    assert "metric" in data and "axes" in data
    assert list(tmp_path.glob("*.png"))
    n_layers, n_heads, has_mlp = SHAPES[kind]
    if script == "ablate_heads":
        assert {"layer", "head", "method", "metric", "delta"} <= set(data["results"][0])
        assert {r["method"] for r in data["results"]} == {"zero", "mean", "resample"}
    elif script == "detect_heads":
        assert set(data["scores"]) == {"previous_token", "duplicate_token", "induction"}
        assert all(len(s) == n_layers and len(s[0]) == n_heads for s in data["scores"].values())
    elif script == "logit_lens":
        assert (
            f"resid_post.{n_layers - 1}" in data["stages"] and "target_prob" in data["stages"]["resid_pre.0"]
        )
        assert ("resid_mid.0" in data["stages"]) == has_mlp
    elif script == "qk_attribution":
        assert len(data["entries"]) >= n_layers * n_heads and len(data["agreement"]) == 2 * n_layers * n_heads
        assert all(e["max_error"] < 1e-4 for e in data["entries"])
    else:
        assert {"name", "matrix", "recall"} <= set(data["probes"][0])


def test_detect_heads_script_finds_the_planted_heads(checkpoints, tmp_path, capsys):
    assert (
        run_script(
            load_script("detect_heads").main,
            [str(checkpoints["planted"]), "--out", str(tmp_path), "--n-samples", "16"],
        )
        == 0
    )
    scores = json.loads((tmp_path / "detect_heads.json").read_text())["scores"]
    for name, (layer, head) in (("previous_token", PREVIOUS_TOKEN_HEAD), ("induction", INDUCTION_HEAD)):
        flat = torch.tensor(scores[name]).flatten()
        assert divmod(int(flat.argmax()), 3) == (layer, head)


def test_default_out_is_beside_the_checkpoint(checkpoints, capsys):
    assert run_script(load_script("logit_lens").main, [str(checkpoints["planted"]), "--n-samples", "4"]) == 0
    assert (checkpoints["planted"].parent / "logit_lens.json").exists()


def bad_file(kind, good, path):
    if kind == "missing":
        return path / "nope.pt"
    bad = path / "bad.pt"
    raw = good.read_bytes()
    if kind == "empty":
        bad.write_bytes(b"")
    elif kind == "truncated":
        bad.write_bytes(raw[: len(raw) // 2])
    elif kind == "not_checkpoint":
        torch.save({"weights": torch.zeros(2)}, bad)
    else:
        payload = torch.load(good, weights_only=True)
        if kind == "wrong_version":
            payload["format_version"] = 99
        else:  # tampered: a weight changed after the digest was written
            name = next(iter(payload["state_dict"]))
            payload["state_dict"][name] = payload["state_dict"][name] + 1.0
        torch.save(payload, bad)
    return bad


@pytest.mark.parametrize(
    "kind", ["missing", "empty", "truncated", "not_checkpoint", "wrong_version", "tampered"]
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(checkpoints, tmp_path, capsys, kind):
    ckpt = bad_file(kind, checkpoints["planted"], tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for script, json_name in SCRIPTS.items():
        (out_dir / json_name).write_text("sentinel")
        assert run_script(load_script(script).main, [str(ckpt), "--out", str(out_dir)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")
        assert (out_dir / json_name).read_text() == "sentinel"
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(SCRIPTS.values())


def test_bad_flags_exit_2_with_one_line(checkpoints, capsys):
    for bad in (["--n-samples", "0"], ["--methods", "bogus"], ["--seed", "abc"]):
        assert run_script(load_script("ablate_heads").main, [str(checkpoints["planted"]), *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")


# Slow (a fresh interpreter importing torch and TransformerLens, 20-100 s): by default the same error path
# runs in-process in test_bad_flags_exit_2_with_one_line, and a real command line (analyses/train.py) ends in
# one line and exit 2 in test_checkpoint.py::test_train_script_bad_checkpoint_dir_exits_2_without_traceback.
@pytest.mark.subprocess
@pytest.mark.slow
def test_command_line_error_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "analyses" / "ablate_heads.py"), str(tmp_path / "nope.pt")],
        capture_output=True,
        check=False,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: ")


def test_models_without_attention_are_skipped(tmp_path, capsys):
    facts = pytest.importorskip("mechmem.models.facts")
    task = pytest.importorskip("mechmem.tasks.facts")
    cfg = facts.FactsModelConfig(n_in=4, n_out=2, d_model=4, d_mlp=4, mixing="2emb", mlp=False, norms=False)
    model = build_model(cfg, generator=torch.Generator().manual_seed(0))
    ckpt = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=model,
        model_config=cfg,
        task_name="facts",
        task_config=task.FactsTaskConfig(n_facts=8, n_in=4, n_out=2),
    )
    for script, json_name in SCRIPTS.items():
        assert run_script(load_script(script).main, [str(ckpt), "--n-samples", "4"]) == 0
        assert capsys.readouterr().out.startswith("skipped: ")
        assert "skipped" in json.loads((tmp_path / json_name).read_text())


def test_logit_lens_on_the_patching_pair_sees_the_planted_answer_late(checkpoints, tmp_path, capsys):
    argv = [str(checkpoints["planted"]), "--out", str(tmp_path), "--n-samples", "8", "--data", "pair"]
    assert run_script(load_script("logit_lens").main, argv) == 0
    stages = json.loads((tmp_path / "logit_lens.json").read_text())["stages"]
    assert stages["resid_post.1"]["target_prob"] > 0.99 and stages["resid_post.0"]["target_prob"] < 0.1
