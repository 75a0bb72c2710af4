"""The one place that constructs TransformerLens models.

mechmem's `TransformerConfig` maps onto `HookedTransformerConfig`; `build_transformer` builds the
`HookedTransformer`, draws its initial weights from an explicit `torch.Generator` (TransformerLens's own init
seeds the global RNG, which library code must not do), applies fixed matrices (e.g. W_Q = identity) and freezes
parameters by name pattern. Moving to TransformerLens 4.x should touch only this file.

Fixed and frozen parameters:
    `fixed` is a tuple of `(pattern, rule)` pairs applied after initialisation, in order. A pattern is an
    `fnmatch` glob over parameter names (`"blocks.*.attn.W_Q"`); rules are `"identity"` (each head's matrix is
    the identity, which needs d_head == d_model), `"zero"`, `"one"` and `"normal"` (N(0, 1) entries).
    `frozen` is a tuple of globs; matching parameters get `requires_grad=False` and are never trained.
    `init_std` overrides the normal init's standard deviation of the matrices (`W_*`); default is
    TransformerLens's gpt2 rule 0.8 / sqrt(d_model).
"""

import fnmatch
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from mechmem.config import ConfigMixin
from mechmem.errors import MechmemError
from mechmem.models.registry import register_architecture

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import transformer_lens
    from transformer_lens import FactoredMatrix, HookedTransformer, HookedTransformerConfig
    from transformer_lens.hook_points import HookedRootModule, HookPoint
    from transformer_lens.utilities import activation_functions as _tl_activations

# A purely linear MLP (the "W_F" feed-forward of Bietti et al.); TransformerLens has no identity activation.
_tl_activations.SUPPORTED_ACTIVATIONS.setdefault("linear", lambda x: x)

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


@dataclass(frozen=True)
class TransformerConfig(ConfigMixin):
    """A tiny decoder-only transformer, built as a TransformerLens `HookedTransformer`."""

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
    """MLP activation: any TransformerLens activation, or "linear"."""
    normalization_type: str | None = None
    """None, "LN", "LNPre", "RMS" or "RMSPre" (before attention, MLP and unembedding)."""
    d_vocab_out: int | None = None
    """Output vocabulary size; None means d_vocab."""
    use_attn_scale: bool = True
    """Divide attention scores by sqrt(d_head)."""
    init_std: float | None = None
    """Std of the normal init of W_* matrices; None uses 0.8 / sqrt(d_model)."""
    fixed: tuple[tuple[str, str], ...] = ()
    """(parameter glob, rule) pairs applied after init; rules: identity, zero, one, normal."""
    frozen: tuple[str, ...] = ()
    """Parameter globs that are never trained (requires_grad=False)."""
    arch: str = "transformer"
    """Architecture name for the model registry; always "transformer" here."""

    def __post_init__(self) -> None:
        if self.arch != "transformer":
            raise ValueError(f"arch must be 'transformer', got {self.arch!r}")
        if self.normalization_type not in NORMS:
            raise ValueError(f"normalization_type must be one of {NORMS}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads when d_head is not given")
        for pair in self.fixed:
            if len(pair) != 2 or pair[1] not in FIX_RULES:
                raise ValueError(f"fixed entries are (glob, rule) with rule in {FIX_RULES}; got {pair!r}")

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    def to_hooked_config(self) -> "HookedTransformerConfig":
        """The equivalent `HookedTransformerConfig` (weights are initialised separately)."""
        return HookedTransformerConfig(
            n_layers=self.n_layers,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_head=self.head_dim,
            d_mlp=self.d_mlp,
            d_vocab=self.d_vocab,
            d_vocab_out=self.d_vocab_out if self.d_vocab_out is not None else self.d_vocab,
            n_ctx=self.n_ctx,
            act_fn=self.act_fn if self.d_mlp is not None else None,
            attn_only=self.d_mlp is None,
            normalization_type=self.normalization_type,
            use_attn_scale=self.use_attn_scale,
            positional_embedding_type="standard",
            init_weights=False,
            default_prepend_bos=False,
            device="cpu",
        )


def _apply_rule(param: torch.Tensor, rule: str, name: str, generator: torch.Generator | None) -> None:
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


def initialise(model: torch.nn.Module, config: TransformerConfig, generator: torch.Generator | None) -> None:
    """Draw all W_* matrices from N(0, std^2) with `generator`, zero the biases, then apply `fixed` rules."""
    std = config.init_std if config.init_std is not None else 0.8 / math.sqrt(config.d_model)
    named = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in named.items():
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith("W_"):
                param.copy_(torch.randn(param.shape, generator=generator) * std)
            elif leaf.startswith("b_"):
                param.zero_()
        for pattern, rule in config.fixed:
            hits = fnmatch.filter(named, pattern)
            if not hits:
                raise MechmemError(f"fixed pattern {pattern!r} matches no parameter")
            for name in hits:
                _apply_rule(named[name], rule, name, generator)


def apply_freezing(model: torch.nn.Module, patterns: tuple[str, ...] | list[str]) -> list[str]:
    """Set requires_grad=False on parameters matching any glob; returns the frozen names."""
    named = dict(model.named_parameters())
    frozen: list[str] = []
    for pattern in patterns:
        hits = fnmatch.filter(named, pattern)
        if not hits:
            raise MechmemError(f"frozen pattern {pattern!r} matches no parameter")
        frozen.extend(hits)
    for name in set(frozen):
        named[name].requires_grad_(False)
    return sorted(set(frozen))


def build_transformer(
    config: TransformerConfig, *, generator: torch.Generator | None = None
) -> "HookedTransformer":
    """Build a `HookedTransformer` for `config`, initialised from `generator`, with frozen parameters set."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(config.to_hooked_config())
    initialise(model, config, generator)
    apply_freezing(model, config.frozen)
    model.mechmem_config = config  # type: ignore[attr-defined]
    return model


def is_hooked_transformer(model: Any) -> bool:
    """True for TransformerLens `HookedTransformer` models (as opposed to other hooked modules)."""
    return isinstance(model, HookedTransformer)


def move_model(model: torch.nn.Module, device: str | torch.device) -> torch.nn.Module:
    """Move a model to `device`, keeping a HookedTransformer's cfg.device in sync and without its print."""
    if isinstance(model, HookedTransformer):
        return model.to(device, print_details=False)
    return model.to(device)


def hooked_transformer_config(**kwargs: Any) -> "HookedTransformerConfig":
    """A raw `HookedTransformerConfig`, for tests and planted circuits that set weights by hand."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return HookedTransformerConfig(**kwargs)


def raw_hooked_transformer(cfg: "HookedTransformerConfig") -> "HookedTransformer":
    """A `HookedTransformer` from a raw TL config (weights as TL initialises them)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return HookedTransformer(cfg)


# -- bringing your own model -----------------------------------------------------------------------------------
_NOT_BEHAVIOUR = frozenset(
    {
        "device",
        "n_devices",
        "use_attn_result",
        "use_split_qkv_input",
        "use_hook_mlp_in",
        "use_attn_in",
        "use_hook_tokens",
        "default_prepend_bos",
        "tokenizer_prepends_bos",
        "tokenizer_name",
        "model_name",
        "original_architecture",
        "from_checkpoint",
        "checkpoint_index",
        "checkpoint_label_type",
        "checkpoint_value",
        "init_mode",
        "initializer_range",
        "init_weights",
        "seed",
        "n_params",
        "trust_remote_code",
        "load_in_4bit",
        "quantization_method",
        "decoder_start_token_id",
        "layer_norm_folding",
        "ungroup_grouped_query_attention",
        "train_seq_length",
    }
)
"""HookedTransformerConfig fields that do not change what the model computes (hook switches, names, init)."""


def config_differences(model: torch.nn.Module, config: Any) -> list[str]:
    """Settings of a HookedTransformer's cfg that `config` would build differently ("field: model X, config Y").

    Empty for models that are not HookedTransformers or configs that are not `TransformerConfig`s.
    """
    if not isinstance(model, HookedTransformer) or not isinstance(config, TransformerConfig):
        return []
    import dataclasses

    built = config.to_hooked_config()
    skip = set(_NOT_BEHAVIOUR)
    if built.attn_only and model.cfg.attn_only:
        skip |= {"act_fn", "d_mlp", "gated_mlp"}
    if not built.use_attn_scale and not model.cfg.use_attn_scale:
        skip.add("attn_scale")
    out = []
    for f in dataclasses.fields(model.cfg):
        if f.name in skip or not hasattr(built, f.name):
            continue
        mine, theirs = getattr(built, f.name), getattr(model.cfg, f.name)
        if mine != theirs and not (
            isinstance(mine, float) and isinstance(theirs, float) and math.isclose(mine, theirs)
        ):
            plain = lambda v: v.item() if hasattr(v, "item") and not isinstance(v, torch.Tensor) else v
            out.append(f"{f.name}: model {plain(theirs)!r}, config {plain(mine)!r}")
    return out


def config_from_hooked_transformer(model: "HookedTransformer") -> TransformerConfig:
    """The `TransformerConfig` that rebuilds `model`, derived from `model.cfg`.

    Raises `MechmemError` naming every cfg setting mechmem cannot reproduce (rotary or shortformer positions,
    grouped-query attention, gated MLPs, a custom attn_scale or eps, a dtype other than float32, ...).
    """
    if not isinstance(model, HookedTransformer):
        raise MechmemError(f"expected a TransformerLens HookedTransformer, got {type(model).__name__}")
    cfg = model.cfg
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
            d_vocab_out=None if cfg.d_vocab_out == cfg.d_vocab else cfg.d_vocab_out,
            use_attn_scale=cfg.use_attn_scale,
        )
    except (TypeError, ValueError) as exc:
        raise MechmemError(f"cannot describe this model as a mechmem TransformerConfig: {exc}") from None
    differences = config_differences(model, config)
    if differences:
        raise MechmemError(f"mechmem cannot reproduce this model's settings: {'; '.join(differences)}")
    return config


register_architecture("transformer", TransformerConfig, build_transformer)

__all__ = [
    "TL_VERSION",
    "FactoredMatrix",
    "HookPoint",
    "HookedRootModule",
    "HookedTransformer",
    "TransformerConfig",
    "apply_freezing",
    "build_transformer",
    "config_differences",
    "config_from_hooked_transformer",
    "hooked_transformer_config",
    "initialise",
    "is_hooked_transformer",
    "move_model",
    "raw_hooked_transformer",
]
