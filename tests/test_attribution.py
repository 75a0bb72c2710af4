"""Attribution patching: exact where the metric is linear in the activation, first-order exact for small
changes, the AtP* query/key fix helps under saturated attention,
and agreement with exact patching on random models.

Thresholds were fixed before the tests were first run on these models."""

import pytest
import torch
from engine_cases import MODELS, random_pair, unsupported_model
from helpers import assert_no_hooks, build_model

from mechmem.analysis.patching import SWEEPS, Patcher
from mechmem.analysis.patching.attribution import Attributor, agreement, attribute_sweeps
from mechmem.errors import MechmemError

DIRECTIONS = ("denoising", "noising")


pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_every_estimate_carries_its_measured_agreement():
    """`result.check` is computed: exact patching of the sampled cells gives the same Pearson correlation."""
    from mechmem.analysis.patching.attribution import judge, sample_cells

    model = build_model(1, n_layers=2, d_model=16, n_heads=2, d_mlp=24, normalization_type="LN", d_vocab=11)
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    patcher, att = both(model, pair)
    for name in ("resid_pre", "attn_head_out_by_pos"):
        est, exact = att.sweep(name), patcher.sweep(name)
        effects = (est.values - est.baseline).flatten()
        cells = sample_cells(effects)
        assert len(cells) == min(len(effects), 32) and torch.equal(cells, sample_cells(effects))
        again = judge(effects[cells], (exact.values - exact.baseline).flatten()[cells])
        assert est.check["pearson"] == pytest.approx(again["pearson"], abs=1e-6)
        assert est.check["trusted"] == (again["pearson"] >= 0.8) and est.check["cells"] == len(cells)
        assert est.to_dict()["check"] == est.check and est.method.startswith("first-order")


def test_untrusted_estimates_fall_back_to_exact_patching(monkeypatch):
    """Below the threshold (raised out of reach here), `attribute_sweeps` returns exact patching, labelled."""
    from mechmem.analysis.patching import attribution

    model = build_model(1, n_layers=2, d_mlp=None, normalization_type="LN", d_vocab=11, n_ctx=8)
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    kept = attribute_sweeps(model, pair, ["attn_out"])["attn_out"]
    assert kept.method.startswith("first-order")
    monkeypatch.setitem(attribution.TRUST, "pearson", 1.5)
    res = attribute_sweeps(model, pair, ["attn_out", "resid_pre"])
    exact = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    for name, r in res.items():
        assert r.method.startswith("exact (fallback") and r.check["trusted"] is False
        torch.testing.assert_close(r.values, exact.sweep(name).values)


def test_integrated_gradients_complete_at_the_embedding_and_exact_where_linear():
    """IG along the embedding path: the resid_pre cells of layer 0 sum to clean - corrupted (completeness, up
    to the midpoint rule's error); where the metric is linear in an activation IG is exact, like first
    order."""
    model = build_model(
        1, n_layers=2, d_model=16, n_heads=2, d_mlp=24, normalization_type="LN", act_fn="gelu", d_vocab=11
    )
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    gap = None
    errors = {}
    for steps in (0, 32):
        att = Attributor(model, pair.clean, pair.corrupted, pair=pair, steps=steps, qk_exact=False)
        res = att.sweep("resid_pre", check=False)
        gap = res.clean - res.corrupted
        errors[steps] = abs(float((res.values[0] - res.corrupted).sum()) - gap)
    assert errors[32] <= 0.02 * abs(gap) and errors[32] < errors[0], errors
    linear = build_model(1, n_layers=1, d_mlp=None, normalization_type=None, d_vocab=11, n_ctx=8)
    exact = Patcher(linear, pair.clean, pair.corrupted, pair=pair).sweep("attn_head_out_by_pos")
    ig = Attributor(linear, pair.clean, pair.corrupted, pair=pair, steps=4).sweep("attn_head_out_by_pos")
    torch.testing.assert_close(ig.values, exact.values, atol=1e-5, rtol=0)
    assert ig.method.startswith("integrated gradients (4 steps)") and ig.check["trusted"]
    with pytest.raises(MechmemError):
        Attributor(linear, pair.clean, pair.corrupted, pair=pair, steps=-1)
    assert_no_hooks(model)


def test_edge_attribution_flags_itself_and_falls_back(monkeypatch):
    """Circuit discovery stores EAP's agreement with the exact scores; below the threshold every edge is
    scored exactly (and the method says so); EAP-IG, like EAP, is exact on edges into the logits without a
    final norm."""
    from mechmem.analysis.circuits import EdgePatcher
    from mechmem.analysis.circuits.discovery import circuit_pair, discover_circuit, edge_attribution
    from mechmem.analysis.patching import attribution

    model = build_model(4, n_ctx=8)  # no LayerNorm: the logits are linear in the final residual stream
    pair, _ = circuit_pair(model, None, 8, generator=torch.Generator().manual_seed(0))
    patcher = EdgePatcher(model, pair, "mean")
    exact = patcher.exact(patcher.graph.edges).mean(1)
    into_logits = torch.tensor([e.port.node.kind == "logits" for e in patcher.graph.edges])
    ig = edge_attribution(patcher, steps=4)
    torch.testing.assert_close(ig[into_logits], exact[into_logits], atol=1e-4, rtol=1e-4)
    monkeypatch.setitem(attribution.TRUST, "pearson", -2.0)  # always trusted: the sample stays a sample
    part = discover_circuit(model, pair, ablation="mean", max_exact=20)  # 61 edges: 20 + 32 scored exactly
    check, n_exact = part.attribution_check, int(part.exact.sum())
    assert check["cells"] == n_exact == 52
    again = attribution.judge(part.attribution[part.exact], exact[part.exact])
    assert check["pearson"] == pytest.approx(again["pearson"], abs=1e-4)
    monkeypatch.setitem(attribution.TRUST, "pearson", 1.5)
    fallback = discover_circuit(model, pair, ablation="mean", max_exact=20)
    assert bool(fallback.exact.all()) and "of every edge (EAP-IG (4 steps) agreed at" in fallback.method
    torch.testing.assert_close(fallback.scores, exact, atol=1e-5, rtol=1e-5)
    assert fallback.to_dict()["attribution_check"]["trusted"] is False
    assert_no_hooks(model)


def test_attribution_on_the_hook_strategy_equals_the_replay():
    """The engine's gradients on hooks (what a model the replay cannot run gets) give the same first-order
    estimates as on the replay; on such a model the AtP* fix is off and the method says so."""
    model = build_model(1, n_layers=2, d_model=16, n_heads=2, d_mlp=24, normalization_type="LN", d_vocab=11)
    pair = random_pair(5, 6, 11, torch.Generator().manual_seed(1))
    replay = Attributor(model, pair.clean, pair.corrupted, pair=pair, qk_exact=False)
    hooks = Attributor(model, pair.clean, pair.corrupted, pair=pair, qk_exact=False)
    hooks.engine.replay = None  # as on a model the replay cannot run
    for name in sweeps_of(model):
        torch.testing.assert_close(
            hooks.sweep(name, check=False).values,
            replay.sweep(name, check=False).values,
            atol=1e-5,
            rtol=1e-4,
        )
    other = unsupported_model()
    pair = random_pair(4, 6, 6, torch.Generator().manual_seed(2))
    att = Attributor(other, pair.clean, pair.corrupted, pair=pair)
    res = att.sweep("attn_head_out_by_pos")
    assert att.engine.strategy == "hooks" and "AtP*" not in res.method
    assert res.check["cells"] == res.values.numel() == 24  # at most 32 cells: all of them are checked
    assert_no_hooks(other)
