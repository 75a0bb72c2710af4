"""Memory-recall probes of the simplified model (Bietti et al. 2023, Section 5) and attention-map probes.

Each weight matrix of the induction circuit should store a known associative memory; the probe asks whether
it does, with `mechmem.analysis.probes.recall_rate` (row-vector convention: score of output j for input i is
(u_i W) . v_j, recall = fraction of inputs whose best output is the target):

    W_O^2  inputs w_E(k) through W_V^2 W_O^2, outputs the unembedding columns W_U[:, j]; target j = k.
           (The induction head must copy the attended token to the output.)
    W_K^2  queries w_E(k) W_Q^2, keys w_E(k') W_V^1 W_O^1 W_K^2 (what the previous-token head wrote);
           target k' = k. Over the K triggers for fixed triggers, all tokens otherwise.
    W_K^1  queries p_t W_Q^1 (t = 1..T-1), keys p_s W_K^1 (s = 0..T-2); target s = t - 1. Also on the first 64
           positions, which are learned first.
    W_F    not a recall: mean over non-trigger tokens k of KL(pi_b(.|k) || softmax(w_E(k) W_F W_U)).

Caveat: the probes read single matrices on clean embeddings; a recall of 1 says the memory is there, not that
the forward pass uses it.
"""

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.probes import (
    ffn_bigram_probe,
    ov_copy_probe,
    qk_previous_position_probe,
    qk_token_probe,
)
from mechmem.models.parts import model_device


@torch.no_grad()
def wo2_recall(model: torch.nn.Module, tokens: Int[Tensor, " n"]) -> float:
    """Recall of W_O^2: does w_E(k) W_V^2 W_O^2 W_U score token k highest among all N outputs?"""
    return ov_copy_probe(model, 1, 0, tokens).recall


@torch.no_grad()
def wk2_recall(model: torch.nn.Module, tokens: Int[Tensor, " n"]) -> float:
    """Recall of W_K^2: does query w_E(k) match the key of the previous-token head's output for k best?"""
    return qk_token_probe(model, 1, 0, source=(0, 0), tokens=tokens).recall


@torch.no_grad()
def wk1_recall(model: torch.nn.Module, n_positions: int | None = None) -> float:
    """Recall of W_K^1 over the first `n_positions` positions: does p_t attend most to p_{t-1}?"""
    return qk_previous_position_probe(model, 0, 0, n_positions).recall


@torch.no_grad()
def wf_kl(
    model: torch.nn.Module, tokens: Int[Tensor, " n"], bigram: Float[Tensor, "d_vocab d_vocab"]
) -> float:
    """Mean KL(pi_b(.|k) || softmax(w_E(k) W_F W_U)) over `tokens`, W_F the last layer's MLP."""
    return ffn_bigram_probe(model, len(model.blocks) - 1, bigram, tokens).extra["kl"]


def memory_probes(
    model: torch.nn.Module,
    *,
    trigger_tokens: Int[Tensor, " n"],
    output_tokens: Int[Tensor, " m"],
    non_trigger_tokens: Int[Tensor, " k"],
    bigram: Float[Tensor, "d_vocab d_vocab"] | None,
) -> dict[str, float]:
    """All probes of the simplified model; `wf_kl` only when the model has an MLP."""
    device = model_device(model)
    out = {
        "wo2_recall": wo2_recall(model, output_tokens.to(device)),
        "wk2_recall": wk2_recall(model, trigger_tokens.to(device)),
        "wk1_recall": wk1_recall(model),
        "wk1_recall_64": wk1_recall(model, 64),
    }
    if bigram is not None and hasattr(model.blocks[-1], "mlp"):
        out["wf_kl"] = wf_kl(model, non_trigger_tokens.to(device), bigram.to(device))
    return out


@torch.no_grad()
def attention_probes(
    patterns: list[Float[Tensor, "batch query_pos key_pos"]],
    tokens: Int[Tensor, "batch pos"],
    targets: Int[Tensor, "batch pos"],
    counter: Int[Tensor, "batch pos"],
) -> dict[str, float]:
    """How often the attention maps do what the induction circuit needs (argmax over keys):

    `attn0_prev`: layer 0, at the position just after a trigger's first occurrence, attends to that trigger.
    `attn1_induction`: layer 1, at a trigger's later occurrences, attends to a position holding the correct
    output token (the token after the earlier occurrence).
    """
    first_b, first_t = torch.where(counter[:, :-1] == 1)
    prev = patterns[0].argmax(-1)
    attn0 = (prev[first_b, first_t + 1] == first_t).float().mean()
    out = {"attn0_prev": float(attn0)}
    if len(patterns) > 1:
        b, t = torch.where(counter >= 2)
        where = patterns[1][b, t].argmax(-1)
        out["attn1_induction"] = float((tokens[b, where] == targets[b, t]).float().mean())
    return out
