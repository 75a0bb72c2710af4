"""A transformer's weights in the canonical layout (`mechmem.models.layout`) under either backend, so a
checkpoint written under either TransformerLens version loads under the other with the same logits. Initial
weights come from an explicit `torch.Generator` (TransformerLens's own init seeds the global RNG).
"""

import fnmatch
import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from mechmem.errors import MechmemError
from mechmem.models import layout
from mechmem.models.backend import is_bridge, is_native_bridge, is_transformer_lens_model
from mechmem.models.transformer_config import TransformerConfig, config_from_hooked_transformer


def _apply_rule(param: Tensor, rule: str, name: str, generator: torch.Generator | None) -> None:
    if rule == "identity" and param.shape[-1] != param.shape[-2]:
        raise MechmemError(f"cannot fix {name} to the identity: shape {tuple(param.shape)} is not square")
    if rule == "normal":
        param.copy_(torch.randn(param.shape, generator=generator))
    elif rule == "identity":
        param.copy_(torch.eye(param.shape[-1]).expand_as(param))
    else:
        param.fill_(1.0 if rule == "one" else 0.0)


def initial_weights(config: TransformerConfig, generator: torch.Generator | None) -> dict[str, Tensor]:
    """Canonical initial weights: W_* ~ N(0, std^2) drawn in canonical order from `generator`, biases zero,
    norm scales one; then the `fixed` rules."""
    std = config.init_std if config.init_std is not None else 0.8 / math.sqrt(config.d_model)
    state: dict[str, Tensor] = {}
    for name, shape in layout.canonical_shapes(config).items():
        leaf = name.rsplit(".", 1)[-1].lstrip("_")
        if leaf.startswith("W_"):
            state[name] = torch.randn(shape, generator=generator) * std
        else:
            state[name] = torch.ones(shape) if leaf == "w" else torch.zeros(shape)
    for pattern, rule in config.fixed:
        hits = fnmatch.filter(state, pattern)
        if not hits:
            raise MechmemError(f"fixed pattern {pattern!r} matches no parameter")
        for name in hits:
            _apply_rule(state[name], rule, name, generator)
    return state


def canonical_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Canonical weight name -> the parameter that holds it (on the bridge, the module weight it lives in).
    Any model but a native TransformerLens 4 bridge gives its `named_parameters()`."""
    if not is_native_bridge(model):
        return dict(model.named_parameters())
    config = _config_of(model)
    bridge_params = dict(model.state_dict(keep_vars=True))
    out = {}
    for name, shape in layout.canonical_shapes(config).items():
        keys = layout.to_bridge({name: torch.zeros(shape)}, config)
        param = bridge_params.get(next(iter(keys)), None) if keys else None
        if isinstance(param, nn.Parameter):
            out[name] = param
    return out


def apply_freezing(model: nn.Module, patterns: tuple[str, ...] | list[str]) -> list[str]:
    """Set requires_grad=False on parameters matching any canonical-name glob; returns the frozen names."""
    named = canonical_parameters(model)
    frozen: list[str] = []
    for pattern in patterns:
        hits = fnmatch.filter(named, pattern)
        if not hits:
            raise MechmemError(f"frozen pattern {pattern!r} matches no parameter")
        frozen.extend(hits)
    for name in set(frozen):
        named[name].requires_grad_(False)
    return sorted(set(frozen))


def canonical_state_dict(model: nn.Module, *, grads: bool = False) -> dict[str, Tensor]:
    """The model's weights (or with `grads=True` their gradients, zero where none) in the canonical layout;
    a model that is not a TransformerLens transformer (a paper's own module) gives its plain state_dict."""
    state = model.state_dict(keep_vars=grads)
    if grads:
        state = {
            k: (v.grad if v.grad is not None else torch.zeros_like(v)).detach()
            for k, v in state.items()
            if isinstance(v, nn.Parameter)
        }
    if is_bridge(model):
        return layout.from_bridge(state, _config_of(model))
    if is_transformer_lens_model(model):
        return layout.canonical_weights(state)
    return dict(state)


def _config_of(model: nn.Module) -> "TransformerConfig":
    """The `TransformerConfig` of a bridge: the one mechmem built it from, else derived from its cfg."""
    config = getattr(model, "mechmem_config", None)
    return config if isinstance(config, TransformerConfig) else config_from_hooked_transformer(model)


def load_canonical_state_dict(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Load canonical weights (buffers of older files are ignored) into either backend's model."""
    if is_bridge(model):
        model.load_state_dict(layout.to_bridge(state, _config_of(model)), strict=True)
        return
    if is_transformer_lens_model(model):
        missing = model.load_state_dict(layout.canonical_weights(state), strict=False)
        bad = [k for k in missing.missing_keys if not k.endswith(layout.BUFFER_SUFFIXES)]
        if bad or missing.unexpected_keys:
            raise MechmemError(
                f"weights do not match the model (missing {bad[:3]}, extra {missing.unexpected_keys[:3]})"
            )
        return
    model.load_state_dict(state)
