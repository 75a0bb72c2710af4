"""Checkpoints: round trip, safe loading, validation of every kind of bad file, atomic writes, and every
format mechmem and TransformerLens 3.9 have written (tests/data/, written by `checkpoint_fixture.py`)."""

import os
import pickle
from pathlib import Path

import pytest
import torch
from checkpoint_fixture import probe_tokens
from helpers import build_transformer_cfg, load_script

from mechmem.checkpoint import FORMAT_VERSION, load_checkpoint, payload_digest, read_payload, save_checkpoint
from mechmem.cli import run_script
from mechmem.errors import CheckpointError
from mechmem.models import build_model, model_config_from_dict
from mechmem.models.backend import BACKEND
from mechmem.models.transformer_config import bridge_unsupported
from mechmem.tasks.permutation import PermutationConfig

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    cfg = build_transformer_cfg()
    model = build_model(cfg, generator=torch.Generator().manual_seed(3))
    path = tmp_path_factory.mktemp("ckpt") / "ckpt.pt"
    save_checkpoint(
        path,
        model=model,
        model_config=cfg,
        task_name="permutation",
        task_config=PermutationConfig(),
        train_config={"steps": 1},
        metrics={"train_loss": 1.0},
    )
    return path, model


def test_round_trip_gives_identical_logits(saved):
    path, model = saved
    ckpt = load_checkpoint(path)
    tokens = torch.randint(1, 6, (4, 9))
    torch.testing.assert_close(ckpt.model(tokens), model(tokens), rtol=0, atol=0)
    assert ckpt.task.config == PermutationConfig()
    assert ckpt.metrics == {"train_loss": 1.0}
    assert ckpt.versions["mechmem"] and ckpt.versions["transformer_lens"] != "unknown"


def test_plain_torch_load_with_weights_only(saved):
    payload = torch.load(saved[0], weights_only=True)
    assert payload["format"] == "mechmem-checkpoint" and payload["format_version"] == FORMAT_VERSION
    assert {"model_config", "task_name", "task_config", "train_config", "metrics", "state_dict"} <= set(
        payload
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _resave(src: Path, dst: Path, **changes) -> Path:
    payload = torch.load(src, weights_only=True)
    payload.update(changes)
    torch.save(payload, dst)
    return dst


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda src, d: d / "missing.pt", "no such file"),
        (lambda src, d: _write(d / "empty.pt", b""), "empty"),
        (lambda src, d: _write(d / "trunc.pt", src.read_bytes()[:500]), "not a readable"),
        (lambda src, d: _write(d / "text.pt", b"hello"), "not a readable"),
        (lambda src, d: torch.save({"a": torch.ones(2)}, d / "other.pt") or d / "other.pt", "not a mechmem"),
        (lambda src, d: _resave(src, d / "v99.pt", format_version=99), "format version 99"),
    ],
    ids=["missing", "empty", "truncated", "text", "foreign", "version"],
)
def test_bad_files_raise_one_line_checkpoint_error(saved, tmp_path, make, message):
    path = make(saved[0], tmp_path)
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value)


def test_tampered_weights_are_detected(saved, tmp_path):
    payload = torch.load(saved[0], weights_only=True)
    payload["state_dict"]["embed.W_E"][0, 0] += 1.0
    torch.save(payload, tmp_path / "tampered.pt")
    with pytest.raises(CheckpointError, match="digest mismatch"):
        load_checkpoint(tmp_path / "tampered.pt")


def test_tampered_config_is_detected(saved, tmp_path):
    payload = torch.load(saved[0], weights_only=True)
    payload["model_config"]["d_mlp"] = 64
    torch.save(payload, tmp_path / "cfg.pt")
    with pytest.raises(CheckpointError, match="digest mismatch"):
        read_payload(tmp_path / "cfg.pt")


def test_shape_mismatch_with_consistent_digest(saved, tmp_path):
    from mechmem.checkpoint import payload_digest

    payload = torch.load(saved[0], weights_only=True)
    payload["state_dict"]["embed.W_E"] = torch.zeros(7, 16)
    payload["digest"] = payload_digest(payload)
    torch.save(payload, tmp_path / "shape.pt")
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint(tmp_path / "shape.pt")


class _Exploit:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_runs_code_is_refused_and_never_runs(saved, tmp_path):
    marker = tmp_path / "pwned"
    payload = torch.load(saved[0], weights_only=True)
    payload["metrics"] = {"x": _Exploit(str(marker))}
    torch.save(payload, tmp_path / "evil.pt", pickle_protocol=2)
    raw = tmp_path / "evil.pkl"
    raw.write_bytes(pickle.dumps(_Exploit(str(marker))))
    for path in (tmp_path / "evil.pt", raw):
        with pytest.raises(CheckpointError, match="refused|not a readable"):
            load_checkpoint(path)
    assert not marker.exists()


def test_interrupted_save_leaves_existing_file_intact(saved, tmp_path, monkeypatch):
    target = tmp_path / "ckpt.pt"
    target.write_bytes(saved[0].read_bytes())
    before = target.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError):
        save_checkpoint(
            target,
            model=saved[1],
            model_config=build_transformer_cfg(),
            task_name="permutation",
            task_config=PermutationConfig(),
        )
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_train_script_bad_checkpoint_dir_exits_2_without_traceback(tmp_path, capsys):
    (tmp_path / "ckpt.pt").write_text("garbage")
    argv = ["permutation", "--preset", "task1-quick", "--out", str(tmp_path), "--resume"]
    assert run_script(load_script("train").main, argv) == 2
    err = capsys.readouterr().err
    assert err.strip().startswith("error:") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "ckpt.pt").read_text() == "garbage"


# -- every format written so far -----------------------------------------------------------------------------
FIXTURES = {
    "format1_tl3.pt": "format 1 (mechmem 761c2bd), HookedTransformer's mask and IGNORE beside the weights",
    "format2_buffers_tl3.pt": "format 2 before the canonical layout (mechmem 49dfbdd), buffers too",
    "gated_tl3.pt": "a gated MLP with a nonzero b_in, which TransformerLens 4's gated MLP lacks",
    "parallel_tl3.pt": "parallel attention and MLP",
    "shortformer_tl3.pt": "shortformer positions",
    "unscaled_tl3.pt": "attn_scale=1.0, which TransformerLens 4 refuses as a setting",
}
"""Files written under TransformerLens 3.9 (format 2 in the canonical layout, of either version:
tests/test_backends.py)."""


def probe_logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(probe_tokens()).flatten()


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_written_format_loads_with_its_recorded_logits(fixture, tmp_path):
    """Under TransformerLens 4, a model it cannot compute is refused with the line TransformerLens 3.9 warns
    with when it writes one."""
    payload = read_payload(DATA / fixture)
    refusal = bridge_unsupported(model_config_from_dict(payload["model_config"]))
    if BACKEND == "bridge" and refusal:
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(DATA / fixture)
        assert str(err.value) == f"{DATA / fixture}: {refusal}"
        assert refusal.endswith("it loads with transformer-lens>=3.9,<4")
        return
    ckpt = load_checkpoint(DATA / fixture)
    got = probe_logits(ckpt.model)
    # the logits the writing machine recorded: float32 kernels differ between CPUs by a few 1e-7 here
    torch.testing.assert_close(got, torch.tensor(payload["metrics"]["probe_logits"]), rtol=0, atol=1e-5)
    if refusal:
        with pytest.warns(UserWarning) as warned:
            save_checkpoint(
                tmp_path / fixture, model=ckpt.model, model_config=ckpt.model_config,
                task_name=ckpt.task_name, task_config=ckpt.task_config,
            )  # fmt: skip
        assert refusal in [str(w.message) for w in warned]


def with_entries(payload: dict, path: Path, entries: dict[str, torch.Tensor]) -> Path:
    """`payload` written to `path` with `entries` added to its state dict, under a digest that matches."""
    changed = {**payload, "state_dict": {**payload["state_dict"], **entries}}
    torch.save({**changed, "digest": payload_digest(changed)}, path)
    return path


def test_buffers_are_validated_against_the_config_then_dropped(tmp_path):
    """TransformerLens before 3.9 kept an [n_ctx, n_ctx] causal mask and IGNORE -1e5: loaded as 3.9's empty
    mask and -inf. A mask that is not the layer's causal mask, or a buffer of the wrong kind, is refused."""
    payload = torch.load(DATA / "format2_buffers_tl3.pt", weights_only=True)
    want = torch.tensor(payload["metrics"]["probe_logits"])
    n_ctx = payload["model_config"]["n_ctx"]

    def resaved(**buffers: torch.Tensor) -> Path:
        return with_entries(
            payload, tmp_path / "resaved.pt", {f"blocks.0.attn.{k}": v for k, v in buffers.items()}
        )

    causal = torch.ones(n_ctx, n_ctx, dtype=torch.bool).tril()
    older = resaved(mask=causal, IGNORE=torch.tensor(-1e5))
    torch.testing.assert_close(probe_logits(load_checkpoint(older).model), want, rtol=0, atol=1e-6)
    bad = {
        "not the causal mask": {"mask": torch.ones(n_ctx, n_ctx, dtype=torch.bool)},
        "square bool causal mask, got float32": {"mask": causal.float()},
        "more than the model's n_ctx": {"mask": torch.ones(n_ctx + 1, n_ctx + 1, dtype=torch.bool).tril()},
        "a scalar of -inf or at most -1e4": {"IGNORE": torch.full((2,), -torch.inf)},
        "got float32 0.0": {"IGNORE": torch.tensor(0.0)},
        "must be floating point": {"IGNORE": torch.tensor(-100000)},
        "no rotary positions": {"rotary_sin": torch.zeros(n_ctx, 4)},
    }
    for message, buffers in bad.items():
        with pytest.raises(CheckpointError, match=message) as err:
            load_checkpoint(resaved(**buffers))
        assert "\n" not in str(err.value)
    stray = with_entries(payload, tmp_path / "stray.pt", {"blocks.3.attn.mask": causal})
    with pytest.raises(CheckpointError, match="blocks.3.attn.mask is not a buffer of an attention layer"):
        load_checkpoint(stray)


def test_rotary_tables_beside_the_weights_are_checked_and_dropped(tmp_path):
    """A rotary HookedTransformer's state dict holds its sin/cos tables [positions, rotary_dim] per layer."""
    cfg = build_transformer_cfg(positional_embedding_type="rotary", rotary_dim=4)
    model = build_model(cfg, generator=torch.Generator().manual_seed(0)).eval()
    path = save_checkpoint(
        tmp_path / "rotary.pt", model=model, model_config=cfg, task_name="permutation",
        task_config=PermutationConfig(),
    )  # fmt: skip
    payload = torch.load(path, weights_only=True)
    angles = torch.arange(cfg.n_ctx)[:, None] / 10 ** torch.arange(4)
    tables = {
        f"blocks.{layer}.attn.{name}": table
        for layer in range(cfg.n_layers)
        for name, table in (("rotary_sin", angles.sin()), ("rotary_cos", angles.cos()))
    }
    tokens = probe_tokens() % cfg.d_vocab
    loaded = load_checkpoint(with_entries(payload, tmp_path / "tables.pt", tables)).model
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens), model(tokens), rtol=0, atol=0)
    narrow = with_entries(payload, tmp_path / "narrow.pt", {"blocks.0.attn.rotary_cos": angles[:, :3].cos()})
    with pytest.raises(CheckpointError, match=r"rotary_cos must be \[positions, 4\]"):
        load_checkpoint(narrow)
