"""Which TransformerLens this is, and the questions about a model whose answer depends on it.

Two backends, detected at import:
    - TransformerLens 3.9+ (`BACKEND == "hooked"`): a `HookedTransformer` from a `HookedTransformerConfig`;
    - TransformerLens 4.x (`BACKEND == "bridge"`): a `TransformerBridge` around TransformerLens's native
      model, built from a `TransformerBridgeConfig` (`mechmem.models.transformer`).
Both expose the same hook names, weight views (`W_Q`, `blocks[L].attn.W_O`, `OV`, ...), `run_with_hooks`,
`run_with_cache` and `hooks(...)`, so the analyses never ask which one they hold (`native_hooks` adds the
on-request attention hooks TransformerLens 4's native attention lacks). TransformerLens's classes are
imported here only; the other model modules take them from this one.
"""

import math
import warnings
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any

import torch
from torch import Tensor, nn

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import transformer_lens
    from transformer_lens import FactoredMatrix  # noqa: F401 - re-exported, as are the other TL names
    from transformer_lens.utilities.activation_functions import SUPPORTED_ACTIVATIONS

    try:  # TransformerLens 3.x
        from transformer_lens import HookedTransformer, HookedTransformerConfig
        from transformer_lens.hook_points import HookedRootModule, HookPoint

        TransformerBridge = TransformerBridgeConfig = NativeModel = build_bridge_from_module = None
        native_hooks = None
        BACKEND = "hooked"
    except ImportError:  # TransformerLens 4.x removed HookedTransformer
        from transformer_lens import HookedRootModule, TransformerBridge, TransformerBridgeConfig  # noqa: F401
        from transformer_lens.hook_points import HookPoint  # noqa: F401
        from transformer_lens.model_bridge.sources import build_bridge_from_module  # noqa: F401
        from transformer_lens.model_bridge.sources.native import NativeModel

        from mechmem.models import native_hooks

        HookedTransformer = HookedTransformerConfig = None  # type: ignore[assignment,misc]
        BACKEND = "bridge"

try:  # TransformerLens 4 has no __version__
    TL_VERSION: str = getattr(transformer_lens, "__version__", None) or package_version("transformer-lens")
except PackageNotFoundError:  # pragma: no cover - metadata missing in odd installs
    TL_VERSION = "unknown"

TL3_REQUIREMENT = "transformer-lens>=3.9,<4"
"""The environment that builds every `TransformerConfig` (HookedTransformer)."""

REGISTERED_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {}
"""Activations registered by mechmem users (papers), by name; see `register_activation`."""


def register_activation(name: str, fn: Callable[[Tensor], Tensor]) -> None:
    """Make `act_fn=name` buildable under either backend (e.g. a paper's purely linear MLP): under
    TransformerLens 3.x `fn` joins its activation table; under 4.x the native MLP is given `fn` on the
    instance."""
    REGISTERED_ACTIVATIONS[name] = fn
    if BACKEND == "hooked":
        SUPPORTED_ACTIVATIONS.setdefault(name, fn)


def known_activation(name: str) -> bool:
    """Whether `act_fn=name` is one of TransformerLens's activations or one registered with
    `register_activation` (the paper plugins, which register theirs on import, are loaded on a miss)."""
    if name in SUPPORTED_ACTIVATIONS or name in REGISTERED_ACTIVATIONS:
        return True
    from mechmem.plugins import load_papers

    load_papers()
    return name in REGISTERED_ACTIVATIONS


def is_bridge(model: Any) -> bool:
    """True for a TransformerLens 4 `TransformerBridge`."""
    return BACKEND == "bridge" and isinstance(model, TransformerBridge)


def is_native_bridge(model: Any) -> bool:
    """True for a TransformerLens 4 bridge around TransformerLens's native model (what `build_transformer` and
    `raw_hooked_transformer` make), False for one around a Hugging Face model (`load_pretrained`)."""
    return is_bridge(model) and isinstance(getattr(model, "original_model", None), NativeModel)


def is_transformer_lens_model(model: Any) -> bool:
    """True for a TransformerLens transformer (a `HookedTransformer`, or under TransformerLens 4 a
    `TransformerBridge`): hook names, weight views and `cfg` as the analyses expect them."""
    return isinstance(model, HookedTransformer if BACKEND == "hooked" else TransformerBridge)


def last_start_layer(model: Any) -> int | None:
    """The latest block a forward pass may start at with `start_at_layer` (n_layers: final norm and
    unembedding only; the bridge starts at a block), or None: shortformer models re-add the positional
    embedding in every attention layer, so they always run in full."""
    if not is_transformer_lens_model(model) or model.cfg.positional_embedding_type == "shortformer":
        return None
    return model.cfg.n_layers - 1 if is_bridge(model) else model.cfg.n_layers


def attention_scale(model: Any, layer: int) -> float:
    """What block `layer` divides its attention scores by (1.0 when unscaled), under either backend.

    HookedTransformer and TransformerLens 4's native attention hold the divisor (`attn_scale`, `scale`). A
    bridge around a Hugging Face model holds the Hugging Face attention, which keeps the reciprocal as
    `scaling`: head_dim ** -0.5 unless the model sets its own (TransformerLens 4.3 reads it for Llama-style
    attention and recomputes head_dim ** -0.5 for GPT-2 and GPT-NeoX). Without one, the divisor is the cfg's
    (attn_scale, sqrt(d_head) by default, 1 when use_attn_scale is off). GPT-2's
    scale_attn_by_inverse_layer_idx divides once more by layer + 1.
    """
    attn = model.blocks[layer].attn
    if not is_bridge(model):
        return float(attn.attn_scale)
    inner = attn.original_component
    if is_native_bridge(model):
        return float(inner.scale)
    cfg = model.cfg
    scaling = getattr(inner, "scaling", None)
    if scaling is not None:
        scale = 1.0 / float(scaling)
    elif not cfg.use_attn_scale:
        scale = 1.0
    else:
        scale = float(cfg.attn_scale) if float(cfg.attn_scale) > 0 else math.sqrt(cfg.d_head)
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        scale *= layer + 1
    return scale


def split_qkv_unsupported(model: Any) -> str | None:
    """Why `model` has no per-head query/key/value input hooks (`blocks.L.hook_q_input`, ...), which
    edge-level circuit discovery patches, or None. Models mechmem builds have them under either backend; a
    bridge TransformerLens 4 loads has them where its attention class does."""
    if not is_bridge(model) or isinstance(model, native_hooks.NativeHookBridge):
        return None
    try:
        model._validate_attention_fork_supported("use_split_qkv_input")
    except NotImplementedError:
        return f"TransformerLens {TL_VERSION}'s attention of this model has no per-head Q/K/V input hooks"
    return None


def move_model(model: nn.Module, device: str | torch.device) -> nn.Module:
    """Move a model to `device`, keeping a TransformerLens model's cfg.device in sync, without its print."""
    if is_transformer_lens_model(model):
        return model.to(device, print_details=False)
    return model.to(device)


def hooked_transformer_config(**kwargs: Any) -> Any:
    """A raw TransformerLens config (`HookedTransformerConfig`, or `TransformerBridgeConfig` under 4.x), for
    tests and planted circuits that set weights by hand."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if BACKEND == "hooked":
            return HookedTransformerConfig(**kwargs)
        return TransformerBridgeConfig(**{"default_prepend_bos": False, **kwargs})


def raw_hooked_transformer(cfg: Any) -> nn.Module:
    """A TransformerLens model from a raw config (weights as TransformerLens initialises them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if BACKEND == "hooked":
            return HookedTransformer(cfg)
        return TransformerBridge.boot_native(cfg)
