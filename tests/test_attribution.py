"""Attribution patching: exact where the metric is linear in the activation, first-order exact for small
changes, the AtP* query/key fix helps under saturated attention,
and agreement with exact patching on random models.

Thresholds were fixed before the tests were first run on these models."""

import pytest
import torch
from helpers import assert_no_hooks, build_model
from test_patching import random_pair

from mechmem.analysis.attribution import Attributor, agreement, attribute_sweeps
from mechmem.analysis.patching import SWEEPS, Patcher
from mechmem.errors import MechmemError

DIRECTIONS = ("denoising", "noising")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def sweeps_of(model):
    return [n for n in SWEEPS if not (model.cfg.attn_only and SWEEPS[n].stage in ("resid_mid", "mlp_out"))]


def both(model, pair, **kw):
    return Patcher(model, pair.clean, pair.corrupted, pair=pair), Attributor(
        model, pair.clean, pair.corrupted, pair=pair, **kw
    )


def test_exact_where_the_metric_is_linear_in_the_activation():
    """1-layer attention-only, no norms: the logit difference is linear in the head outputs, attn_out, the
    pattern (z = pattern @ v) and resid_post, so first order is exact; resid_pre goes through the softmax."""
    model = build_model(1, n_layers=1, d_mlp=None, normalization_type=None, d_vocab=11, n_ctx=8)
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    patcher, att = both(model, pair)
    for name in sweeps_of(model):
        if name == "resid_pre":
            continue
        for direction in DIRECTIONS:
            exact, approx = patcher.sweep(name, direction), att.sweep(name, direction)
            assert approx.axes == exact.axes and approx.clean == exact.clean
            torch.testing.assert_close(approx.values, exact.values, atol=1e-5, rtol=0, msg=name)
    assert_no_hooks(model)


def test_first_order_exact_for_small_changes():
    """All token embeddings nearly equal: clean and corrupted runs differ slightly,
    so every cell of every sweep (LayerNorm, MLPs, 3 layers) is within 1% of the largest exact effect."""
    model = build_model(
        1, n_layers=3, d_model=16, n_heads=3, d_head=5, d_mlp=32, normalization_type="LN", d_vocab=11, n_ctx=8
    )
    with torch.no_grad():
        model.embed.W_E.copy_(model.embed.W_E[0] + 1e-3 * model.embed.W_E)
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    patcher, att = both(model, pair)
    for name in sweeps_of(model):
        for direction in DIRECTIONS:
            exact, approx = patcher.sweep(name, direction), att.sweep(name, direction)
            scale = float((exact.values - exact.baseline).abs().max())
            assert scale > 0 and float((approx.values - exact.values).abs().max()) <= 1e-2 * scale, name
    assert_no_hooks(model)


def test_qk_fix_helps_under_saturated_attention():
    """Queries and keys scaled up 20x saturate the softmax; AtP*'s exact pattern recomputation for the patched
    position is closer to exact patching of resid_pre than plain first order."""
    model = build_model(2, n_layers=1, d_mlp=None, normalization_type=None, d_vocab=11, n_ctx=8)
    with torch.no_grad():
        model.blocks[0].attn.W_Q.mul_(20)
        model.blocks[0].attn.W_K.mul_(20)
    pair = random_pair(8, 6, 11, torch.Generator().manual_seed(2))
    exact = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    for direction in DIRECTIONS:
        ref = exact.sweep("resid_pre", direction).values
        errors = []
        for qk in (False, True):
            att = Attributor(model, pair.clean, pair.corrupted, pair=pair, qk_exact=qk)
            errors.append(float((att.sweep("resid_pre", direction).values - ref).abs().sum()))
        assert errors[1] < 0.5 * errors[0], errors


@pytest.mark.parametrize("kind", ["attn-only", "rms-gelu"])
def test_agreement_with_exact_on_random_models(kind):
    """Random weights, random pairs: median Pearson correlation
    over sweeps and directions >= 0.5 (fixed first)."""
    from test_patching import MODELS

    model = build_model(1, d_vocab=11, n_ctx=8, **MODELS[kind])
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    patcher, att = both(model, pair)
    scores = [
        agreement(att.sweep(name, d), patcher.sweep(name, d))["pearson"]
        for name in sweeps_of(model)
        for d in DIRECTIONS
    ]
    assert torch.tensor(scores).nan_to_num(0).median() >= 0.5, scores
    assert_no_hooks(model)


def test_agreement_and_bad_input():
    model = build_model(1, n_layers=1, d_mlp=None, d_vocab=11, n_ctx=8)
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    res = attribute_sweeps(model, pair, ["attn_out"])["attn_out"]
    same = agreement(res, res, k=3)
    assert same["pearson"] == pytest.approx(1) and same["spearman"] == pytest.approx(1) and same["top_k"] == 1
    flipped = agreement(res, type(res)(**{**res.__dict__, "values": 2 * res.baseline - res.values}))
    assert flipped["pearson"] == pytest.approx(-1)
    with pytest.raises(MechmemError):
        not_differentiable = lambda x: torch.tensor(x[:, -1, 0].sum().item())
        Attributor(model, pair.clean, pair.corrupted, not_differentiable).sweep("attn_out")
    model.requires_grad_(False)  # frozen parameters: gradients w.r.t. activations still flow
    att = Attributor(model, pair.clean, pair.corrupted, pair=pair)
    torch.testing.assert_close(att.sweep("attn_out").values, res.values)
    for bad in (("nonsense", "denoising"), ("attn_out", "sideways"), ("mlp_out", "denoising")):
        with pytest.raises(MechmemError):
            att.sweep(*bad)
