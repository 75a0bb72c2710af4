"""Two TransformerLens backends behind `mechmem.models`: the canonical weight layout, portable checkpoints,
and the same analyses, numbers and training step under TransformerLens 3.9 (HookedTransformer) and 4.x
(TransformerBridge).

Runs under whichever TransformerLens this environment has. The cross-version comparison runs the analyses once
here and once in the other environment (the first of `.venv`, `.venv-tl3` on the other major
version: `make test-tl3` bootstraps `.venv-tl3`; or set MECHMEM_OTHER_PYTHON) and compares every number
of their JSON outputs: head detection, ablation, logit lens, probes, exact and attribution patching, circuits,
the report, dynamics over a series of checkpoints, and one training step.
"""

import copy
import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from backend_fixture import probe_tokens

from mechmem.checkpoint import load_checkpoint, read_payload
from mechmem.errors import MechmemError
from mechmem.models import layout
from mechmem.models.backend import BACKEND, TL_VERSION, is_bridge
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.models.weights import (
    canonical_parameters,
    canonical_state_dict,
    initial_weights,
    load_canonical_state_dict,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
TOL = 1e-5

BASE = {"n_layers": 2, "d_model": 16, "n_heads": 4, "d_vocab": 11, "n_ctx": 12}
ARCHITECTURES = {
    "attn_only": {},
    "ln_gelu_mlp": {"d_mlp": 24, "act_fn": "gelu", "normalization_type": "LN"},
    "no_attn_scale_rms": {"use_attn_scale": False, "normalization_type": "RMS", "d_vocab_out": 7},
    "rotary_gqa_gated": {
        "positional_embedding_type": "rotary",
        "n_key_value_heads": 2,
        "gated_mlp": True,
        "d_mlp": 24,
        "act_fn": "silu",
        "normalization_type": "RMS",
    },
    "partial_rotary_lnpre": {
        "positional_embedding_type": "rotary",
        "rotary_dim": 2,
        "normalization_type": "LNPre",
        "d_mlp": 24,
    },
    "odd_head_rmspre": {"d_head": 5, "normalization_type": "RMSPre", "attn_scale": 3.0, "eps": 1e-3},
}


BRIDGE_CANNOT = {
    "local attention": {"attn_types": ("global", "local"), "window_size": 3},
    "parallel attention and MLP": {"parallel_attn_mlp": True, "d_mlp": 24},
    "shortformer positions": {"positional_embedding_type": "shortformer"},
}
"""Settings HookedTransformer computes and TransformerLens 4's native model cannot (it ignores attn_types)."""


def _config(name: str) -> TransformerConfig:
    return TransformerConfig(**BASE, **ARCHITECTURES[name])


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_canonical_layout_is_the_weights_of_either_backend(name):
    config = _config(name)
    model = build_transformer(config, generator=torch.Generator().manual_seed(0))
    shapes = layout.canonical_shapes(config)
    state = canonical_state_dict(model)
    assert [(k, tuple(v.shape)) for k, v in state.items()] == list(shapes.items())
    if not is_bridge(model):  # the canonical order is HookedTransformer's own parameter order
        assert [(k, tuple(p.shape)) for k, p in model.named_parameters()] == list(shapes.items())
    want = initial_weights(config, torch.Generator().manual_seed(0))
    for key, tensor in want.items():
        torch.testing.assert_close(state[key], tensor, rtol=0, atol=0)


@pytest.mark.parametrize("setting", BRIDGE_CANNOT)
def test_settings_the_bridge_cannot_compute_are_refused_by_name(setting):
    config = TransformerConfig(**BASE, **BRIDGE_CANNOT[setting])
    if BACKEND == "hooked":
        assert build_transformer(config, generator=torch.Generator().manual_seed(0)) is not None
    else:
        with pytest.raises(MechmemError, match=f"cannot compute this model: {setting}"):
            build_transformer(config, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_bridge_layout_round_trips_exactly(name):
    config = _config(name)
    gen = torch.Generator().manual_seed(3)
    state = {k: torch.randn(s, generator=gen) for k, s in layout.canonical_shapes(config).items()}
    if config.gated_mlp:  # the bridge folds a gated MLP's input bias into its output bias
        state = {k: torch.zeros_like(v) if k.endswith("mlp.b_in") else v for k, v in state.items()}
    back = layout.from_bridge(layout.to_bridge(state, config), config)
    assert list(back) == list(state)
    for key in state:
        assert torch.equal(back[key], state[key]), key


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_canonical_weights_load_into_a_fresh_model_with_equal_logits(name):
    config = _config(name)
    model = build_transformer(config, generator=torch.Generator().manual_seed(1)).eval()
    other = build_transformer(config, generator=torch.Generator().manual_seed(2)).eval()
    load_canonical_state_dict(other, canonical_state_dict(model))
    tokens = torch.randint(config.d_vocab, (3, config.n_ctx), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(other(tokens), model(tokens), rtol=0, atol=0)


def test_frozen_globs_name_canonical_weights_on_either_backend():
    config = _config("ln_gelu_mlp").replace(frozen=("blocks.*.attn.W_Q", "unembed.b_U"))
    model = build_transformer(config, generator=torch.Generator().manual_seed(0))
    frozen = sorted(n for n, p in canonical_parameters(model).items() if not p.requires_grad)
    assert frozen == ["blocks.0.attn.W_Q", "blocks.1.attn.W_Q", "unembed.b_U"]
    before = {k: v.clone() for k, v in canonical_state_dict(model).items()}
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    tokens = torch.randint(config.d_vocab, (4, config.n_ctx), generator=torch.Generator().manual_seed(1))
    model(tokens).logsumexp(-1).mean().backward()
    optimizer.step()
    after = canonical_state_dict(model)
    for key, value in before.items():
        assert torch.equal(value, after[key]) == (key in frozen), key


def test_a_deep_copy_patches_one_heads_query_input_as_the_original_and_outlives_it():
    """`copy.deepcopy` gives a model of its own: patching one head's query input (the per-head forks
    edge-level circuits patch, read before the block's norm) moves the copy's logits exactly as the
    original's, also once the original is gone. TransformerLens 4 bridges capture that input through hooks
    bound to the original."""
    config = _config("ln_gelu_mlp")
    model = build_transformer(config, generator=torch.Generator().manual_seed(0)).eval()
    tokens = torch.randint(config.d_vocab, (3, config.n_ctx), generator=torch.Generator().manual_seed(1))
    shift = 3 * torch.randn(config.d_model, generator=torch.Generator().manual_seed(2))

    def patched(m: torch.nn.Module) -> torch.Tensor:
        def push(x: torch.Tensor, hook: object) -> torch.Tensor:
            x = x.clone()
            x[:, :, 0] += shift  # head 0's residual, before the block's norm
            return x

        m.set_use_split_qkv_input(True)
        try:
            with torch.no_grad():
                return m.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_q_input", push)])
        finally:
            m.set_use_split_qkv_input(False)

    with torch.no_grad():
        plain = model(tokens)
    want = patched(model)
    assert float((want - plain).abs().max()) > 1e-2  # the patch moves the logits
    copied = copy.deepcopy(model)
    torch.testing.assert_close(patched(copied), want, rtol=0, atol=0)
    del model
    gc.collect()
    torch.testing.assert_close(patched(copied), want, rtol=0, atol=0)


@pytest.mark.parametrize("fixture", ["backend_tl3.pt", "backend_tl4.pt"])
def test_checkpoints_written_by_either_major_version_load_with_their_logits(fixture):
    payload = read_payload(DATA / fixture)
    want = torch.tensor(payload["metrics"]["probe_logits"])
    model = load_checkpoint(DATA / fixture).model
    with torch.no_grad():
        got = model(probe_tokens()).flatten()
    assert float((got - want).abs().max()) <= TOL
    written = payload["transformer_lens_version"].split(".")[0]
    assert written == fixture[len("backend_tl")]


# -- the same analyses under the other major version ---------------------------------------------------------
def _major(python: Path) -> str:
    ask = "import importlib.metadata as m; print(m.version('transformer-lens'))"
    return subprocess.run([str(python), "-c", ask], check=True, capture_output=True, text=True).stdout[:1]


def _other_python() -> Path | None:
    """The environment with the other TransformerLens major version: MECHMEM_OTHER_PYTHON, else the first of
    `.venv`, `.venv-tl3` that has it."""
    named = os.environ.get("MECHMEM_OTHER_PYTHON")
    if named:
        return Path(named)
    for venv in (".venv", ".venv-tl3"):
        python = ROOT / venv / "bin" / "python"
        if python.exists() and _major(python) != TL_VERSION[:1]:
            return python
    return None


SKIPPED = (
    *("transformer_lens", "transformer_lens_version", "meta", "run_dir", "first_checkpoint"),
    *("wall_s", "seconds", "timings_s", "cost", "cost_s"),
)
"""JSON keys that differ between environments by design: versions, timings, the model's class name, the
run folder."""
DURATION = re.compile(r"\d+(\.\d+)? s\b")


def _numbers(a, b, path=""):
    """(path, |a - b|) for every number of two JSON trees; raises on any other difference."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys differ"
        for key in a:
            if key in SKIPPED:
                continue
            yield from _numbers(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _numbers(x, y, f"{path}[{i}]")
    elif isinstance(a, (int, float)) and not isinstance(a, bool) and isinstance(b, (int, float)):
        yield path, abs(a - b)
    elif isinstance(a, str) and isinstance(b, str):  # texts may quote a duration ("Time 61.48 s.")
        assert DURATION.sub("N s", a) == DURATION.sub("N s", b), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def both_runs(tmp_path_factory):
    other = _other_python()
    if other is None:
        pytest.skip("no environment with the other TransformerLens major version (make test-tl3 makes one)")
    out = tmp_path_factory.mktemp("backends")
    ckpt = str(DATA / "backend_tl3.pt")
    runner = str(Path(__file__).resolve().parent / "backend_runner.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen(
            [python, runner, ckpt, str(out / name)],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name, python in (("here", sys.executable), ("other", str(other)))
    ]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    return out / "here", out / "other", logs


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "output",
    [
        "detect_heads/detect_heads.json",
        "ablate_heads/ablate_heads.json",
        "logit_lens/logit_lens.json",
        "probe_memory/memory_probes.json",
        "patch/patching.json",
        "attribution/patching.json",
        "circuit/circuit.json",
        "report/report.json",
        "dynamics/dynamics.json",
        "train_step/train_step.json",
    ],
)
def test_analyses_give_the_same_numbers_under_both_major_versions(both_runs, output):
    here, other, logs = both_runs
    assert (here / output).exists() and (other / output).exists(), "\n".join(logs)[-3000:]
    diffs = list(_numbers(json.loads((here / output).read_text()), json.loads((other / output).read_text())))
    assert diffs
    worst = max(diffs, key=lambda d: d[1])
    print(f"{output}: {len(diffs)} numbers, max |difference| {worst[1]:.3g} at {worst[0]}")
    assert worst[1] <= TOL, worst
