"""Birth models and probes: the TL model equals the paper's equations, exactly the right parameters train,
the memory probes find planted memories, and the task's metrics and presets work end to end."""

import math

import pytest
import torch

from mechmem.checkpoint import load_checkpoint
from mechmem.models.transformer import build_transformer
from mechmem.models.weights import canonical_parameters
from mechmem.tasks import build_task, get_preset
from mechmem.tasks.birth.models import full_config, simplified_config
from mechmem.tasks.birth.probes import attention_probes, wk1_recall, wk2_recall, wo2_recall
from mechmem.tasks.birth.task import BirthConfig
from mechmem.training import TrainConfig, train

N = 65


def simplified(**kw):
    args = {"d_vocab": N, "n_ctx": 16, "d_model": 16}
    args.update(kw)
    return build_transformer(simplified_config(**args), generator=torch.Generator().manual_seed(0))


def paper_forward(model, tokens, ffn):
    """The simplified model written out as in the paper / the authors' code
    (column convention turned into rows)."""
    d = model.cfg.d_model
    x = model.W_E[tokens] + model.W_pos[: tokens.shape[1]]
    mask = torch.triu(torch.full((tokens.shape[1],) * 2, float("-inf")), diagonal=1)
    for layer in range(2):
        attn = model.blocks[layer].attn
        q, k, v = x, x @ attn.W_K[0], x @ attn.W_V[0]  # W_Q is the identity
        scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, -1)
        x = x + scores @ v @ attn.W_O[0]
    if ffn:
        x = x + x @ model.blocks[1].mlp.W_in  # W_F
    return x @ model.W_U


@pytest.mark.parametrize("ffn", [False, True])
def test_simplified_model_is_the_papers_model(ffn):
    model = simplified(ffn=ffn)
    for name, p in canonical_parameters(model).items():  # random biases would show up if the model used them
        if "mlp.W_in" in name and name.startswith("blocks.1"):
            torch.nn.init.normal_(p, std=0.3)
    assert torch.equal(model.blocks[0].attn.W_Q[0], torch.eye(16))
    tokens = torch.randint(0, N, (3, 16), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(model(tokens), paper_forward(model, tokens, ffn), atol=1e-4)


def one_step_changes(model, task_config, frozen_until=()):
    before = {n: p.detach().clone() for n, p in canonical_parameters(model).items()}
    task = build_task("birth", task_config)
    cfg = TrainConfig(
        steps=1,
        batch_size=8,
        lr=0.1,
        optimizer="sgd",
        weight_decay=1e-4,
        eval_samples=8,
        frozen_until=frozen_until,
    )
    train(model, task, cfg, model_config=model.mechmem_config, progress=False)
    return {n for n, p in canonical_parameters(model).items() if not torch.equal(p, before[n])}


TASK = BirthConfig(seq_len=16, n_triggers=3, fixed_triggers=True, head_only_loss=False)


def test_exactly_the_simplified_parameters_train():
    changed = one_step_changes(simplified(freeze_embeddings=True, freeze_unembedding=True), TASK)
    assert changed == {"blocks.0.attn.W_K", "blocks.1.attn.W_K", "blocks.1.attn.W_O"}


def test_ffn_and_embeddings_train_when_asked():
    changed = one_step_changes(simplified(ffn=True), TASK)
    assert changed == {
        "blocks.0.attn.W_K",
        "blocks.1.attn.W_K",
        "blocks.1.attn.W_O",
        "blocks.1.mlp.W_in",
        "embed.W_E",
        "unembed.W_U",
    }


def test_frozen_until_holds_a_matrix():
    model = simplified(freeze_embeddings=True, freeze_unembedding=True)
    changed = one_step_changes(model, TASK, frozen_until=(("blocks.0.attn.W_K", 300),))
    assert changed == {"blocks.1.attn.W_K", "blocks.1.attn.W_O"}


@pytest.mark.parametrize("n_layers", [1, 2])
def test_full_model_trains_everything_but_biases(n_layers):
    model = build_transformer(full_config(d_vocab=N, n_ctx=16, d_model=16, n_layers=n_layers))
    changed = one_step_changes(model, TASK)
    expected = {
        n
        for n, _ in canonical_parameters(model).items()
        if ".b_" not in n or n.startswith("blocks.") and ".ln" in n
    }
    expected = {
        n for n in expected if not n.endswith((".b_Q", ".b_K", ".b_V", ".b_O", ".b_in", ".b_out", "b_U"))
    }
    assert changed == expected
    assert model.cfg.normalization_type == "LN" and model.cfg.n_layers == n_layers


def planted(d=72, T=16):
    """Orthonormal embeddings and positions with hand-set memories: W_V^2 W_O^2 = I with W_U = W_E^T
    (copying), W_V^1 W_O^1 = W_K^2 = I (keys are the previous token),
    W_K^1 = sum_t p_{t-1}^T p_t (previous position)."""
    model = simplified(d_model=d, n_ctx=T)
    basis = torch.linalg.qr(torch.randn(d, d, generator=torch.Generator().manual_seed(0)))[0]
    with torch.no_grad():
        model.W_E.copy_(basis[:N])
        model.W_pos.copy_(basis[:T])
        model.W_U.copy_(basis[:N].T)
        for layer in range(2):
            for name in ("W_V", "W_O", "W_K"):
                getattr(model.blocks[layer].attn, name)[0].copy_(torch.eye(d))
        pos = basis[:T]
        model.blocks[0].attn.W_K[0].copy_(pos[:-1].T @ pos[1:])
    return model


def test_probes_find_planted_memories():
    model = planted()
    tokens = torch.arange(N)
    assert wo2_recall(model, tokens) == 1.0
    assert wk2_recall(model, tokens[:5]) == 1.0
    assert wk1_recall(model) == 1.0
    # Memories of the neighbour (k -> k+1 in the embedding basis, minus half the identity) recall nothing.
    basis = torch.linalg.qr(torch.randn(72, 72, generator=torch.Generator().manual_seed(0)))[0]
    wrong = basis.T @ torch.roll(torch.eye(72), 1, dims=1) @ basis - 0.5 * torch.eye(72)
    with torch.no_grad():
        model.blocks[1].attn.W_O[0].copy_(wrong)
        model.blocks[1].attn.W_K[0].copy_(wrong)
        model.blocks[0].attn.W_K[0].copy_(torch.eye(72))  # attends to the same position, not the previous
    assert wo2_recall(model, tokens) == 0.0
    assert wk2_recall(model, tokens[:5]) == 0.0
    assert wk1_recall(model) == 0.0


def test_attention_probes_on_hand_made_patterns():
    tokens = torch.tensor([[3, 1, 7, 4, 1, 7]])
    targets = torch.tensor([[1, 7, 4, 1, 7, 0]])
    counter = torch.tensor([[0, 1, 0, 0, 2, 0]])
    prev = torch.zeros(1, 6, 6)
    prev[0, torch.arange(6), (torch.arange(6) - 1).clamp_min(0)] = 1.0
    induction = torch.zeros(1, 6, 6)
    induction[0, 4, 2] = 1.0  # at the 2nd "1", attend to the token after the first "1" (a 7)
    assert attention_probes([prev, induction], tokens, targets, counter) == {
        "attn0_prev": 1.0,
        "attn1_induction": 1.0,
    }
    assert attention_probes([prev, prev], tokens, targets, counter)["attn1_induction"] == 0.0


def test_quick_preset_trains_and_checkpoints(tmp_path):
    preset = get_preset("birth", "quick")
    assert (
        preset.task.fixed_triggers and preset.train.optimizer == "sgd" and preset.train.weight_decay == 1e-4
    )
    task_cfg = preset.task.replace(seq_len=16)
    model_cfg = preset.model.replace(n_ctx=16, d_model=16, d_head=16)
    model = build_transformer(model_cfg, generator=torch.Generator().manual_seed(0))
    cfg = preset.train.replace(steps=3, batch_size=8, eval_every=2, eval_samples=16)
    result = train(
        model, build_task("birth", task_cfg), cfg, model_config=model_cfg, out_dir=tmp_path, progress=False
    )
    first = result.history[0]
    for key in (
        "icl_acc",
        "first_acc",
        "global_loss",
        "wo2_recall",
        "wk2_recall",
        "wk1_recall",
        "wk1_recall_64",
        "eval_icl_acc",
        "attn0_prev",
        "attn1_induction",
    ):
        assert key in first
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt.task_name == "birth" and ckpt.task.config == task_cfg
    assert "eval_icl_acc" in ckpt.task.headline(ckpt.metrics)


def test_ood_and_ffn_metrics():
    task = build_task("birth", BirthConfig(seq_len=16, n_triggers=2, outputs="ood"))
    model = simplified(ffn=True)
    out = task.evaluate(model, generator=torch.Generator().manual_seed(0), n=8)
    assert "eval_ood_icl_acc" in out
    assert task.probe_tokens()["output_tokens"].tolist() == list(range(48))
    assert task.probes(model)["wf_kl"] > 0


@pytest.mark.slow
def test_quick_preset_reaches_the_done_when_numbers():
    torch.set_num_threads(1)
    preset = get_preset("birth", "quick")
    model = build_transformer(preset.model, generator=torch.Generator().manual_seed(0))
    result = train(
        model, build_task("birth", preset.task), preset.train, model_config=preset.model, progress=False
    )
    last = result.history[-2]  # the final record has evaluation metrics only
    assert last["icl_acc"] >= 0.98 and result.summary["eval_icl_acc"] >= 0.97
    assert last["wo2_recall"] >= 0.95 and last["wk2_recall"] >= 0.95 and last["wk1_recall_64"] >= 0.8


def test_probes_equal_their_definitions_on_a_random_model():
    """The toolkit-backed probes equal the direct constructions of Bietti et al.
    (recall_rate on raw weights)."""
    from mechmem.analysis.probes import recall_rate
    from mechmem.tasks.birth.probes import wf_kl

    model = simplified(ffn=True, d_model=32, n_ctx=16)
    with torch.no_grad():
        for layer in range(2):
            model.blocks[layer].attn.W_K.normal_(generator=torch.Generator().manual_seed(layer))
        model.blocks[1].mlp.W_in.normal_(generator=torch.Generator().manual_seed(5))
    a0, a1 = model.blocks[0].attn, model.blocks[1].attn
    toks = torch.arange(10)
    keys = model.W_E[toks] @ a0.W_V[0] @ a0.W_O[0] @ a1.W_K[0]
    direct_wk2 = recall_rate(model.W_E[toks] @ a1.W_Q[0], torch.eye(32), keys, torch.arange(10))
    assert wk2_recall(model, toks) == direct_wk2
    pos = model.W_pos
    direct_wk1 = recall_rate(pos[1:] @ a0.W_Q[0], torch.eye(32), pos[:-1] @ a0.W_K[0], torch.arange(15))
    assert wk1_recall(model) == direct_wk1
    bigram = torch.softmax(torch.randn(N, N, generator=torch.Generator().manual_seed(2)), -1)
    logits = model.W_E[toks] @ model.blocks[1].mlp.W_in @ model.W_U
    direct_kl = torch.nn.functional.kl_div(logits.log_softmax(-1), bigram[toks], reduction="batchmean")
    assert abs(wf_kl(model, toks, bigram) - float(direct_kl)) < 1e-4
