"""AtP*'s exact query/key part in closed form (`qk_correction.swap_effects`) against recomputing the attention
pattern once per swapped position (what the fix did before), on the architectures whose attention differs:
rotary, grouped-query, local windows, a custom attention scale, and near one-hot patterns.

The fix needs the engine's replay, which runs every case either backend builds (TransformerLens 4 builds
no local or parallel model: those are checked by `make test-tl3`, TransformerLens 3.9, which runs this
file)."""

import pytest
import torch
from engine_cases import ARCHITECTURES, BASE, arch_model
from helpers import build_transformer_cfg

from mechmem.analysis.interventions.replay import Replay, replay_unsupported
from mechmem.analysis.patching.qk_correction import swap_effects
from mechmem.models.backend import BACKEND
from mechmem.models.transformer_config import bridge_unsupported

CASES = [
    "tied",
    "attn_scale",
    "rotary",
    "partial_rotary",
    "grouped_query",
    "local",
    "neox_like",
    "llama_like",
]


def replayable(name: str):
    """The model of architecture `name` and its replay, or a skip where this backend does not build it."""
    if BACKEND == "bridge" and bridge_unsupported(build_transformer_cfg(**(BASE | ARCHITECTURES[name]))):
        pytest.skip("TransformerLens 4 does not build it")
    model = arch_model(name)
    assert replay_unsupported(model) is None
    return model, Replay(model)


def recomputed(replay: Replay, layer: int, h, h_new, grad):
    """One attention recomputation per position p with h[:, p] swapped for h_new[:, p] (the naive loop)."""
    pattern = replay.attend(layer, h)[0]
    out = []
    for p in range(h.shape[1]):
        swapped = h.clone()
        swapped[:, p] = h_new[:, p]
        out.append((grad * (replay.attend(layer, swapped)[0] - pattern)).sum())
    return torch.stack(out)


def inputs(model, sharpen: float, seed: int):
    """Normalised attention inputs of a random residual stream and of a perturbed copy, and a random
    gradient with respect to the pattern; `sharpen` scales the inputs (large: near one-hot patterns)."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    resid = torch.randn(3, cfg.n_ctx, cfg.d_model, generator=g)
    delta = torch.randn(3, cfg.n_ctx, cfg.d_model, generator=g)
    delta[:, 1] = 0  # an unchanged position: no effect
    grad = torch.randn(3, cfg.n_heads, cfg.n_ctx, cfg.n_ctx, generator=g)
    return sharpen * resid, sharpen * (resid + delta), grad


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("sharpen", [1.0, 30.0])
def test_closed_form_equals_recomputation(name, sharpen):
    model, replay = replayable(name)
    for layer in range(model.cfg.n_layers):
        h, h_new, grad = inputs(model, sharpen, seed=layer)
        with torch.no_grad():
            ours = swap_effects(replay, layer, h, h_new, grad)
            ref = recomputed(replay, layer, h, h_new, grad)
        scale = ref.abs().max().item()
        assert scale > 1e-3, "the swaps must move the pattern for the comparison to mean anything"
        torch.testing.assert_close(ours, ref, atol=1e-5 * scale, rtol=1e-4, msg=f"{name} layer {layer}")
        assert ours[1].abs().item() < 1e-6 * scale  # position 1 did not change


def test_chunks_over_the_batch_give_the_same_sum():
    model, replay = replayable("attn_scale")
    h, h_new, grad = inputs(model, 1.0, seed=5)
    with torch.no_grad():
        whole = swap_effects(replay, 0, h, h_new, grad)
        chunked = swap_effects(replay, 0, h, h_new, grad, memory_bytes=1.0)  # one row at a time
    torch.testing.assert_close(chunked, whole, atol=1e-6, rtol=1e-6)
