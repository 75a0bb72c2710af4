"""The one place that constructs and loads TransformerLens models, under either major version.

Two backends, detected at import:
    - TransformerLens 3.9+ (`BACKEND == "hooked"`): a `HookedTransformer` from a `HookedTransformerConfig`;
    - TransformerLens 4.x (`BACKEND == "bridge"`): a `TransformerBridge` around TransformerLens's native
      model, built from a `TransformerBridgeConfig` (what `TransformerBridge.boot_native` builds, with the
      instance-level differences listed at `_native_model`).
Both expose the same hook names (`blocks.L.attn.hook_z`, `hook_pattern`, `hook_resid_pre`, ...), the same
weight views (`W_Q`, `W_E`, `blocks[L].attn.W_O`, `OV`, ...), `run_with_hooks`, `run_with_cache` and
`hooks(...)`, so the analyses never ask which one they hold; the on-request attention hooks
(`hook_q_input`, `hook_attn_in`, `attn.hook_result`) TransformerLens 4's native attention lacks are added by
`mechmem.models.native_hooks`. Weights travel in one canonical layout
(HookedTransformer's names and shapes, `mechmem.models.layout`): `canonical_state_dict` /
`load_canonical_state_dict` convert, so a checkpoint written under either version loads under the other with
the same logits, but for the models TransformerLens 4 cannot compute (`bridge_unsupported`).

`TransformerConfig` maps onto either config; `build_transformer` draws the initial weights in the canonical
layout from an explicit `torch.Generator` (TransformerLens's own init seeds the global RNG, which library code
must not do), applies fixed matrices (e.g. W_Q = identity) and freezes parameters by canonical name pattern.
The same seed gives the same weights under both backends.

Fixed and frozen parameters:
    `fixed` is a tuple of `(pattern, rule)` pairs applied after initialisation, in order. A pattern is an
    `fnmatch` glob over canonical parameter names (`"blocks.*.attn.W_Q"`); rules are `"identity"` (each head's
    matrix is the identity, which needs d_head == d_model), `"zero"`, `"one"` and `"normal"` (N(0, 1)
    entries). `frozen` is a tuple of globs; matching parameters get `requires_grad=False` and are never
    trained (on the bridge, the module weight that holds the canonical tensor is frozen). `init_std` overrides
    the normal init's standard deviation of the matrices (`W_*`); default is TransformerLens's gpt2 rule 0.8 /
    sqrt(d_model).
"""

import copy
import fnmatch
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from mechmem.config import ConfigMixin
from mechmem.errors import MechmemError
from mechmem.models import layout
from mechmem.models.hf_folder import check_hf_folder
from mechmem.models.registry import register_architecture

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import transformer_lens
    from transformer_lens import FactoredMatrix
    from transformer_lens.utilities.activation_functions import SUPPORTED_ACTIVATIONS

    try:  # TransformerLens 3.x
        from transformer_lens import HookedTransformer, HookedTransformerConfig
        from transformer_lens.hook_points import HookedRootModule, HookPoint
        from transformer_lens.utilities import activation_functions as _tl_activations

        BACKEND = "hooked"
    except ImportError:  # TransformerLens 4.x removed HookedTransformer
        from transformer_lens import HookedRootModule, TransformerBridge, TransformerBridgeConfig
        from transformer_lens.hook_points import HookPoint
        from transformer_lens.model_bridge.sources import build_bridge_from_module
        from transformer_lens.model_bridge.sources.native import NativeModel

        from mechmem.models import native_hooks

        HookedTransformer = None  # type: ignore[assignment,misc]
        BACKEND = "bridge"

TL_VERSION: str = getattr(transformer_lens, "__version__", None) or "unknown"
if TL_VERSION == "unknown":
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _pkg_version

    try:
        TL_VERSION = _pkg_version("transformer-lens")
    except PackageNotFoundError:  # pragma: no cover - metadata missing in odd installs
        pass

FIX_RULES = ("identity", "zero", "one", "normal")
NORMS = (None, "LN", "LNPre", "RMS", "RMSPre")
POSITIONS = ("standard", "rotary", "shortformer")

# Activations registered by mechmem users (papers), by name; see `register_activation`.
_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {}


def register_activation(name: str, fn: Callable[[Tensor], Tensor]) -> None:
    """Make `act_fn=name` buildable under either backend (e.g. a paper's purely linear MLP).

    Under TransformerLens 3.x the function joins TransformerLens's activation table; under 4.x the native MLP
    is built with a placeholder activation and given `fn` on the instance. TransformerLens's own code is
    untouched.
    """
    _ACTIVATIONS[name] = fn
    if BACKEND == "hooked":
        _tl_activations.SUPPORTED_ACTIVATIONS.setdefault(name, fn)


def known_activation(name: str) -> bool:
    """Whether `act_fn=name` names an activation: one of TransformerLens's (its `SUPPORTED_ACTIVATIONS`, under
    either version) or one registered with `register_activation`, by mechmem or by a paper plugin (the
    plugins are loaded on the first unknown name, since a paper registers its activation when imported)."""
    if name in SUPPORTED_ACTIVATIONS or name in _ACTIVATIONS:
        return True
    from mechmem.plugins import load_papers

    load_papers()
    return name in _ACTIVATIONS


# Architecture fields added for models brought from elsewhere; `to_dict` leaves them out at their defaults, so
# the config dict of every model mechmem trained before them (and the run identity built from it) is
# unchanged.
_ARCH_DEFAULTS: dict[str, Any] = {
    "positional_embedding_type": "standard",
    "rotary_dim": None,
    "rotary_base": 10000.0,
    "n_key_value_heads": None,
    "gated_mlp": False,
    "parallel_attn_mlp": False,
    "attn_types": None,
    "window_size": None,
    "eps": 1e-5,
    "attn_scale": None,
}


OPTIONAL_SIZES = ("d_head", "d_mlp", "d_vocab_out", "rotary_dim", "n_key_value_heads", "window_size")
"""Sizes a `TransformerConfig` may leave None (derived or unused); given, each is an integer >= 1."""


@dataclass(frozen=True)
class TransformerConfig(ConfigMixin):
    """A decoder-only transformer, built as a TransformerLens `HookedTransformer` or `TransformerBridge`."""

    n_layers: int
    """Number of transformer blocks."""
    d_model: int
    """Residual stream width."""
    n_heads: int
    """Attention heads per layer."""
    d_vocab: int
    """Input vocabulary size (token ids 0..d_vocab-1)."""
    n_ctx: int
    """Maximum sequence length."""
    d_head: int | None = None
    """Per-head width; None means d_model // n_heads."""
    d_mlp: int | None = None
    """MLP hidden width; None makes the model attention-only."""
    act_fn: str = "relu"
    """MLP activation: any TransformerLens activation, or one registered with `register_activation`."""
    normalization_type: str | None = None
    """None, "LN", "LNPre", "RMS" or "RMSPre" (before attention, MLP and unembedding)."""
    d_vocab_out: int | None = None
    """Output vocabulary size; None means d_vocab."""
    use_attn_scale: bool = True
    """Divide attention scores by attn_scale (default sqrt(d_head))."""
    init_std: float | None = None
    """Std of the normal init of W_* matrices; None uses 0.8 / sqrt(d_model)."""
    fixed: tuple[tuple[str, str], ...] = ()
    """(parameter glob, rule) pairs applied after init; rules: identity, zero, one, normal."""
    frozen: tuple[str, ...] = ()
    """Parameter globs that are never trained (requires_grad=False)."""
    arch: str = "transformer"
    """Architecture name for the model registry; always "transformer" here."""
    positional_embedding_type: str = "standard"
    """"standard" (learned W_pos), "rotary" or "shortformer" (W_pos added to queries and keys only)."""
    rotary_dim: int | None = None
    """Rotary: how many of each head's dimensions rotate (None: all of d_head)."""
    rotary_base: float = 10000.0
    """Rotary: the frequency base."""
    n_key_value_heads: int | None = None
    """Grouped-query attention: key/value heads shared by n_heads / n_key_value_heads query heads each."""
    gated_mlp: bool = False
    """Gated MLP: act(x W_gate) * (x W_in) + b_in, then W_out."""
    parallel_attn_mlp: bool = False
    """Attention and MLP read the same resid_pre and add to it together."""
    attn_types: tuple[str, ...] | None = None
    """Per layer "global" or "local" (local heads see the last window_size positions)."""
    window_size: int | None = None
    """Local attention window."""
    eps: float = 1e-5
    """Norm epsilon."""
    attn_scale: float | None = None
    """Attention score divisor when use_attn_scale; None means sqrt(d_head)."""

    def __post_init__(self) -> None:
        if self.arch != "transformer":
            raise ValueError(f"arch must be 'transformer', got {self.arch!r}")
        for name in ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx", *OPTIONAL_SIZES):
            value = getattr(self, name)
            if value is None and name in OPTIONAL_SIZES:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.normalization_type not in NORMS:
            raise ValueError(f"normalization_type must be one of {NORMS}")
        if not known_activation(self.act_fn):  # with or without an MLP: a config never holds garbage
            raise ValueError(
                f"act_fn {self.act_fn!r} is neither a TransformerLens activation "
                f"({', '.join(SUPPORTED_ACTIVATIONS)}) nor one registered with register_activation"
            )
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads when d_head is not given")
        if self.positional_embedding_type not in POSITIONS:
            raise ValueError(f"positional_embedding_type must be one of {POSITIONS}")
        if self.n_key_value_heads is not None and self.n_heads % self.n_key_value_heads:
            raise ValueError("n_heads must be divisible by n_key_value_heads")
        if self.attn_types is not None and (
            len(self.attn_types) != self.n_layers or not set(self.attn_types) <= {"global", "local"}
        ):
            raise ValueError("attn_types needs one 'global' or 'local' per layer")
        if self.attn_types is not None and "local" in self.attn_types and not self.window_size:
            raise ValueError("local attention needs window_size")
        for pair in self.fixed:
            if len(pair) != 2 or pair[1] not in FIX_RULES:
                raise ValueError(f"fixed entries are (glob, rule) with rule in {FIX_RULES}; got {pair!r}")

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        for name, default in _ARCH_DEFAULTS.items():
            if data[name] == default:
                del data[name]
        return data

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    def tl_kwargs(self) -> dict[str, Any]:
        """The TransformerLens config fields of this model (common to both backends' config classes)."""
        kwargs: dict[str, Any] = {
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "d_head": self.head_dim,
            "d_mlp": self.d_mlp,
            "d_vocab": self.d_vocab,
            "d_vocab_out": self.d_vocab_out if self.d_vocab_out is not None else self.d_vocab,
            "n_ctx": self.n_ctx,
            "act_fn": self.act_fn if self.d_mlp is not None else None,
            "attn_only": self.d_mlp is None,
            "normalization_type": self.normalization_type,
            "use_attn_scale": self.use_attn_scale,
            "positional_embedding_type": self.positional_embedding_type,
            "n_key_value_heads": self.n_key_value_heads,
            "gated_mlp": self.gated_mlp,
            "parallel_attn_mlp": self.parallel_attn_mlp,
            "eps": self.eps,
            "init_weights": False,
            "default_prepend_bos": False,
            "device": "cpu",
        }
        if self.positional_embedding_type == "rotary":
            kwargs |= {"rotary_dim": self.rotary_dim or self.head_dim, "rotary_base": self.rotary_base}
        if self.attn_types is not None:
            kwargs |= {"attn_types": list(self.attn_types), "window_size": self.window_size}
            # TransformerLens reads attn_types only with use_local_attn on (else every layer is global)
            kwargs["use_local_attn"] = "local" in self.attn_types
        if self.attn_scale is not None:
            kwargs["attn_scale"] = self.attn_scale
        return kwargs

    def to_hooked_config(self) -> "HookedTransformerConfig":
        """The equivalent `HookedTransformerConfig` (TransformerLens 3.x; weights are initialised
        separately)."""
        return hooked_transformer_config(**self.tl_kwargs())


# -- initial weights -----------------------------------------------------------------------------------------
def _apply_rule(param: Tensor, rule: str, name: str, generator: torch.Generator | None) -> None:
    if rule == "zero":
        param.zero_()
    elif rule == "one":
        param.fill_(1.0)
    elif rule == "normal":
        param.copy_(torch.randn(param.shape, generator=generator))
    elif rule == "identity":
        if param.shape[-1] != param.shape[-2]:
            raise MechmemError(f"cannot fix {name} to the identity: shape {tuple(param.shape)} is not square")
        eye = torch.eye(param.shape[-1])
        param.copy_(eye.expand_as(param))


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


def initialise(model: nn.Module, config: TransformerConfig, generator: torch.Generator | None) -> None:
    """Give `model` the initial weights `initial_weights(config, generator)`."""
    load_canonical_state_dict(model, initial_weights(config, generator))


def canonical_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """Canonical weight name -> the parameter that holds it (on the bridge, the module weight it lives in).

    A model that is not a TransformerLens 4 bridge around TransformerLens's native model (a HookedTransformer,
    a paper's own module, a bridge around a Hugging Face model) gives its `named_parameters()`: the canonical
    layout maps the native model's weights only.
    """
    if not is_native_bridge(model):
        return dict(model.named_parameters())
    config = _config_of(model)
    bridge_params = dict(model.state_dict(keep_vars=True))
    probe = {name: torch.zeros(shape) for name, shape in layout.canonical_shapes(config).items()}
    out = {}
    for name, value in probe.items():
        keys = layout.to_bridge({name: value}, config)
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


# -- the two backends ----------------------------------------------------------------------------------------
TL3_REQUIREMENT = "transformer-lens>=3.9,<4"
"""The environment that builds every `TransformerConfig` (HookedTransformer)."""


def bridge_unsupported(config: Any) -> str | None:
    """Why TransformerLens 4's native model cannot compute `config` as HookedTransformer does, in one line
    naming the environment that can; None if it can (or `config` is not a `TransformerConfig`).

    The same line refuses to build such a model under TransformerLens 4, refuses to load its checkpoint
    there, and warns when TransformerLens 3.9 writes one.
    """
    if not isinstance(config, TransformerConfig):
        return None
    if config.positional_embedding_type == "shortformer":
        reason = "shortformer positions (its native model has standard and rotary positions only)"
    elif config.parallel_attn_mlp:
        reason = "parallel attention and MLP (its native block is sequential)"
    elif config.attn_types is not None and "local" in config.attn_types:
        reason = "local attention (its native model ignores attn_types: every layer is global)"
    else:
        return None
    return f"TransformerLens 4 cannot compute this model: {reason}; it loads with {TL3_REQUIREMENT}"


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
    custom_act = _ACTIVATIONS.get(config.act_fn) if config.d_mlp is not None else None
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
    initialise(model, config, generator)
    apply_freezing(model, config.frozen)
    return model


def is_bridge(model: Any) -> bool:
    """True for a TransformerLens 4 `TransformerBridge`."""
    return BACKEND == "bridge" and isinstance(model, TransformerBridge)


def is_native_bridge(model: Any) -> bool:
    """True for a TransformerLens 4 bridge around TransformerLens's native model (what `build_transformer` and
    `raw_hooked_transformer` make), False for one around a Hugging Face model (`load_pretrained`)."""
    return is_bridge(model) and isinstance(getattr(model, "original_model", None), NativeModel)


def is_hooked_transformer(model: Any) -> bool:
    """True for a TransformerLens transformer (a `HookedTransformer`, or under TransformerLens 4 a
    `TransformerBridge`): hook names, weight views and `cfg` as the analyses expect them."""
    if BACKEND == "hooked":
        return isinstance(model, HookedTransformer)
    return isinstance(model, TransformerBridge)


def last_start_layer(model: Any) -> int | None:
    """The latest block a forward pass may start at with `start_at_layer` (n_layers: final norm and
    unembedding only), or None when a pass must run in full.

    Shortformer models re-add the positional embedding in every attention layer, so they always run in full;
    TransformerLens 4's bridge starts at a block, never after the last one.
    """
    if not is_hooked_transformer(model) or model.cfg.positional_embedding_type == "shortformer":
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
    """Why `model` has no per-head query/key/value input hooks (`blocks.L.hook_q_input`, ...), or None.

    Edge-level circuit discovery patches those inputs. Models mechmem builds have them under either backend
    (`mechmem.models.native_hooks` under TransformerLens 4); a bridge TransformerLens 4 loads has them where
    its attention class does.
    """
    if not is_bridge(model) or isinstance(model, native_hooks.NativeHookBridge):
        return None
    try:
        model._validate_attention_fork_supported("use_split_qkv_input")
    except NotImplementedError:
        return f"TransformerLens {TL_VERSION}'s attention of this model has no per-head Q/K/V input hooks"
    return None


def move_model(model: nn.Module, device: str | torch.device) -> nn.Module:
    """Move a model to `device`, keeping a TransformerLens model's cfg.device in sync and without its
    print."""
    if is_hooked_transformer(model):
        return model.to(device, print_details=False)
    return model.to(device)


def canonical_state_dict(model: nn.Module, *, grads: bool = False) -> dict[str, Tensor]:
    """The model's weights (or with `grads=True` their gradients, zero where none) in the canonical layout
    (`mechmem.models.layout`).

    A model that is not a TransformerLens transformer (a paper's own hooked module) gives its plain
    state_dict.
    """
    state = model.state_dict(keep_vars=grads)
    if grads:
        state = {
            k: (v.grad if v.grad is not None else torch.zeros_like(v)).detach()
            for k, v in state.items()
            if isinstance(v, nn.Parameter)
        }
    if is_bridge(model):
        return layout.from_bridge(state, _config_of(model))
    if is_hooked_transformer(model):
        return layout.canonical_weights(state)
    return dict(state)


def _config_of(model: nn.Module) -> "TransformerConfig":
    """The `TransformerConfig` of a bridge: the one mechmem built it from, else derived from its cfg."""
    config = getattr(model, "mechmem_config", None)
    return config if isinstance(config, TransformerConfig) else config_from_hooked_transformer(model)


def load_canonical_state_dict(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Load canonical weights (buffers of older files are ignored) into either backend's model."""
    if is_bridge(model):
        config = _config_of(model)
        model.load_state_dict(layout.to_bridge(state, config), strict=True)
        return
    if is_hooked_transformer(model):
        missing = model.load_state_dict(layout.canonical_weights(state), strict=False)
        bad = [k for k in missing.missing_keys if not k.endswith(layout.BUFFER_SUFFIXES)]
        if bad or missing.unexpected_keys:
            raise MechmemError(
                f"weights do not match the model (missing {bad[:3]}, extra {missing.unexpected_keys[:3]})"
            )
        return
    model.load_state_dict(state)


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


# -- bringing your own model ---------------------------------------------------------------------------------
_BEHAVIOUR = [
    "n_layers",
    "d_model",
    "n_heads",
    "d_head",
    "d_mlp",
    "d_vocab",
    "d_vocab_out",
    "n_ctx",
    "act_fn",
    "attn_only",
    "normalization_type",
    "use_attn_scale",
    "attn_scale",
    "eps",
    "positional_embedding_type",
    "rotary_dim",
    "rotary_base",
    "n_key_value_heads",
    "gated_mlp",
    "parallel_attn_mlp",
    "attn_types",
    "window_size",
    "use_local_attn",
    "final_rms",
    "rotary_adjacent_pairs",
    "use_qk_norm",
    "post_embedding_ln",
    "use_normalization_before_and_after",
    "attn_scores_soft_cap",
    "output_logits_soft_cap",
    "scale_attn_by_inverse_layer_idx",
    "attention_dir",
    "use_NTK_by_parts_rope",
    "rope_scaling",
    "dtype",
    "relative_attention_max_distance",
    "num_experts",
    "clip_qkv",
    "use_logn_attn",
    "use_dynamic_ntk_rope",
    "rotary_base_local",
    "rotary_scaling_factor",
    "use_yarn_rope",
    "use_attention_sinks",
]
"""TransformerLens config fields that change what a model computes (compared at save; both backends have
them)."""


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, Tensor):
        return value.item()
    return list(value) if isinstance(value, tuple) else value


def config_differences(model: nn.Module, config: Any) -> list[str]:
    """Settings of a TransformerLens model's cfg that `config` would build differently ("field: model X,
    config Y").

    Empty for models that are not TransformerLens transformers or configs that are not `TransformerConfig`s.
    """
    if not is_hooked_transformer(model) or not isinstance(config, TransformerConfig):
        return []
    mine = model.cfg
    built = hooked_transformer_config(**config.tl_kwargs())
    skip = {"init_weights", "default_prepend_bos", "device"}
    if config.d_mlp is None and mine.attn_only:
        skip |= {"act_fn", "d_mlp", "gated_mlp"}
    if not config.use_attn_scale and not mine.use_attn_scale:
        skip.add("attn_scale")
    if config.positional_embedding_type != "rotary":
        skip |= {"rotary_dim", "rotary_base"}
    if config.attn_types is None and not getattr(mine, "use_local_attn", False):
        skip |= {"attn_types", "window_size"}  # ignored by TransformerLens without use_local_attn
    out = []
    for name in _BEHAVIOUR:
        if name in skip or not hasattr(mine, name):
            continue
        want, got = _plain(getattr(built, name, None)), _plain(getattr(mine, name))
        if name == "rotary_dim":  # unset: TransformerLens rotates the whole head
            want, got = want or built.d_head, got or mine.d_head
        if want != got and not (
            isinstance(want, (int, float)) and isinstance(got, (int, float)) and math.isclose(want, got)
        ):
            out.append(f"{name}: model {got!r}, config {want!r}")
    return out


def config_from_hooked_transformer(model: nn.Module) -> TransformerConfig:
    """The `TransformerConfig` that rebuilds `model`, derived from `model.cfg`.

    Raises `MechmemError` naming every cfg setting mechmem cannot reproduce (relative positions, QK norms,
    soft caps, a dtype other than float32, ...).
    """
    if not is_hooked_transformer(model):
        raise MechmemError(f"expected a TransformerLens transformer, got {type(model).__name__}")
    cfg = model.cfg
    rotary = cfg.positional_embedding_type == "rotary"
    use_scale = bool(cfg.use_attn_scale)
    default_scale = math.sqrt(cfg.d_head)
    scale = float(cfg.attn_scale) if use_scale and float(cfg.attn_scale) > 0 else default_scale
    local = getattr(cfg, "attn_types", None) if getattr(cfg, "use_local_attn", False) else None
    try:
        config = TransformerConfig(
            n_layers=cfg.n_layers,
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            d_vocab=cfg.d_vocab,
            n_ctx=cfg.n_ctx,
            d_head=None if cfg.d_head * cfg.n_heads == cfg.d_model else cfg.d_head,
            d_mlp=None if cfg.attn_only else cfg.d_mlp,
            act_fn=(cfg.act_fn or "relu") if not cfg.attn_only else "relu",
            normalization_type=cfg.normalization_type,
            d_vocab_out=None if cfg.d_vocab_out in (cfg.d_vocab, -1) else cfg.d_vocab_out,
            use_attn_scale=use_scale,
            positional_embedding_type=cfg.positional_embedding_type,
            rotary_dim=(None if cfg.rotary_dim in (None, cfg.d_head) else cfg.rotary_dim) if rotary else None,
            rotary_base=float(cfg.rotary_base) if rotary else 10000.0,
            n_key_value_heads=getattr(cfg, "n_key_value_heads", None),
            gated_mlp=bool(cfg.gated_mlp) and not cfg.attn_only,
            parallel_attn_mlp=bool(cfg.parallel_attn_mlp),
            attn_types=tuple(local) if local is not None else None,
            window_size=cfg.window_size if local is not None else None,
            eps=float(cfg.eps),
            attn_scale=None if math.isclose(scale, default_scale) or not use_scale else scale,
        )
    except (TypeError, ValueError) as exc:
        raise MechmemError(f"cannot describe this model as a mechmem TransformerConfig: {exc}") from None
    differences = config_differences(model, config)
    if differences:
        raise MechmemError(f"mechmem cannot reproduce this model's settings: {'; '.join(differences)}")
    return config


# -- models from Hugging Face --------------------------------------------------------------------------------
def load_pretrained(name_or_path: str, *, device: str | torch.device = "cpu") -> nn.Module:
    """A Hugging Face causal language model as a TransformerLens model, weights exactly as published.

    `name_or_path` is a Hub name (downloaded by `transformers`, as TransformerLens does) or a folder written
    by `save_pretrained`. TransformerLens 3.x: a `HookedTransformer` from TransformerLens's own config
    conversion and weight mapping (no layer-norm folding or centring, so the logits are the Hugging Face
    model's); 4.x: `TransformerBridge.boot_transformers` in compatibility mode. Raises `MechmemError` with one
    line when the model cannot be read or converted.
    """
    from pathlib import Path

    local = Path(name_or_path).expanduser()
    source = str(local.resolve()) if local.exists() else name_or_path
    if local.exists() and not local.is_dir():
        raise MechmemError(f"--hf {name_or_path}: not a folder (a save_pretrained folder or a Hub name)")
    if local.exists():
        check_hf_folder(local, name_or_path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf_model = _hf_weights(source, name_or_path)
            if BACKEND == "bridge":
                model = TransformerBridge.boot_transformers(
                    source,
                    device=str(device),
                    dtype=torch.float32,
                    tokenizer=_placeholder_tokenizer(local),
                    hf_model=hf_model,
                )
                model.enable_compatibility_mode(disable_warnings=True, no_processing=True)
            else:
                model = _hooked_from_pretrained(source, hf_model, device)
    except MechmemError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers / TransformerLens say why in their own words
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MechmemError(
            f"--hf {name_or_path}: TransformerLens {TL_VERSION} cannot load it "
            f"({type(exc).__name__}: {first[:200]})"
        ) from None
    return model.eval()


def _hf_weights(source: str, name: str) -> nn.Module:
    """The Hugging Face model of `source` as `transformers` loads it, from safetensors only (a pickled
    pytorch_model.bin is never read), with every weight it declares read from the files: a weight missing
    (which transformers would draw at random), one left over or one of another shape is a `MechmemError`."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a tiny model loads at once; an error must stay the one line on stderr
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            source,
            dtype=torch.float32,
            use_safetensors=True,
            attn_implementation="eager",
            output_loading_info=True,
        )
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    for what in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(k) for k in info.get(what) or ())
        if keys:
            raise MechmemError(
                f"--hf {name}: its weights do not match its config ({what.replace('_', ' ')}: "
                f"{', '.join(keys[:3])}{', ...' if len(keys) > 3 else ''})"
            )
    return model


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")
"""Files of which a save_pretrained folder holding a tokenizer has at least one."""


def _placeholder_tokenizer(folder: Any) -> Any:
    """For a local folder without a tokenizer (a tiny model needs none: mechmem feeds token ids), a word-level
    tokenizer naming each id of the config's vocabulary (`t0`, `t1`, ...); None otherwise (the model's own
    tokenizer is loaded)."""
    import json

    if not folder.is_dir() or any((folder / name).exists() for name in TOKENIZER_FILES):
        return None
    try:
        vocab_size = json.loads((folder / "config.json").read_text()).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(vocab_size, int) or not 1 <= vocab_size <= 10**7:
        return None
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0"
    )


def _hooked_from_pretrained(source: str, hf_model: nn.Module, device: str | torch.device) -> nn.Module:
    """`HookedTransformer.from_pretrained_no_processing` for a Hub name or a local folder (TransformerLens
    3.9's own entry point looks local folders up among its official names), from TransformerLens's loading
    functions."""
    import shutil
    import tempfile
    from pathlib import Path

    from transformer_lens import loading

    if not Path(source).is_dir():
        cfg = loading.get_pretrained_model_config(source, device=str(device), dtype=torch.float32)
    else:  # TransformerLens 3.9 takes a path naming "llama" or "gemma" for that family and reads no config
        neutral = Path(tempfile.mkdtemp(prefix="mechmem-hf-config.")) / "model"
        try:
            neutral.mkdir()
            shutil.copyfile(Path(source) / "config.json", neutral / "config.json")
            cfg = loading.get_pretrained_model_config(str(neutral), device=str(device), dtype=torch.float32)
        finally:
            shutil.rmtree(neutral.parent, ignore_errors=True)
    cfg.tokenizer_name = None  # mechmem feeds token ids; a folder from save_pretrained may hold no tokenizer
    cfg.default_prepend_bos = False
    model = HookedTransformer(cfg, move_to_device=False)
    state = loading.get_pretrained_state_dict(source, cfg, hf_model=hf_model, dtype=torch.float32)
    model.load_and_process_state_dict(
        state, fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    )
    return move_model(model, device)


register_architecture("transformer", TransformerConfig, build_transformer)

__all__ = [
    "BACKEND",
    "TL3_REQUIREMENT",
    "TL_VERSION",
    "FactoredMatrix",
    "HookPoint",
    "HookedRootModule",
    "HookedTransformer",
    "TransformerConfig",
    "apply_freezing",
    "attention_scale",
    "bridge_unsupported",
    "build_transformer",
    "canonical_parameters",
    "canonical_state_dict",
    "config_differences",
    "config_from_hooked_transformer",
    "hooked_transformer_config",
    "initial_weights",
    "initialise",
    "is_bridge",
    "is_hooked_transformer",
    "is_native_bridge",
    "known_activation",
    "last_start_layer",
    "load_canonical_state_dict",
    "load_pretrained",
    "move_model",
    "raw_hooked_transformer",
    "register_activation",
    "split_qkv_unsupported",
]
