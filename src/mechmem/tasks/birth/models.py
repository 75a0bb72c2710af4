"""The two model families of Bietti et al. (2023), as `TransformerConfig`s (built as TL `HookedTransformer`s).

Simplified model (Section 4.2 of the paper; the one the memory probes read):

    x_t = w_E(z_t) + p_t                              embeddings N(0, 1); p_t random, never trained
    x_t += W_O^1 W_V^1 attn^1(x)                      layer 1: W_Q = I, W_K^1 trained, W_V^1 and W_O^1 frozen
    x_t += W_O^2 W_V^2 attn^2(x)                      layer 2: W_Q = I, W_K^2 and W_O^2 trained, W_V^2 frozen
    x_t += W_F x_t                                    optional linear feed-forward after layer 2
    logits = W_U x_t                                  unembedding (optionally frozen)

One head per layer with d_head = d_model, scores scaled by 1/sqrt(d), no LayerNorm, no biases. In
TransformerLens terms: `blocks.{0,1}.attn`, biases zeroed and frozen; the optional W_F is a "linear" MLP with
d_mlp = d_model whose layer-0 copy is zeroed and frozen and whose layer-1 W_out is frozen at the identity, so
the layer-1 MLP adds exactly x W_in = W_F x (TL's row-vector convention).

Initialisation: embeddings and positions N(0, 1); other matrices normal with std 1/sqrt(3 d).

Full model: a standard pre-LayerNorm transformer (single-head attention as in the paper, ReLU MLPs of width
4d, trainable embeddings), 1 or 2 layers, LayerNorm optional.
"""

import math

from mechmem.models.backend import register_activation
from mechmem.models.transformer_config import TransformerConfig


def _identity(x):
    return x


# The paper's W_F feed-forward is purely linear; TransformerLens has no identity activation.
register_activation("linear", _identity)

# Parameters of the simplified model that never train (plus optional embeddings / unembedding).
SIMPLIFIED_FROZEN = (
    "blocks.*.attn.W_Q",
    "blocks.*.attn.b_*",
    "pos_embed.W_pos",
    "blocks.0.attn.W_V",
    "blocks.0.attn.W_O",
    "blocks.1.attn.W_V",
    "unembed.b_U",
)
FFN_FROZEN = ("blocks.*.mlp.b_*", "blocks.0.mlp.W_in", "blocks.0.mlp.W_out", "blocks.1.mlp.W_out")


def linear_init_std(d_model: int) -> float:
    """Standard deviation of PyTorch's default `nn.Linear` init for fan-in d_model: 1/sqrt(3 d)."""
    return 1.0 / math.sqrt(3 * d_model)


def simplified_config(
    *,
    d_vocab: int,
    n_ctx: int,
    d_model: int = 128,
    ffn: bool = False,
    freeze_embeddings: bool = False,
    freeze_unembedding: bool = False,
) -> TransformerConfig:
    """The simplified 2-layer model; `ffn` adds the linear W_F after layer 2."""
    fixed: list[tuple[str, str]] = [
        ("blocks.*.attn.W_Q", "identity"),
        ("pos_embed.W_pos", "normal"),
        ("embed.W_E", "normal"),
    ]
    frozen = list(SIMPLIFIED_FROZEN)
    if ffn:
        fixed += [
            ("blocks.0.mlp.W_in", "zero"),
            ("blocks.0.mlp.W_out", "zero"),
            ("blocks.1.mlp.W_out", "identity"),
        ]
        frozen += FFN_FROZEN
    if freeze_embeddings:
        frozen.append("embed.W_E")
    if freeze_unembedding:
        frozen.append("unembed.W_U")
    return TransformerConfig(
        n_layers=2,
        d_model=d_model,
        n_heads=1,
        d_head=d_model,
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        d_mlp=d_model if ffn else None,
        act_fn="linear",
        init_std=linear_init_std(d_model),
        fixed=tuple(fixed),
        frozen=tuple(frozen),
    )


def full_config(
    *,
    d_vocab: int,
    n_ctx: int,
    n_layers: int = 2,
    d_model: int = 128,
    n_heads: int = 1,
    layer_norm: bool = True,
) -> TransformerConfig:
    """A standard transformer with ReLU MLPs (width 4d), pre-LayerNorm (or none), biases frozen at zero."""
    return TransformerConfig(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_vocab=d_vocab,
        n_ctx=n_ctx,
        d_mlp=4 * d_model,
        normalization_type="LN" if layer_norm else None,
        init_std=linear_init_std(d_model),
        fixed=(("pos_embed.W_pos", "normal"), ("embed.W_E", "normal")),
        frozen=("blocks.*.attn.b_*", "blocks.*.mlp.b_*", "unembed.b_U"),
    )


def is_simplified(config: TransformerConfig) -> bool:
    """True for configs with the simplified model's structure (the memory probes apply)."""
    return (
        config.n_layers == 2
        and config.n_heads == 1
        and config.head_dim == config.d_model
        and config.normalization_type is None
    )
