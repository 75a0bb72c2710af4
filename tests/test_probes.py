"""Memory probes: outer-product memories recalled at 1.0,
random near chance, planted circuits found exactly."""

import pytest
import torch
from helpers import build_transformer_cfg

from mechmem.analysis.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_induction_model
from mechmem.analysis.probes import (
    builtin_probes,
    empirical_bigram,
    ffn_bigram_probe,
    ov_copy_probe,
    plot_probes,
    recall_rate,
    recall_scores,
)
from mechmem.models.backend import FactoredMatrix, register_activation
from mechmem.models.transformer import build_transformer


@pytest.fixture(scope="module")
def planted():
    return planted_induction_model()


def test_sum_of_outer_products_is_recalled_and_random_is_chance():
    g = torch.Generator().manual_seed(0)
    n, d = 32, 128
    u, v = torch.randn(n, d, generator=g) / d**0.5, torch.randn(n, d, generator=g) / d**0.5
    targets = torch.randperm(n, generator=g)
    memory = u.T @ v[targets]  # sum_i u_i^T v_{t(i)}: maps u_i onto v_{t(i)}
    assert recall_rate(u, memory, v, targets) == 1.0
    chance = [recall_rate(u, torch.randn(d, d, generator=g), v, targets) for _ in range(20)]
    assert sum(chance) / len(chance) < 3 / n


def test_factored_matrix_gives_the_dense_scores():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 3, generator=g), torch.randn(3, 8, generator=g)
    u, v = torch.randn(5, 8, generator=g), torch.randn(7, 8, generator=g)
    torch.testing.assert_close(recall_scores(u, FactoredMatrix(a, b), v), recall_scores(u, a @ b, v))


def test_planted_memories_found_exactly(planted):
    recall = {p.name: p.recall for p in builtin_probes(planted).probes}
    (pl, ph), (il, ih) = PREVIOUS_TOKEN_HEAD, INDUCTION_HEAD
    assert recall[f"qk_prev_pos.L{pl}H{ph}"] == 1.0
    assert recall[f"ov_copy.L{il}H{ih}"] == 1.0
    assert recall[f"qk_token.L{il}H{ih}<-L{pl}H{ph}"] == 1.0
    assert recall["qk_prev_pos.L0H0"] == 0.0  # the attend-to-self distractor points at t, never t - 1
    others = [
        r
        for name, r in recall.items()
        if name not in {f"qk_prev_pos.L{pl}H{ph}", f"ov_copy.L{il}H{ih}", f"qk_token.L{il}H{ih}<-L{pl}H{ph}"}
    ]
    assert max(others) < 0.1


def test_first_positions_beyond_the_context_add_no_probe(planted):
    """The probe scripts ask for the first 64 positions on every model; a shorter context is no error."""
    n_ctx = planted.cfg.n_ctx
    names = {p.name for p in builtin_probes(planted).probes}
    assert {p.name for p in builtin_probes(planted, first_positions=(n_ctx, 64)).probes} == names
    inside = {p.name for p in builtin_probes(planted, first_positions=(n_ctx - 1,)).probes} - names
    heads = [(layer, head) for layer in range(2) for head in range(planted.cfg.n_heads)]
    assert inside == {f"qk_prev_pos.L{layer}H{head}.first{n_ctx - 1}" for layer, head in heads}


def test_ov_probe_equals_dense_product():
    model = build_transformer(build_transformer_cfg(d_vocab=6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        dense = model.W_E @ model.W_V[1, 1] @ model.W_O[1, 1] @ model.W_U
    expected = float((dense.argmax(-1) == torch.arange(6)).float().mean())
    assert ov_copy_probe(model, 1, 1).recall == pytest.approx(expected)


def test_ffn_storing_log_bigrams_has_zero_kl():
    register_activation("linear", lambda x: x)  # a purely linear MLP (the Birth paper registers the same)
    v = 6
    model = build_transformer(
        build_transformer_cfg(n_layers=1, d_model=v, n_heads=1, d_vocab=v, d_mlp=v, act_fn="linear"),
        generator=torch.Generator().manual_seed(3),
    )
    bigram = torch.rand(v, v, generator=torch.Generator().manual_seed(4)).softmax(-1)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.W_E.copy_(torch.eye(v))
        model.W_U.copy_(torch.eye(v))
        model.blocks[0].mlp.W_in.copy_(bigram.log())
        model.blocks[0].mlp.W_out.copy_(torch.eye(v))
    good = ffn_bigram_probe(model, 0, bigram)
    assert good.recall == 1.0 and good.extra["kl"] == pytest.approx(0.0, abs=1e-5)
    with torch.no_grad():
        model.blocks[0].mlp.W_in.zero_()
    flat = ffn_bigram_probe(model, 0, bigram)
    uniform_kl = (bigram * (bigram * v).log()).sum(-1).mean()
    assert flat.extra["kl"] == pytest.approx(float(uniform_kl), abs=1e-5)


def test_empirical_bigram_counts():
    tokens = torch.tensor([[0, 1, 0]])
    targets = torch.tensor([[1, 0, 2]])
    b = empirical_bigram(tokens, targets, 3, 3)
    torch.testing.assert_close(b, torch.tensor([[0, 0.5, 0.5], [1, 0, 0], [1 / 3, 1 / 3, 1 / 3]]))


def test_serialisation_and_plot(planted):
    result = builtin_probes(planted)
    d = result.to_dict()
    assert {"name", "matrix", "recall"} <= set(d["probes"][0])
    assert len(d["probes"]) == 2 * 3 * 2 + 3 * 3  # ov + qk_prev_pos per head, qk_token per (L1 head, L0 head)
    assert type(plot_probes(result)).__name__ == "Figure"


@pytest.mark.parametrize("preset", ["quick", "quick_ffn"])
def test_builtin_probes_equal_the_birth_task_probes(preset):
    from mechmem.models import build_model
    from mechmem.tasks import build_task, get_preset

    spec = get_preset("birth", preset)
    task = build_task("birth", spec.task)
    model = build_model(spec.model, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # plant the previous-position memory in W_K^1 (W_Q^1 is the identity)
        pos = model.W_pos
        model.blocks[0].attn.W_K[0] = 5.0 * torch.linalg.lstsq(pos[:-1], pos[1:]).solution
    sets = task.probe_tokens()
    ours = builtin_probes(
        model,
        bigram=task.sampler.bigram.float(),
        tokens=sets["output_tokens"],
        key_tokens=sets["trigger_tokens"],
        ffn_tokens=sets["non_trigger_tokens"],
        first_positions=(64,),
    )
    by_name = {p.name: p for p in ours.probes}
    theirs = task.probes(model)
    assert theirs["wk1_recall"] == by_name["qk_prev_pos.L0H0"].recall == 1.0
    assert theirs["wk1_recall_64"] == by_name["qk_prev_pos.L0H0.first64"].recall
    assert theirs["wo2_recall"] == by_name["ov_copy.L1H0"].recall
    assert theirs["wk2_recall"] == by_name["qk_token.L1H0<-L0H0"].recall
    if "wf_kl" in theirs:
        assert theirs["wf_kl"] == pytest.approx(by_name["ffn_bigram.L1"].extra["kl"], rel=1e-4)
