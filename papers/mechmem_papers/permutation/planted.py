"""A hand-set permutation-task model with a known elimination / recall circuit, for testing reports.

`planted_permutation_model(vocab_size=5)` solves the permutation task (`mechmem.tasks.permutation`) with
weights written by hand into a 2-layer attention-only transformer (2 heads per layer). The residual stream is
split into orthogonal one-hot blocks: TOK (the current token), POS (the position), PREV (the previous token,
written by the previous-token head) and OUT (read by W_U).

    L0H0  previous-token head: query position t attends to key t - 1 and copies its token into PREV.
    L0H1  distractor: zero weights (uniform attention, writes nothing).
    L1H0  elimination head: attends uniformly to the earlier y positions (odd positions) and writes
          -ELIMINATE * onehot(y) into OUT, so every used y is suppressed.
    L1H1  recall head: attends to the y position whose PREV equals the current token (the y bound to an
    earlier
          occurrence of the current x) and writes +RECALL * onehot(y). Without a match it spreads over the
          earlier y's, adding RECALL / k to each, which the elimination head outweighs.

At the final answer without a repeat the used y's sit at (RECALL - ELIMINATE) / 4 and the unused y at 0: the
model eliminates. With a repeat the bound y sits at RECALL - ELIMINATE / 4 above every other candidate: the
model recalls. Token 0 (padding) is never predicted (b_U = -50). The first answer (no earlier y) is not
Bayes-optimal: both layer-1 heads can only look at position 0 there, so x1 is pushed down.
"""

import torch

from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig

PREVIOUS_TOKEN_HEAD = (0, 0)
ELIMINATION_HEAD = (1, 0)
RECALL_HEAD = (1, 1)
ELIMINATE = 60.0
RECALL = 30.0


def planted_permutation_config(vocab_size: int = 5) -> TransformerConfig:
    """The config of the planted model (d_model = 3 (V + 1) + 2V - 1, attention-only)."""
    d_vocab, n_ctx = vocab_size + 1, 2 * vocab_size - 1
    return TransformerConfig(
        n_layers=2,
        d_model=3 * d_vocab + n_ctx,
        n_heads=2,
        d_head=max(d_vocab + 1, n_ctx + 1),
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        d_mlp=None,
    )


def planted_permutation_model(
    vocab_size: int = 5, *, strength: float = 10.0, recall_head: int = RECALL_HEAD[1]
) -> torch.nn.Module:
    """The hand-set model described in the module docstring; `strength` scales queries and keys;
    `recall_head` is the layer-1 head that recalls (the other one eliminates)."""
    cfg = planted_permutation_config(vocab_size)
    v, t = cfg.d_vocab, cfg.n_ctx
    tok, pos, prev, out = slice(0, v), slice(v, v + t), slice(v + t, 2 * v + t), slice(2 * v + t, 3 * v + t)
    odd = torch.tensor([1.0 if s % 2 else -1.0 for s in range(t)])
    model = build_transformer(cfg, generator=torch.Generator().manual_seed(0))
    c = strength
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.embed.W_E[:, tok] = torch.eye(v)
        model.pos_embed.W_pos[:, pos] = torch.eye(t)
        model.unembed.W_U[out, :] = torch.eye(v)
        model.unembed.b_U[0] = -50.0
        a0, a1 = model.blocks[0].attn, model.blocks[1].attn
        # L0H0: query t matches key s when s + 1 == t; copies TOK into PREV.
        a0.W_Q[0, pos, :t] = c * torch.eye(t)
        a0.W_K[0, pos.start : pos.stop - 1, 1:t] = c * torch.eye(t - 1)
        a0.W_V[0, tok, :v] = torch.eye(v)
        a0.W_O[0, :v, prev] = torch.eye(v)
        # Layer 1: the positions' one-hots sum to 1, so W_Q can put a constant c on one query coordinate, and
        # W_K scores odd (y) keys +c, even keys -c on it.
        for head in (0, 1):
            a1.W_Q[head, pos, t] = c
            a1.W_K[head, pos, t] = c * odd
            a1.W_V[head, tok, :v] = torch.eye(v)
        a1.W_O[1 - recall_head, :v, out] = -ELIMINATE * torch.eye(v)
        # The recall head also matches the current token (TOK) against the key's previous token (PREV).
        a1.W_Q[recall_head, tok, :v] = c * torch.eye(v)
        a1.W_K[recall_head, prev, :v] = c * torch.eye(v)
        a1.W_O[recall_head, :v, out] = RECALL * torch.eye(v)
    return model
