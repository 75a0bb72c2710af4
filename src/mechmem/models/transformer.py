"""Build the TransformerLens model of a `TransformerConfig`: a `HookedTransformer` under TransformerLens 3.9+,
a `TransformerBridge` around TransformerLens's native model under 4.x (with the instance-level differences
listed at `_native_model`). The initial weights come from `mechmem.models.weights`, so the same seed gives
the same weights under both backends. Registers the "transformer" architecture.
"""

import copy
import math
import warnings

import torch
from torch import nn

from mechmem.errors import MechmemError
from mechmem.models.backend import (
    BACKEND,
    REGISTERED_ACTIVATIONS,
    HookedTransformer,
    NativeModel,
    TransformerBridgeConfig,
    build_bridge_from_module,
    native_hooks,
)
from mechmem.models.registry import register_architecture
from mechmem.models.transformer_config import TransformerConfig, bridge_unsupported
from mechmem.models.weights import apply_freezing, initial_weights, load_canonical_state_dict


def _native_model(config: TransformerConfig) -> nn.Module:
    """TransformerLens 4's native model for `config`, given the three things HookedTransformer has and it
    lacks: a trained unembedding bias b_U, the gated MLP's output bias b_out, unscaled attention for
    use_attn_scale=False or attn_scale=1.0 (and activations registered with `register_activation`; a gated
    MLP's input bias is folded into b_out by `layout.to_bridge`). Instance attributes only; TL's code is
    untouched."""
    reason = bridge_unsupported(config)
    if reason:
        raise MechmemError(reason)
    kwargs = config.tl_kwargs()
    unscaled = not config.use_attn_scale or math.isclose(kwargs.get("attn_scale", 0.0), 1.0)
    if unscaled:  # TransformerLens 4 refuses attn_scale=1.0: each block is given its scale below
        kwargs.pop("attn_scale", None)
    custom_act = REGISTERED_ACTIVATIONS.get(config.act_fn) if config.d_mlp is not None else None
    if custom_act is not None:
        kwargs["act_fn"] = "relu"  # a placeholder the native MLP accepts; replaced below
    cfg = TransformerBridgeConfig(**kwargs)
    model = NativeModel(copy.deepcopy(cfg))
    model.head = nn.Linear(config.d_model, model.head.out_features, bias=True)
    for block in model.layers:
        if unscaled:
            block.attn.scale = 1.0
        if config.d_mlp is not None and config.gated_mlp:
            block.mlp.out = nn.Linear(config.d_mlp, config.d_model, bias=True)
        if custom_act is not None:
            block.mlp.act = custom_act
    if custom_act is not None:
        cfg.act_fn = config.act_fn
    if config.attn_scale is not None:
        cfg.attn_scale = config.attn_scale
    native_hooks.prepare(model)
    bridge = build_bridge_from_module(
        model,
        architecture="TransformerLensNative",
        tl_config=cfg,
        model_name="mechmem",
        post_adapter_hook=native_hooks.use_hooked_components,
    )
    return native_hooks.attach(bridge)


def build_transformer(config: TransformerConfig, *, generator: torch.Generator | None = None) -> nn.Module:
    """Build the TransformerLens model for `config` (HookedTransformer or TransformerBridge), initialised from
    `generator`, with frozen parameters set."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(config.to_hooked_config()) if BACKEND == "hooked" else _native_model(config)
    model.mechmem_config = config  # type: ignore[attr-defined]
    load_canonical_state_dict(model, initial_weights(config, generator))
    apply_freezing(model, config.frozen)
    return model


register_architecture("transformer", TransformerConfig, build_transformer)
