"""Every facts variant builds, agrees with the one functional forward pass, trains, saves and reloads."""

import pytest
import torch
from helpers import assert_no_hooks

from mechmem.checkpoint import load_checkpoint
from mechmem.models import build_model
from mechmem.models.backend import is_transformer_lens_model
from mechmem.models.facts import (
    FactsModelConfig,
    FactsTransformer,
    all_variants,
    build_facts_model,
    forward_params,
    init_params,
    model_params,
)
from mechmem.models.weights import canonical_parameters
from mechmem.tasks import build_task, get_preset
from mechmem.tasks.facts import generate_facts
from mechmem.training import TrainConfig, train

VARIANTS = all_variants()
INPUTS, LABELS = generate_facts(64, 32, 16)


def test_54_distinct_variants():
    assert len(VARIANTS) == 54 and len({v.name for v in VARIANTS}) == 54
    # TL expresses attn/uniform mixing with the MLP residual (2 x 8) and the 4 MLP-less attention variants.
    assert sum(v.tl_expressible for v in VARIANTS) == 2 * 8 + 4


@pytest.mark.parametrize("cfg", VARIANTS, ids=[v.name for v in VARIANTS])
def test_variant_matches_functional_forward(cfg):
    params = init_params(cfg, generator=torch.Generator().manual_seed(3))
    ref = forward_params(cfg, {k: v[None] for k, v in params.items()}, INPUTS)[0]
    last = forward_params(cfg, {k: v[None] for k, v in params.items()}, INPUTS, last_only=True)[0, :, 0]
    torch.testing.assert_close(last, ref[:, -1], atol=1e-5, rtol=1e-5)
    model = build_facts_model(cfg, generator=torch.Generator().manual_seed(3))
    assert is_transformer_lens_model(model) == cfg.tl_expressible
    torch.testing.assert_close(model(INPUTS)[:, -1], ref[:, -1], atol=1e-5, rtol=1e-5)
    for name, value in model_params(cfg, model).items():
        torch.testing.assert_close(value, params[name])
    # Parameters that are not part of the published model stay fixed at zero. Canonical names under either
    # backend (a TransformerLens 4 bridge names its parameters after the native modules), covering every
    # parameter the optimiser would see.
    named = canonical_parameters(model)
    assert {id(p) for p in named.values()} == {id(p) for p in model.parameters()}
    for name, p in named.items():
        if name not in params:
            assert not p.requires_grad and torch.count_nonzero(p) == 0, name


def test_hooks_follow_tl_names():
    cfg = FactsModelConfig(mixing="2emb", mlp_residual=False)
    model = build_facts_model(cfg, generator=torch.Generator().manual_seed(0))
    assert isinstance(model, FactsTransformer)
    _, cache = model.run_with_cache(INPUTS)
    for name in (
        "hook_embed",
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_attn_out",
        "blocks.0.hook_resid_mid",
        "blocks.0.mlp.hook_pre",
        "blocks.0.mlp.hook_post",
        "blocks.0.hook_mlp_out",
        "blocks.0.hook_resid_post",
        "ln_final.hook_normalized",
    ):
        assert cache[name].shape[:2] == (64, 2), name
    # 2Emb: the residual at the last position is the sum of the two position-specific embeddings.
    W_E, W_E2 = model.embed.W_E, model.embed.W_E2
    torch.testing.assert_close(cache["blocks.0.hook_resid_mid"][:, 1], W_E[INPUTS[:, 0]] + W_E2[INPUTS[:, 1]])
    # Without the MLP residual the stream after the block is the MLP output alone.
    torch.testing.assert_close(cache["blocks.0.hook_resid_post"], cache["blocks.0.hook_mlp_out"])
    # Patching the MLP output to zero leaves only the norm of zero -> logits equal the unembedding bias.
    out = model.run_with_hooks(
        INPUTS, fwd_hooks=[("blocks.0.hook_mlp_out", lambda x, hook: torch.zeros_like(x))]
    )
    torch.testing.assert_close(out, model.unembed.b_U.expand_as(out))
    assert_no_hooks(model)


def test_uniform_attention_pattern_is_half_half():
    cfg = FactsModelConfig(mixing="uniform")
    model = build_facts_model(cfg, generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(INPUTS)
    pattern = cache["blocks.0.attn.hook_pattern"][:, 0, -1]
    torch.testing.assert_close(pattern, torch.full_like(pattern, 0.5))


@pytest.mark.parametrize("mixing,residual", [("attn", True), ("2emb", False)])
def test_trains_saves_and_reloads(tmp_path, mixing, residual):
    cfg = FactsModelConfig(mixing=mixing, mlp_residual=residual)
    task = build_task("facts", {"n_facts": 32, "n_in": 32, "n_out": 16, "seed": 42})
    model = build_model(cfg, generator=torch.Generator().manual_seed(0))
    result = train(
        model,
        task,
        TrainConfig(steps=20, lr=1e-2, eval_every=10),
        model_config=cfg,
        out_dir=tmp_path,
        progress=False,
    )
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt.model_config == cfg and ckpt.task_name == "facts"
    tokens = task.train_batch(1, generator=torch.Generator()).tokens
    torch.testing.assert_close(ckpt.model(tokens), result.model(tokens))
    assert "facts_stored" in ckpt.metrics


def test_quick_preset_memorises(tmp_path):
    preset = get_preset("facts", "quick")
    task = build_task("facts", preset.task)
    model = build_model(preset.model, generator=torch.Generator().manual_seed(preset.train.seed))
    result = train(model, task, preset.train, model_config=preset.model, progress=False)
    assert result.summary["facts_stored"] == preset.task.n_facts
