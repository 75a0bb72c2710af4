"""Which models the replay runs, and what it reads from them: the replay's one seam with TransformerLens.

The replay (`Replay`) re-implements TransformerLens's forward arithmetic from a block's weights, its rotary
tables and its attention scale, so it reads TransformerLens internals that hooks never see: the shared
key/value heads of grouped-query attention, the sin/cos tables and rotation of rotary positions (in the
backend's own dimension order), and the backend's clean-up of NaN attention scores. Those readers live here,
beside the predicate that says which models they can read (`replay_unsupported`); the backend module
(`mechmem.models.backend`) keeps what every analysis needs (`is_bridge`, `is_native_bridge`,
`attention_scale`, `last_start_layer`). When a TransformerLens release changes these internals, this
module and the replay's reference tests are what must follow it.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.errors import MechmemError
from mechmem.models.backend import is_bridge, is_native_bridge, is_transformer_lens_model


def attention_zeroes_nan(model: Any) -> bool:
    """True where `model`'s attention sets every NaN of its pattern to 0 (HookedTransformer's guard). A
    TransformerLens 4 bridge sets only the masked entries to 0, so a NaN or infinite score leaves its row
    NaN."""
    return not is_bridge(model)


def replay_unsupported(model: Any) -> str | None:
    """Why the engine's hook-free replay cannot run `model` (None: it can).

    The replay re-implements TransformerLens's forward arithmetic from the weights, rotary tables and
    attention scale read here and in `mechmem.models.backend` (`attention_weights`, `rotary_tables`,
    `attention_scale`), so it takes a HookedTransformer or a bridge around TransformerLens 4's native model
    (what `build_transformer` builds) with learned or rotary positions, grouped-query attention included
    (`replay.forward` lists the rest). A bridge around a Hugging Face model (`load_pretrained`) replays
    with learned positions and one key/value head per query head only: its rotary embedding and key/value
    weights are the Hugging Face modules', which these functions do not read. Anything else is patched
    through hooks.
    """
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
    """One block's attention weights as its forward uses them, in HookedTransformer's shapes. Keys and values
    come per key/value head: n_key_value_heads of them under grouped-query attention, each read by
    n_heads / n_key_value_heads consecutive query heads."""

    W_Q: Float[Tensor, "head_index d_model d_head"]
    W_K: Float[Tensor, "kv_head d_model d_head"]
    W_V: Float[Tensor, "kv_head d_model d_head"]
    W_O: Float[Tensor, "head_index d_head d_model"]
    b_Q: Float[Tensor, "head_index d_head"]
    b_K: Float[Tensor, "kv_head d_head"]
    b_V: Float[Tensor, "kv_head d_head"]
    b_O: Float[Tensor, " d_model"]


def attention_weights(model: Any, layer: int) -> AttentionWeights:
    """Block `layer`'s attention weights, under either backend (live views: detach before keeping them).

    HookedTransformer's `W_K`/`W_V` repeat grouped-query heads over their query heads; the shared heads are
    `_W_K`/`_W_V` (unless `ungroup_grouped_query_attention` made them full). A TransformerLens 4 bridge shows
    the shared heads as `W_K`/`W_V`. On a native bridge with rotary positions the query and key dimensions
    are in the native model's order (adjacent pairs rotate together), the order `rotary_tables` rotates.
    """
    a = model.blocks[layer].attn
    cfg = model.cfg
    grouped = getattr(cfg, "n_key_value_heads", None) is not None
    if not is_bridge(model) and grouped and not getattr(cfg, "ungroup_grouped_query_attention", False):
        return AttentionWeights(a.W_Q, a._W_K, a._W_V, a.W_O, a.b_Q, a._b_K, a._b_V, a.b_O)
    return AttentionWeights(a.W_Q, a.W_K, a.W_V, a.W_O, a.b_Q, a.b_K, a.b_V, a.b_O)


class Rotary(NamedTuple):
    """A block's rotary position embedding: a query or key x at position p becomes
    cat(x_rot * cos[p] + rotate(x_rot) * sin[p], x_pass), where x_rot is its first rotary_dim =
    cos.shape[-1] dimensions and x_pass the rest."""

    cos: Float[Tensor, "pos rotary_dim"]
    sin: Float[Tensor, "pos rotary_dim"]
    rotate: Callable[[Tensor], Tensor]


def rotary_tables(model: Any, layer: int, n_positions: int) -> Rotary:
    """Block `layer`'s rotary tables (at least `n_positions` rows) and rotation, under either backend.

    HookedTransformer keeps sin/cos tables on each attention module and rotates with `rotate_every_two` (the
    halves i, i + rotary_dim / 2 by default); it grows the tables on use, so they are grown here, once, when
    a pass needs more positions. TransformerLens 4's native model shares one `NativeRotary` between blocks:
    tables of n_ctx rows (any `rope_scaling` applied) and adjacent pairs (2i, 2i + 1) rotating together.
    """
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
    "attention_zeroes_nan",
    "replay_unsupported",
    "rotary_tables",
]
