"""Hand-set models with a known circuit, for tests and demos of the analysis toolkit.

`planted_induction_model` builds a 2-layer attention-only transformer with a hand-written previous-token
head and induction head among distractor heads. The residual stream is split into four one-hot blocks:

    TOK  [0, V)            the current token (W_E is the identity into this block)
    POS  [V, V+T)          the position (W_pos is the identity into this block)
    PREV [V+T, 2V+T)       the previous token, written by the previous-token head
    OUT  [2V+T, 3V+T)      the predicted token, written by the induction head; W_U reads only this block

Layer 0: head 0 attends to itself, head 1 to the first position, head 2 (previous-token) to t-1 and
copies that token into PREV. Layer 1: head 0 attends uniformly, head 1 (induction) matches TOK against
the keys' PREV and copies the attended token into OUT, head 2 attends to itself. Distractors have a zero
OV circuit. On a repeated random sequence [r, r] the model predicts the second half perfectly.
"""

from dataclasses import dataclass

import torch

from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig

PREVIOUS_TOKEN_HEAD = (0, 2)
"""(layer, head) of the planted previous-token head."""
INDUCTION_HEAD = (1, 1)
"""(layer, head) of the planted induction head."""


@dataclass(frozen=True)
class PlantedLayout:
    """Where each block of the planted model's residual stream lives."""

    d_vocab: int
    """V: number of tokens."""
    n_ctx: int
    """T: number of positions."""

    @property
    def tok(self) -> slice:
        return slice(0, self.d_vocab)

    @property
    def pos(self) -> slice:
        return slice(self.d_vocab, self.d_vocab + self.n_ctx)

    @property
    def prev(self) -> slice:
        return slice(self.d_vocab + self.n_ctx, 2 * self.d_vocab + self.n_ctx)

    @property
    def out(self) -> slice:
        return slice(2 * self.d_vocab + self.n_ctx, 3 * self.d_vocab + self.n_ctx)

    @property
    def d_model(self) -> int:
        return 3 * self.d_vocab + self.n_ctx

    @property
    def d_head(self) -> int:
        return max(self.d_vocab + 1, self.n_ctx)


def planted_config(d_vocab: int = 12, n_ctx: int = 24, n_heads: int = 3) -> TransformerConfig:
    """The `TransformerConfig` of the planted model (so it can be checkpointed like any mechmem model)."""
    layout = PlantedLayout(d_vocab, n_ctx)
    return TransformerConfig(
        n_layers=2,
        d_model=layout.d_model,
        n_heads=n_heads,
        d_head=layout.d_head,
        d_vocab=d_vocab,
        n_ctx=n_ctx,
    )


def blank_model(config: TransformerConfig, layout: PlantedLayout, strength: float) -> torch.nn.Module:
    """A model of `config`, all zero but W_E writing TOK, W_pos writing POS, W_U reading OUT x `strength`."""
    model = build_transformer(config, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.embed.W_E[:, layout.tok] = torch.eye(layout.d_vocab)
        model.pos_embed.W_pos[:, layout.pos] = torch.eye(layout.n_ctx)
        model.unembed.W_U[layout.out, :] = strength * torch.eye(layout.d_vocab)
    return model


def planted_induction_model(d_vocab: int = 12, n_ctx: int = 24, *, strength: float = 10.0) -> torch.nn.Module:
    """A `HookedTransformer` with a planted previous-token head (L0H2) and induction head (L1H1).

    `strength` scales the query and key maps (a match's attention logit is strength^2 / sqrt(d_head))
    and the unembedding.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(8, generator=torch.Generator().manual_seed(0))
        >>> bool((model(batch.tokens)[:, 8:-1].argmax(-1) == batch.tokens[:, 9:]).all())   # copies the repeat
        True
    """
    layout = PlantedLayout(d_vocab, n_ctx)
    model = blank_model(planted_config(d_vocab, n_ctx), layout, strength)
    eye_v, eye_t = torch.eye(d_vocab), torch.eye(n_ctx)
    c = strength
    with torch.no_grad():
        a0, a1 = model.blocks[0].attn, model.blocks[1].attn
        # L0H0: attend to self (query position t matches key position t).
        a0.W_Q[0, layout.pos, :n_ctx] = c * eye_t
        a0.W_K[0, layout.pos, :n_ctx] = c * eye_t
        # L0H1: attend to the first position (every query matches key position 0 only).
        a0.W_Q[1, layout.pos, 0] = c
        a0.W_K[1, layout.pos.start, 0] = c
        # L0H2: previous-token head; query t matches key s when s + 1 == t; copies TOK into PREV.
        a0.W_Q[2, layout.pos, :n_ctx] = c * eye_t
        a0.W_K[2, layout.pos.start : layout.pos.stop - 1, 1:n_ctx] = c * eye_t[:-1, :-1]
        a0.W_V[2, layout.tok, :d_vocab] = eye_v
        a0.W_O[2, :d_vocab, layout.prev] = eye_v
        # L1H0: zero QK, i.e. uniform attention over the causal prefix.
        # L1H1: induction head; current token (TOK) against the key's previous token (PREV); copies TOK into
        # OUT.
        a1.W_Q[1, layout.tok, :d_vocab] = c * eye_v
        a1.W_K[1, layout.prev, :d_vocab] = c * eye_v
        # Position 0 has no previous token (its PREV block holds its own token): every query scores it -c^2.
        a1.W_Q[1, layout.tok, d_vocab] = c
        a1.W_K[1, layout.pos.start, d_vocab] = -c
        a1.W_V[1, layout.tok, :d_vocab] = eye_v
        a1.W_O[1, :d_vocab, layout.out] = eye_v
        # L1H2: attend to self.
        a1.W_Q[2, layout.pos, :n_ctx] = c * eye_t
        a1.W_K[2, layout.pos, :n_ctx] = c * eye_t
    return model


def planted_split_model(
    movers: int = 4, readers: int = 6, d_vocab: int = 12, half: int = 8, *, suppressor: float = 0.0
) -> torch.nn.Module:
    """A 2-layer attention-only model whose one job is split over several heads, for the repeats pair [r,
    r] with |r| = `half`.

    Layer 0: heads 0 .. movers - 1 each attend from t to t - (half - 1) and write a 1/movers share of that
    token into MID (`PlantedLayout.prev`). Layer 1: heads 0 .. readers - 1 attend to themselves and copy a
    1/readers share of MID into OUT. Every mover -> reader edge carries 1 / (movers x readers) of the logit
    difference. With `suppressor` > 0, layer 1 head `readers` writes -suppressor x MID into OUT.

    Example:
        >>> import mechmem, torch
        >>> from mechmem.analysis.planted import planted_split_model
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(8, generator=torch.Generator().manual_seed(0))
        >>> logits = planted_split_model()(pair.clean)[:, -2]
        >>> bool((logits.argmax(-1) == pair.correct).all())
        True
    """
    n_ctx, n_heads = 2 * half, max(movers, readers + (suppressor > 0))
    layout = PlantedLayout(d_vocab, n_ctx)
    eye_v, eye_t, c, offset = torch.eye(d_vocab), torch.eye(n_ctx), 10.0, half - 1
    model = blank_model(planted_config(d_vocab, n_ctx, n_heads), layout, c)
    with torch.no_grad():
        a0, a1 = model.blocks[0].attn, model.blocks[1].attn
        for j in range(movers):
            a0.W_Q[j, layout.pos, :n_ctx] = c * eye_t
            a0.W_K[j, layout.pos.start : layout.pos.stop - offset, offset:n_ctx] = c * eye_t[offset:, offset:]
            a0.W_V[j, layout.tok, :d_vocab] = eye_v
            a0.W_O[j, :d_vocab, layout.prev] = eye_v / movers
        weights = [1.0 / readers] * readers + ([-suppressor] if suppressor > 0 else [])
        for i, weight in enumerate(weights):
            a1.W_Q[i, layout.pos, :n_ctx] = c * eye_t
            a1.W_K[i, layout.pos, :n_ctx] = c * eye_t
            a1.W_V[i, layout.prev, :d_vocab] = eye_v
            a1.W_O[i, :d_vocab, layout.out] = weight * eye_v
    return model
