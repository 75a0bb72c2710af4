"""Head ablation: the batched engine equals one run per head;
planted heads matter, zero-OV distractors do not."""

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_no_hooks, build_transformer_cfg
from jaxtyping import TypeCheckError

from mechmem.analysis.ablation import (
    METHODS,
    AblationResult,
    ablate_heads,
    ablate_layer_components,
    ablation_values,
    naive_head_ablation,
    plot_ablation,
)
from mechmem.analysis.heads import repeated_random_tokens
from mechmem.analysis.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_induction_model
from mechmem.models.transformer import build_transformer


@pytest.fixture(scope="module")
def model():
    return build_transformer(
        build_transformer_cfg(normalization_type="LN"), generator=torch.Generator().manual_seed(0)
    )


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(6, (12, 9), generator=torch.Generator().manual_seed(1))


def last_logprob(logits):
    return logits[:, -1].log_softmax(-1)[:, 3].mean()


@pytest.mark.parametrize("method", METHODS)
def test_batched_engine_equals_naive_loop(model, tokens, method):
    reference = torch.randint(6, (20, 9), generator=torch.Generator().manual_seed(2))
    result = ablate_heads(
        model,
        tokens,
        last_logprob,
        methods=(method,),
        reference=reference,
        generator=torch.Generator().manual_seed(3),
    )
    values = ablation_values(
        model, tokens, method, reference=reference, generator=torch.Generator().manual_seed(3)
    )
    naive = naive_head_ablation(model, tokens, last_logprob, values)
    torch.testing.assert_close(result.heads[0], naive, atol=1e-5, rtol=0)
    with torch.no_grad():
        assert result.baseline == pytest.approx(float(last_logprob(model(tokens))), abs=1e-6)
    assert_no_hooks(model)


def test_layer_ablations_equal_naive_runs(model, tokens):
    result = ablate_heads(model, tokens, last_logprob, methods=("zero",))
    for layer in range(2):

        def zero_z(z, hook):
            return torch.zeros_like(z)

        def zero_mlp(x, hook):
            return torch.zeros_like(x)

        with torch.no_grad():
            attn = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero_z)])
            mlp = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", zero_mlp)])
        assert float(result.attn_layers[0, layer]) == pytest.approx(float(last_logprob(attn)), abs=1e-5)
        assert float(result.mlp_layers[0, layer]) == pytest.approx(float(last_logprob(mlp)), abs=1e-5)


def test_identical_sequences_make_mean_and_resample_no_ops(model):
    same = torch.arange(9).remainder(6).expand(5, 9).contiguous()
    result = ablate_heads(model, same, last_logprob, methods=("mean", "resample"))
    torch.testing.assert_close(
        result.heads, torch.full_like(result.heads, result.baseline), atol=1e-5, rtol=0
    )


def test_planted_heads_matter_and_distractors_do_not():
    planted = planted_induction_model()
    seq = repeated_random_tokens(16, 10, 12, generator=torch.Generator().manual_seed(0))
    tokens, targets = seq[:, :-1], seq[:, 1:]

    def loss(logits):
        return F.cross_entropy(logits[:, 10:].flatten(0, 1), targets[:, 10:].flatten())

    result = ablate_heads(planted, tokens, loss, generator=torch.Generator().manual_seed(1))
    assert result.baseline < 0.01
    deltas = result.heads - result.baseline
    for layer, head in (PREVIOUS_TOKEN_HEAD, INDUCTION_HEAD):
        assert (deltas[:, layer, head] > 1.0).all()
        deltas[:, layer, head] = 0.0
    assert deltas.abs().max() < 1e-6  # distractor heads have a zero OV circuit
    assert result.mlp_layers is None
    rows = result.to_dict()["results"]
    assert len(rows) == 3 * 2 * (3 + 1)
    assert {"layer", "head", "method", "metric", "delta"} <= set(rows[0])
    assert type(plot_ablation(result)).__name__ == "Figure"
    assert_no_hooks(planted)


def test_result_shapes_are_validated():
    # jaxtyping (active in tests) or __post_init__ rejects inconsistent shapes
    with pytest.raises((ValueError, TypeCheckError)):
        AblationResult("m", 0.0, ("zero",), torch.zeros(2, 2, 2), torch.zeros(1, 2))
    with pytest.raises((ValueError, TypeCheckError)):
        AblationResult("m", 0.0, ("zero",), torch.zeros(1, 2, 2), torch.zeros(1, 3))


def test_layer_components_replay_the_values(model, tokens):
    values = ablation_values(model, tokens, "zero")
    heads, attn, mlp = ablate_layer_components(model, tokens, last_logprob, values, 1)
    result = ablate_heads(model, tokens, last_logprob, methods=("zero",))
    torch.testing.assert_close(heads, result.heads[0, 1], atol=1e-5, rtol=0)
    expected = (float(result.attn_layers[0, 1]), float(result.mlp_layers[0, 1]))
    assert (attn, mlp) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="unknown ablation method"):
        ablate_heads(model, tokens, last_logprob, methods=("bogus",))


def test_no_hooks_left_when_a_hook_fails(model, tokens):
    with pytest.raises(KeyError):  # no replacement values: the hook itself raises inside the forward pass
        ablate_layer_components(model, tokens, last_logprob, {}, 0)
    assert_no_hooks(model)


# -- attribution: the large-model path of the report's ablation section --------------------------------------
def _hooked_grads(model, tokens, metric):
    """Reference: plain TransformerLens run, each hook_z / hook_mlp_out kept with its autograd gradient."""
    kept = {}

    def keep(name):  # keyed by the requested name (a TransformerLens 4 bridge's hook.name is its own)
        def hook_fn(act, hook):
            act.retain_grad()
            kept[name] = act
            return act

        return hook_fn

    names = [
        f"blocks.{layer}.{leaf}"
        for layer in range(model.cfg.n_layers)
        for leaf in ("attn.hook_z", "hook_mlp_out")
    ]
    metric(model.run_with_hooks(tokens, fwd_hooks=[(name, keep(name)) for name in names])).backward()
    model.zero_grad(set_to_none=True)
    return {name: (act.detach(), act.grad) for name, act in kept.items()}


def test_attribution_ablation_agrees_with_exact_and_keeps_exact_values():
    """Forced through attribution on a random 3-layer LayerNorm model: the estimates equal gradient x delta
    from a plain autograd run, the re-checked ablations equal the exact path's, and over every ablation the
    estimate agrees with exact ablation at or above the written threshold (attribution.TRUST)."""
    from mechmem.analysis import ablation
    from mechmem.analysis.ablation import attribution as ablation_attribution
    from mechmem.analysis.patching.attribution import TRUST

    model = build_transformer(
        build_transformer_cfg(n_layers=3, n_heads=4, normalization_type="LN"),
        generator=torch.Generator().manual_seed(4),
    ).eval()
    tokens = torch.randint(6, (16, 9), generator=torch.Generator().manual_seed(5))
    reference = torch.randint(6, (24, 9), generator=torch.Generator().manual_seed(6))
    assert ablation.n_variants(model) == 18 > ablation_attribution.CHECK_VARIANTS
    exact = ablate_heads(model, tokens, last_logprob, methods=("mean",), reference=reference)
    result = ablation_attribution.attribute_ablation(model, tokens, last_logprob, reference=reference)
    assert result.baseline == pytest.approx(exact.baseline, abs=1e-6)

    def flat(r):  # [layer, heads + attn + mlp], the engine's order
        return torch.cat([r.heads[0], r.attn_layers[0, :, None], r.mlp_layers[0, :, None]], 1)

    names = ablation.variant_names(model)
    by_layer = [[n for n in names if n.startswith(f"L{layer}")] for layer in range(3)]
    is_exact = torch.tensor([[n in result.info["exact_variants"] for n in row] for row in by_layer])
    assert int(is_exact.sum()) == ablation_attribution.CHECK_VARIANTS
    torch.testing.assert_close(flat(result)[is_exact], flat(exact)[is_exact], atol=1e-5, rtol=0)
    # the others are gradient x (mean - clean), from plain autograd
    values = ablation_values(model, tokens, "mean", reference=reference)
    grads = _hooked_grads(model, tokens, last_logprob)
    expected = []
    for layer in range(3):
        z, mlp = f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_mlp_out"
        heads = ((values[z] - grads[z][0]) * grads[z][1]).sum((0, 1, 3))
        mlp_term = ((values[mlp] - grads[mlp][0]) * grads[mlp][1]).sum()
        expected.append(torch.cat([heads, heads.sum()[None], mlp_term[None]]))
    estimate = torch.stack(expected) + exact.baseline
    torch.testing.assert_close(flat(result)[~is_exact], estimate[~is_exact], atol=1e-5, rtol=1e-4)
    # agreement over every ablation (check = all of them)
    every = ablation_attribution.attribute_ablation(
        model, tokens, last_logprob, reference=reference, check=100
    )
    assert every.info["check"]["cells"] == 18 and every.info["check"]["pearson"] >= TRUST["pearson"]
    torch.testing.assert_close(flat(every), flat(exact), atol=1e-5, rtol=0)
    assert_no_hooks(model)


def test_attribution_ablation_falls_back_to_exact_when_the_check_fails(model, tokens, monkeypatch):
    from mechmem.analysis.ablation import attribution as ablation_attribution
    from mechmem.analysis.patching import attribution

    reference = torch.randint(6, (20, 9), generator=torch.Generator().manual_seed(2))
    exact = ablate_heads(model, tokens, last_logprob, methods=("mean",), reference=reference)
    monkeypatch.setitem(attribution.TRUST, "pearson", 1.5)  # no estimate can pass
    result = ablation_attribution.attribute_ablation(
        model, tokens, last_logprob, reference=reference, check=4
    )
    assert result.info["method"].startswith("exact (fallback") and result.info["check"]["trusted"] is False
    torch.testing.assert_close(result.heads, exact.heads, atol=0, rtol=0)
    torch.testing.assert_close(result.mlp_layers, exact.mlp_layers, atol=0, rtol=0)
    assert result.to_dict()["check"]["cells"] == 4
    assert_no_hooks(model)


@pytest.mark.parametrize("kind", ["attn_only", "hooks"])
def test_attribution_ablation_on_attention_only_and_hook_strategy_models(kind):
    """An attention-only model (no MLP ablations) and a model the engine runs on hooks (no replay): with every
    ablation in the exact sample, the result equals exact ablation and the check covers all of them."""
    from engine_cases import unsupported_model

    from mechmem.analysis import ablation
    from mechmem.analysis.ablation import attribution as ablation_attribution

    if kind == "attn_only":
        model = build_transformer(
            build_transformer_cfg(n_layers=3, d_mlp=None), generator=torch.Generator().manual_seed(7)
        ).eval()
    else:
        model = unsupported_model()
    tokens = torch.randint(6, (10, 9), generator=torch.Generator().manual_seed(8))
    reference = torch.randint(6, (14, 9), generator=torch.Generator().manual_seed(9))
    exact = ablate_heads(model, tokens, last_logprob, methods=("mean",), reference=reference)
    result = ablation_attribution.attribute_ablation(
        model, tokens, last_logprob, reference=reference, check=100
    )
    n = ablation.n_variants(model)
    assert result.info["check"]["cells"] == n == len(ablation.variant_names(model))
    assert (result.mlp_layers is None) == (kind == "attn_only")
    if result.info["method"].startswith("exact (fallback"):
        assert not result.info["check"]["trusted"]
    else:
        assert len(result.info["exact_variants"]) == n
    torch.testing.assert_close(result.heads, exact.heads, atol=1e-5, rtol=0)
    torch.testing.assert_close(result.attn_layers, exact.attn_layers, atol=1e-5, rtol=0)
    assert_no_hooks(model)
