"""Neuron direct effect against a naive loop and against
the exact logit change from ablating a last-layer neuron."""

import pytest
import torch
from helpers import assert_no_hooks

from mechmem.analysis.neurons import ablate_neurons, neuron_direct_effect, rank_neurons
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.models.weights import canonical_parameters


def make_model(norm=None, n_layers=1):
    cfg = TransformerConfig(
        n_layers=n_layers, d_model=16, n_heads=2, d_mlp=32, d_vocab=6, n_ctx=9, normalization_type=norm
    )
    model = build_transformer(cfg, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():  # non-zero biases, so the test would notice them leaking into the direct effect
        for name, p in canonical_parameters(model).items():  # HookedTransformer's names on either backend
            if name.rsplit(".", 1)[-1].startswith("b_"):
                p.copy_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    return model.eval()


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(1, 6, (12, 9), generator=g)
    return tokens, torch.randint(0, 9, (12,), generator=g), torch.randint(0, 6, (12,), generator=g)


@pytest.mark.parametrize("norm", [None, "LN", "RMS", "LNPre"])
def test_direct_effect_matches_naive_loop(inputs, norm):
    tokens, pos, target = inputs
    model = make_model(norm, n_layers=2)
    layer = 0
    fast = neuron_direct_effect(model, tokens, layer, pos, target)
    _, cache = model.run_with_cache(tokens)
    naive = torch.zeros_like(fast)
    for b in range(tokens.shape[0]):
        for n in range(model.cfg.d_mlp):
            write = cache[f"blocks.{layer}.mlp.hook_post"][b, pos[b], n] * model.blocks[layer].mlp.W_out[n]
            if norm in ("LN", "LNPre"):
                write = write - write.mean()
            if norm is not None:
                write = write / cache["ln_final.hook_scale"][b, pos[b], 0]
            if norm in ("LN", "RMS"):
                write = write * model.ln_final.w
            naive[b, n] = write @ model.W_U[:, target[b]]
    torch.testing.assert_close(fast, naive, rtol=1e-4, atol=1e-5)


def test_direct_effect_equals_logit_change_from_ablating_a_last_layer_neuron(inputs):
    tokens, pos, target = inputs
    model = make_model(None)
    effect = neuron_direct_effect(model, tokens, 0, pos, target)
    clean = model(tokens)
    rows = torch.arange(tokens.shape[0])
    for n in (0, 7, 31):
        ablated = ablate_neurons(model, tokens, 0, [n])
        change = clean[rows, pos, target] - ablated[rows, pos, target]
        torch.testing.assert_close(change, effect[:, n], rtol=1e-4, atol=1e-5)
    assert_no_hooks(model)


def test_ablation_modes_and_ranking(inputs):
    tokens = inputs[0]
    model = make_model(None)
    torch.testing.assert_close(ablate_neurons(model, tokens, 0, []), model(tokens))
    post = model.run_with_cache(tokens)[1]["blocks.0.mlp.hook_post"]
    reference = torch.randint(1, 6, (20, 9), generator=torch.Generator().manual_seed(7))
    ref_mean = model.run_with_cache(reference)[1]["blocks.0.mlp.hook_post"].mean(0)  # [pos d_mlp]
    for ref, target in ((reference, ref_mean), (None, post.mean(0))):  # per position over the reference
        # Last layer, no final norm: the logits move by (new - old activation) * W_out[n] @ W_U, exactly.
        change = (target[None, :, [3, 8]] - post[..., [3, 8]]) @ (
            model.blocks[0].mlp.W_out[[3, 8]] @ model.W_U
        )
        ablated = ablate_neurons(model, tokens, 0, [3, 8], mode="mean", reference=ref)
        torch.testing.assert_close(ablated, model(tokens) + change, rtol=1e-4, atol=1e-5)
    assert_no_hooks(model)
    with pytest.raises(ValueError):
        ablate_neurons(model, tokens, 0, [0], mode="resample")
    ranking = rank_neurons(torch.tensor([[1.0, -2.0, 3.0], [1.0, 0.0, 1.0]]), layer=0)
    assert ranking.top(2) == [2, 0]
    assert ranking.share(1) == pytest.approx(2.0 / 3.0)
