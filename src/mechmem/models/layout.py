"""The canonical weight layout of a mechmem transformer, and its conversion to TransformerLens 4's layout.

A checkpoint stores weights under `HookedTransformer`'s parameter names and shapes, whichever TransformerLens
wrote it: `embed.W_E [d_vocab d_model]`, `blocks.L.attn.W_Q [head_index d_model d_head]`, `blocks.L.mlp.W_in
[d_model d_mlp]`, `unembed.W_U [d_model d_vocab_out]`, ... (grouped-query attention keeps TransformerLens's
`_W_K`/`_W_V`/`_b_K`/`_b_V` names for the shared key/value heads). HookedTransformer's buffers (`mask`,
`IGNORE`, `rotary_sin`, `rotary_cos`) are not stored; where a file carries them, `buffer_problem` checks
them and they are dropped on load.

TransformerLens 4's `TransformerBridge` names the same tensors after `nn.Linear` modules
(`blocks.L.attn.q.weight [(head_index d_head) d_model]`, `blocks.L.mlp.in.weight [d_mlp d_model]`,
`unembed.weight [d_vocab_out d_model]`). `to_bridge` and `from_bridge` are exact inverses (a reshape, a
transpose or a permutation per tensor) but for a gated MLP's `b_in`, which `to_bridge` folds into `b_out`
(same logits). The bridge rotates adjacent query/key dimension pairs (2i, 2i+1) where HookedTransformer
rotates i with i + rotary_dim / 2, so the rotary dimensions of W_Q, W_K, b_Q and b_K are permuted on the way
(attention scores are unchanged). This module imports no TransformerLens.
"""

from collections.abc import Mapping

import torch
from torch import Tensor

BUFFER_SUFFIXES = (".mask", ".IGNORE", ".rotary_sin", ".rotary_cos")
"""Suffixes of HookedTransformer buffers that older checkpoints stored beside the weights."""


def canonical_weights(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """`state` without the HookedTransformer buffers (the weights a checkpoint holds)."""
    return {k: v for k, v in state.items() if not k.endswith(BUFFER_SUFFIXES)}


def buffer_problem(name: str, tensor: Tensor, cfg) -> str | None:
    """Why `tensor`, stored as HookedTransformer buffer `name`, is not what TransformerLens keeps there for a
    model of config `cfg` (a `TransformerConfig`); None when it is.

    `mask` is a bool [k, k] causal mask (k = 0 or n_ctx, local layers limited to window_size); `IGNORE` a
    floating scalar, -inf or at most -1e4; `rotary_sin`/`rotary_cos` floating [rows, rotary_dim] in [-1, 1].
    """
    parts = name.split(".")
    kind = parts[-1]
    layer = parts[1] if len(parts) == 4 else ""
    if parts[0] != "blocks" or parts[2:3] != ["attn"] or not layer.isdigit() or int(layer) >= cfg.n_layers:
        return "is not a buffer of an attention layer of this model"
    if kind == "mask":
        if tensor.dtype != torch.bool or tensor.dim() != 2 or tensor.shape[0] != tensor.shape[1]:
            return f"must be a square bool causal mask, got {_describe(tensor)}"
        if tensor.shape[0] > cfg.n_ctx:
            return f"is {tensor.shape[0]} positions wide, more than the model's n_ctx {cfg.n_ctx}"
        keys, queries = torch.arange(tensor.shape[0]), torch.arange(tensor.shape[0])[:, None]
        allowed = keys <= queries
        if cfg.attn_types is not None and cfg.attn_types[int(layer)] == "local":
            allowed &= keys > queries - cfg.window_size
        if not torch.equal(tensor, allowed):
            return "is not the causal mask of this layer (its attention would read other positions)"
        return None
    if not tensor.is_floating_point():
        return f"must be floating point, got {_describe(tensor)}"
    if kind == "IGNORE":
        if tensor.dim() != 0 or not float(tensor) <= -1e4:
            return f"must be a scalar of -inf or at most -1e4 (a masked key's score), got {_describe(tensor)}"
        return None
    rotary_dim = cfg.rotary_dim or cfg.head_dim
    if cfg.positional_embedding_type != "rotary":
        return "is a rotary table, and this model has no rotary positions"
    if tensor.dim() != 2 or tensor.shape[1] != rotary_dim or not bool((tensor.abs() <= 1).all()):
        return f"must be [positions, {rotary_dim}] with entries in [-1, 1], got {_describe(tensor)}"
    return None


def _describe(tensor: Tensor) -> str:
    """`tensor`'s dtype and shape, with its value when it is a scalar."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    if tensor.dim() == 0:
        return f"{dtype} {tensor.item()}"
    return f"{dtype} {tuple(tensor.shape)}"


def fold_gated_input_bias(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Canonical weights of a gated MLP with each `b_in` folded into its `b_out` (`b_out + b_in @ W_out`) and
    dropped (also from a partial state)."""
    out = dict(state)
    for name in [k for k in state if k.endswith("mlp.b_in")]:
        prefix = name.removesuffix("b_in")
        b_in = out.pop(name)
        if f"{prefix}b_out" in out and f"{prefix}W_out" in out:
            out[f"{prefix}b_out"] = out[f"{prefix}b_out"] + b_in @ out[f"{prefix}W_out"]
    return out


def canonical_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """Every weight of a transformer with config `cfg` and its shape, in HookedTransformer's parameter order:
    initial weights are drawn in this order, so a seed gives the same weights under either backend."""
    d_model, n_heads, d_head, n_kv = cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.n_key_value_heads
    norm = cfg.normalization_type
    d_vocab_out = cfg.d_vocab_out if cfg.d_vocab_out is not None else cfg.d_vocab

    def norm_weights(prefix: str) -> dict[str, tuple[int, ...]]:  # LNPre and RMSPre have no weights
        return {f"{prefix}.{leaf}": (d_model,) for leaf in {"LN": "wb", "RMS": "w"}.get(norm, "")}

    shapes: dict[str, tuple[int, ...]] = {"embed.W_E": (cfg.d_vocab, d_model)}
    if cfg.positional_embedding_type != "rotary":
        shapes["pos_embed.W_pos"] = (cfg.n_ctx, d_model)
    for layer in range(cfg.n_layers):
        block = f"blocks.{layer}"
        shapes |= norm_weights(f"{block}.ln1")
        if cfg.d_mlp is not None:
            shapes |= norm_weights(f"{block}.ln2")
        attn = f"{block}.attn"
        shapes |= {
            f"{attn}.W_Q": (n_heads, d_model, d_head),
            f"{attn}.W_O": (n_heads, d_head, d_model),
            f"{attn}.b_Q": (n_heads, d_head),
            f"{attn}.b_O": (d_model,),
        }
        kv, kv_heads = ("_", n_kv) if n_kv is not None else ("", n_heads)
        shapes |= {
            f"{attn}.{kv}W_K": (kv_heads, d_model, d_head),
            f"{attn}.{kv}W_V": (kv_heads, d_model, d_head),
            f"{attn}.{kv}b_K": (kv_heads, d_head),
            f"{attn}.{kv}b_V": (kv_heads, d_head),
        }
        if cfg.d_mlp is not None:  # HookedTransformer's gated MLP registers its parameters in another order
            gated = ("W_in", "W_out", "W_gate", "b_in", "b_out")
            d_mlp = cfg.d_mlp
            mlp = {"W_in": (d_model, d_mlp), "W_gate": (d_model, d_mlp), "W_out": (d_mlp, d_model)}
            mlp |= {"b_in": (d_mlp,), "b_out": (d_model,)}
            order = gated if cfg.gated_mlp else ("W_in", "b_in", "W_out", "b_out")
            shapes |= {f"{block}.mlp.{leaf}": mlp[leaf] for leaf in order}
    shapes |= norm_weights("ln_final")
    shapes |= {"unembed.W_U": (d_model, d_vocab_out), "unembed.b_U": (d_vocab_out,)}
    return shapes


def rotary_permutation(rotary_dim: int, d_head: int) -> Tensor:
    """Index p with bridge dimension j = HookedTransformer dimension p[j] ((i, i + r/2) -> (2i, 2i + 1))."""
    half = rotary_dim // 2
    order = [d for i in range(half) for d in (i, i + half)] + list(range(rotary_dim, d_head))
    return torch.tensor(order)


def _rotary_order(cfg) -> Tensor | None:
    """`rotary_permutation` of a rotary model's heads; None without rotary positions."""
    if cfg.positional_embedding_type != "rotary":
        return None
    return rotary_permutation(cfg.rotary_dim or cfg.head_dim, cfg.head_dim)


ROTATED = ("W_Q", "W_K", "b_Q", "b_K")
"""Weights whose rotary dimensions the two layouts order differently (`rotary_permutation`)."""
TRANSPOSED = ("W_in", "W_out", "W_gate", "W_U")
"""Matrices the bridge stores as `nn.Linear` weights, [d_out d_in]."""
UNNESTED = ("W_E", "W_pos", "W_U", "b_U", "w", "b")
"""Weights the bridge keeps under the canonical module's own name (`unembed.W_U` -> `unembed.weight`)."""
LEAVES = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O", "b_O", "b_in", "b_out", *TRANSPOSED[:3], *UNNESTED)
"""Every canonical weight name's last part (without the `_` of grouped key/value heads)."""


def _bridge_name(prefix: str, leaf: str) -> str:
    """The bridge name of canonical weight `prefix.leaf`: `blocks.0.attn.W_Q` -> `blocks.0.attn.q.weight`."""
    module = "" if leaf in UNNESTED else f".{leaf[2:].lower()}"
    return f"{prefix}{module}.{'weight' if leaf[0] in 'Ww' else 'bias'}"


def _to_bridge_tensor(leaf: str, t: Tensor) -> Tensor:
    if leaf in ("W_Q", "W_K", "W_V"):  # [head_index d_model d_head] -> [(head_index d_head) d_model]
        return t.permute(0, 2, 1).reshape(-1, t.shape[1])
    if leaf in ("b_Q", "b_K", "b_V"):
        return t.reshape(-1)
    if leaf == "W_O":
        return t.reshape(-1, t.shape[-1]).T
    return t.T if leaf in TRANSPOSED else t


def _from_bridge_tensor(leaf: str, t: Tensor, shape: tuple[int, ...]) -> Tensor:
    if leaf in ("W_Q", "W_K", "W_V"):  # [(head_index d_head) d_model] -> [head_index d_model d_head]
        return t.reshape(-1, shape[-1], t.shape[1]).permute(0, 2, 1)
    if leaf in ("b_Q", "b_K", "b_V"):
        return t.reshape(shape)
    if leaf == "W_O":
        return t.T.reshape(shape)
    return t.T if leaf in TRANSPOSED else t


def to_bridge(state: Mapping[str, Tensor], cfg) -> dict[str, Tensor]:
    """Canonical weights -> the `TransformerBridge.state_dict()` layout of the same model."""
    perm = _rotary_order(cfg)
    state = canonical_weights(state)
    if cfg.gated_mlp:
        state = fold_gated_input_bias(state)
    out: dict[str, Tensor] = {}
    for name, t in state.items():
        prefix, leaf = name.rsplit(".", 1)
        leaf = leaf.lstrip("_")
        if leaf not in LEAVES:
            raise KeyError(f"no bridge name for weight {name!r}")
        if perm is not None and leaf in ROTATED:
            t = t[..., perm]
        out[_bridge_name(prefix, leaf)] = _to_bridge_tensor(leaf, t).contiguous()
    return out


def from_bridge(state: Mapping[str, Tensor], cfg) -> dict[str, Tensor]:
    """A `TransformerBridge.state_dict()` -> canonical weights in canonical order (inverse of `to_bridge`).

    A missing MLP or unembedding bias is zero (a bridge booted by TransformerLens itself has no b_U)."""
    perm = _rotary_order(cfg)
    inverse = torch.argsort(perm) if perm is not None else None
    out: dict[str, Tensor] = {}
    for name, shape in canonical_shapes(cfg).items():
        prefix, leaf = name.rsplit(".", 1)
        leaf = leaf.lstrip("_")
        key = _bridge_name(prefix, leaf)
        if key not in state and leaf in ("b_in", "b_out", "b_U"):
            t = torch.zeros(shape)
        else:
            t = _from_bridge_tensor(leaf, state[key], shape)
        if inverse is not None and leaf in ROTATED:
            t = t[..., inverse]
        out[name] = t.contiguous()
    return out
