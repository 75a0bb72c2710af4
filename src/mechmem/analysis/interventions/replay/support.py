"""Which models the replay runs, and what it reads from them: the replay's seam with TransformerLens
internals (grouped-query key/value heads, rotary tables and rotation)."""

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.errors import MechmemError
from mechmem.models.backend import is_bridge, is_native_bridge, is_transformer_lens_model


def replay_unsupported(model: Any) -> str | None:
    """Why the engine's hook-free replay cannot run `model` (None: it can). A bridge around a Hugging Face
    model replays only with learned positions and one key/value head per query head."""
    if not is_transformer_lens_model(model):
        return f"{type(model).__name__} is not a TransformerLens transformer"
    positions = model.cfg.positional_embedding_type
    foreign = is_bridge(model) and not is_native_bridge(model)
    if foreign and (positions != "standard" or getattr(model.cfg, "n_key_value_heads", None)):
        return (
            "the replay reads TransformerLens 4 bridges of Hugging Face models with learned positions and "
            "full-head attention only"
        )
    if positions not in ("standard", "rotary"):
        return f"the replay does not implement positional_embedding_type={positions}"
    return None


class AttentionWeights(NamedTuple):
    """One block's attention weights in HookedTransformer's shapes; keys and values per key/value head
    (n_key_value_heads under grouped-query attention)."""

    W_Q: Float[Tensor, "head_index d_model d_head"]
    W_K: Float[Tensor, "kv_head d_model d_head"]
    W_V: Float[Tensor, "kv_head d_model d_head"]
    W_O: Float[Tensor, "head_index d_head d_model"]
    b_Q: Float[Tensor, "head_index d_head"]
    b_K: Float[Tensor, "kv_head d_head"]
    b_V: Float[Tensor, "kv_head d_head"]
    b_O: Float[Tensor, " d_model"]


def attention_weights(model: Any, layer: int) -> AttentionWeights:
    """Block `layer`'s attention weights under either backend (live views: detach before keeping them),
    with the shared grouped-query heads (`_W_K`/`_W_V` on HookedTransformer, `W_K`/`W_V` on a bridge)."""
    a = model.blocks[layer].attn
    cfg = model.cfg
    grouped = getattr(cfg, "n_key_value_heads", None) is not None
    if not is_bridge(model) and grouped and not getattr(cfg, "ungroup_grouped_query_attention", False):
        return AttentionWeights(a.W_Q, a._W_K, a._W_V, a.W_O, a.b_Q, a._b_K, a._b_V, a.b_O)
    return AttentionWeights(a.W_Q, a.W_K, a.W_V, a.W_O, a.b_Q, a.b_K, a.b_V, a.b_O)


class Rotary(NamedTuple):
    """A block's rotary position embedding: x at position p becomes cat(x_rot * cos[p] + rotate(x_rot) *
    sin[p], x_pass), x_rot being its first rotary_dim = cos.shape[-1] dimensions."""

    cos: Float[Tensor, "pos rotary_dim"]
    sin: Float[Tensor, "pos rotary_dim"]
    rotate: Callable[[Tensor], Tensor]


def rotary_tables(model: Any, layer: int, n_positions: int) -> Rotary:
    """Block `layer`'s rotary tables (at least `n_positions` rows) and rotation, under either backend:
    HookedTransformer's per-module tables (grown here when needed) with `rotate_every_two`, or the
    native model's shared `NativeRotary` (adjacent pairs)."""
    attn = model.blocks[layer].attn
    if is_bridge(model):
        if not is_native_bridge(model):
            raise MechmemError("rotary tables are read from TransformerLens 4's native model only")
        rope = attn.original_component.rotary
        return Rotary(rope.cos_cached, rope.sin_cached, rope._rotate_half)
    if n_positions > attn.rotary_cos.shape[0]:
        attn.apply_rotary(torch.zeros(1, n_positions, 1, model.cfg.d_head, device=attn.rotary_cos.device))
    return Rotary(attn.rotary_cos, attn.rotary_sin, attn.rotate_every_two)


__all__ = [
    "AttentionWeights",
    "Rotary",
    "attention_weights",
    "replay_unsupported",
    "rotary_tables",
]
