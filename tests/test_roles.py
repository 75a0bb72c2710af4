"""The head-role classifier: synthetic evidence with known labels, and a planted 2-layer model with a recall circuit
(previous-token head + induction-style recall head) and an elimination head, in both head orders."""

import pytest
import torch

from mechmem.analysis.roles import RoleEvidence, RoleThresholds, classify_roles, measure_role_evidence
from mechmem.models.adapter import TransformerConfig, build_transformer
from mechmem.papers.permutation.experiments import last_step_groups, role_pairs
from mechmem.papers.permutation.task import PermutationConfig, PermutationTask
from helpers import assert_no_hooks


def evidence(rec, eli):
    return RoleEvidence(torch.tensor(rec, dtype=torch.float), torch.tensor(eli, dtype=torch.float))


def test_labels_from_synthetic_evidence():
    result = classify_roles(evidence([[0.05, 0.8, 0.5, 0.0]], [[0.6, 0.02, 0.45, 0.01]]))
    assert result.labels == [["elimination", "recall", "shared", "unused"]]
    assert result.heads_with("recall") == [(0, 1)]
    assert result.split_found  # exactly one recall and one elimination head (the shared one does not count)
    swapped = classify_roles(evidence([[0.8, 0.05]], [[0.02, 0.6]]))
    assert swapped.labels == [["recall", "elimination"]] and swapped.split_found


def test_thresholds_are_used_and_reported():
    ev = evidence([[0.15, 0.0]], [[0.0, 0.0]])
    assert classify_roles(ev).labels == [["recall", "unused"]]
    strict = RoleThresholds(min_score=0.2, margin=0.1)
    result = classify_roles(ev, strict)
    assert result.labels == [["unused", "unused"]]
    assert result.to_dict()["thresholds"] == {"min_score": 0.2, "margin": 0.1}
    assert result.to_dict()["basis"] == "ablation damage"


def test_transfer_scores_take_precedence_over_damage():
    # Damage says both heads matter for both groups (a shared MLP downstream); transfer separates them.
    ev = RoleEvidence(torch.tensor([[0.8, 0.8]]), torch.tensor([[0.7, 0.6]]),
                      transfer_recall=torch.tensor([[0.02, 0.9]]), transfer_elimination=torch.tensor([[0.7, 0.0]]))
    result = classify_roles(ev)
    assert ev.basis == "patching transfer"
    assert result.labels == [["elimination", "recall"]]
    with pytest.raises((ValueError, TypeError)):
        RoleEvidence(torch.zeros(1, 2), torch.zeros(1, 2), transfer_recall=torch.zeros(1, 2))


def test_evidence_shapes_are_validated():
    # jaxtyping's annotation check (a TypeError) fires under pytest; __post_init__ (ValueError) otherwise.
    with pytest.raises((ValueError, TypeError)):
        RoleEvidence(torch.zeros(1, 2), torch.zeros(2, 1))
    with pytest.raises((ValueError, TypeError)):
        RoleEvidence(torch.zeros(1, 2), torch.zeros(1, 2), {"bound": torch.zeros(2)})


def planted_permutation_model(v: int, *, recall_head: int, c: float = 10.0, e: float = 4.0, r: float = 2.0):
    """Layer 0 head 0 copies the previous token into PREV; layer 1 has an elimination head (uniform over the y
    positions, writes -e * token into OUT) and a recall head (matches the current token against PREV at y positions,
    writes +r * token into OUT); head `recall_head` of layer 1 is the recall head. W_U reads OUT (token 0 barred)."""
    dv, t = v + 1, 2 * v - 1
    tok, pos, prev, out = slice(0, dv), slice(dv, dv + t), slice(dv + t, 2 * dv + t), slice(2 * dv + t, 3 * dv + t)
    cfg = TransformerConfig(n_layers=2, d_model=3 * dv + t, n_heads=2, d_head=max(dv + 1, t + 1), d_vocab=dv,
                            n_ctx=t, d_mlp=None)
    model = build_transformer(cfg, generator=torch.Generator().manual_seed(0))
    eye_v, eye_t = torch.eye(dv), torch.eye(t)
    odd = (torch.arange(t) % 2 == 1).float()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.W_E[:, tok] = eye_v
        model.pos_embed.W_pos[:, pos] = eye_t
        model.unembed.W_U[out, :] = c * eye_v
        model.unembed.b_U[0] = -100.0
        a0, a1 = model.blocks[0].attn, model.blocks[1].attn
        a0.W_Q[0, pos, 1 : t + 1] = c * eye_t  # query t looks for key t - 1
        a0.W_K[0, pos, 1 : t + 1] = c * torch.roll(eye_t, 1, dims=1)
        a0.W_V[0, tok, :dv] = eye_v
        a0.W_O[0, :dv, prev] = eye_v
        elim = 1 - recall_head
        a1.W_Q[elim, pos, 0] = c  # every query scores odd (y) keys c^2
        a1.W_K[elim, pos, 0] = c * odd
        a1.W_V[elim, tok, :dv] = eye_v
        a1.W_O[elim, :dv, out] = -e * eye_v
        a1.W_Q[recall_head, tok, :dv] = c * eye_v  # token match against PREV: +c^2
        a1.W_K[recall_head, prev, :dv] = c * eye_v
        a1.W_Q[recall_head, pos, dv] = c * 2**0.5  # odd (y) keys: +2c^2, so a matching y wins by c^2
        a1.W_K[recall_head, pos, dv] = c * 2**0.5 * odd
        a1.W_V[recall_head, tok, :dv] = eye_v
        a1.W_O[recall_head, :dv, out] = r * eye_v
    return model


@pytest.fixture(scope="module")
def groups():
    task = PermutationTask(PermutationConfig(vocab_size=4))
    g = torch.Generator().manual_seed(1)
    return task, last_step_groups(task, 200, generator=g), role_pairs(task, 200, generator=g)


@pytest.mark.parametrize("recall_head", [1, 0])
def test_planted_roles_are_found_in_either_head_order(groups, recall_head):
    task, g, (recall_pair, elimination_pair) = groups
    model = planted_permutation_model(4, recall_head=recall_head)
    logits = model(g["tokens"])[:, -1]
    assert (logits.argmax(-1) == g["targets"]).float().mean() > 0.99  # the planted model solves both groups
    keys = {k: g[k] for k in ("bound", "match", "other_y", "other_x", "self")}
    pos = torch.full((len(g["targets"]),), task.seq_len - 1)
    ev = measure_role_evidence(model, g["tokens"], pos, g["targets"], g["repeat"], keys)
    result = classify_roles(ev)
    layer1 = ["elimination", "elimination"]
    layer1[recall_head] = "recall"
    assert result.labels == [["recall", "unused"], layer1]
    assert result.split_found is False  # the previous-token head is part of the recall circuit too
    assert ev.attention["bound"][1, recall_head] > 0.99
    elim = 1 - recall_head
    assert ev.attention["other_y"][1, elim] == pytest.approx(2 / 3, abs=1e-3)  # uniform over the 3 earlier y's
    assert ev.baseline_recall > 0.99 and ev.baseline_elimination > 0.99
    # Patching transfer: only the heads that carry each kind of information move the answer; the previous-token
    # head's output is the same in both runs of each pair, so it is no longer counted as a recall head.
    ev = measure_role_evidence(model, g["tokens"], pos, g["targets"], g["repeat"], keys,
                               recall_pair=recall_pair, elimination_pair=elimination_pair)
    assert classify_roles(ev).labels == [["unused", "unused"], layer1]
    assert classify_roles(ev).split_found
    assert ev.transfer_recall[1, recall_head] > 0.9 and ev.transfer_elimination[1, elim] > 0.9
    assert_no_hooks(model)
