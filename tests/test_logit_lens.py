"""Logit lens: the last stage equals the logits,
norms are recomputed per stage (TransformerLens GitHub #1076), planted stages."""

import pytest
import torch
from helpers import assert_no_hooks, build_transformer_cfg

from mechmem.analysis.heads import repeated_random_tokens
from mechmem.analysis.logit_lens import decode_residual, lens_stages, logit_lens, plot_logit_lens
from mechmem.analysis.planted import planted_induction_model
from mechmem.models.transformer import build_transformer


def tiny(norm, **kw):
    return build_transformer(
        build_transformer_cfg(normalization_type=norm, **kw), generator=torch.Generator().manual_seed(0)
    )


TOKENS = torch.randint(6, (8, 9), generator=torch.Generator().manual_seed(1))
TARGETS = torch.randint(6, (8, 9), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("norm", [None, "LN", "LNPre", "RMS"])
def test_last_stage_equals_model_logits(norm):
    model = tiny(norm)
    result = logit_lens(model, TOKENS, TARGETS, k=6)
    with torch.no_grad():
        probs = model(TOKENS).softmax(-1)
    assert result.stages[-1] == "resid_post.1"
    torch.testing.assert_close(
        result.target_prob[-1], probs.gather(-1, TARGETS[..., None])[..., 0], atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        result.top_probs[-1], probs.sort(-1, descending=True).values, atol=1e-6, rtol=0
    )
    assert_no_hooks(model)


def test_norm_is_recomputed_at_every_stage():
    model = tiny("LN")
    with torch.no_grad():
        model.ln_final.w.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(3))
        model.ln_final.b.normal_(generator=torch.Generator().manual_seed(4))
        _, cache = model.run_with_cache(TOKENS)
        resid = cache["blocks.0.hook_resid_pre"]
        # By hand: LayerNorm statistics of this residual,
        # then the final norm's affine map and the unembedding.
        centred = resid - resid.mean(-1, keepdim=True)
        normed = centred / (centred.pow(2).mean(-1, keepdim=True) + model.cfg.eps).sqrt()
        by_hand = (normed * model.ln_final.w + model.ln_final.b) @ model.W_U + model.b_U
        torch.testing.assert_close(decode_residual(model, resid), by_hand, atol=1e-5, rtol=0)
        # TL's own recomputing path agrees on every accumulated stage ...
        stack = cache.accumulated_resid(incl_mid=True)
        recomputed = cache.apply_ln_to_stack(stack, recompute_ln=True)
        ours = torch.stack([decode_residual(model, s) for s in stack])
        torch.testing.assert_close(ours, model.unembed(recomputed), atol=1e-5, rtol=0)
        # ... while reusing the final layer's cached scale
        # (the issue-1076 pitfall) gives different early lenses.
        stale = cache.apply_ln_to_stack(stack, recompute_ln=False)[0] * model.ln_final.w + model.ln_final.b
        assert (model.unembed(stale) - ours[0]).abs().max() > 1e-2


def test_stages_pre_mid_post():
    assert [s for s, _ in lens_stages(tiny(None))] == [
        "resid_pre.0",
        "resid_mid.0",
        "resid_post.0",
        "resid_pre.1",
        "resid_mid.1",
        "resid_post.1",
    ]
    assert [s for s, _ in lens_stages(tiny(None, d_mlp=None))] == [
        "resid_pre.0",
        "resid_post.0",
        "resid_pre.1",
        "resid_post.1",
    ]


def test_rank_and_prob_invariants():
    result = logit_lens(tiny("LN"), TOKENS, TARGETS, k=1)
    assert ((result.target_rank == 1) == (result.top_tokens[..., 0] == TARGETS)).all()
    assert (result.target_prob <= result.top_probs[..., 0] + 1e-6).all()
    assert ((result.target_rank >= 1) & (result.target_rank <= 6)).all()


def test_planted_answer_appears_only_after_the_induction_layer():
    model = planted_induction_model()
    seq = repeated_random_tokens(16, 10, 12, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(16, 19)
    mask[:, 10:] = 1.0
    result = logit_lens(model, seq[:, :-1], seq[:, 1:], mask)
    summary = result.summary()
    assert summary["resid_post.0"]["target_prob"] == pytest.approx(1 / 12, abs=1e-4)  # OUT block still empty
    assert summary["resid_post.1"]["target_prob"] > 0.99 and summary["resid_post.1"]["top1_acc"] == 1.0
    d = result.to_dict()
    assert set(d["stages"]) == {"resid_pre.0", "resid_post.0", "resid_pre.1", "resid_post.1"}
    assert d["stages"]["resid_post.1"]["target_prob_by_pos"][0] is None  # position 0 is masked out
    assert type(plot_logit_lens(result)).__name__ == "Figure"
    assert_no_hooks(model)
