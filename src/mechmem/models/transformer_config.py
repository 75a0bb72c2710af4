"""`TransformerConfig`: a decoder-only transformer's settings, mapped onto TransformerLens's config under
either backend, and derived back from a TransformerLens model's cfg (`config_from_hooked_transformer`).

`fixed` rules apply in order after initialisation to the parameters whose canonical name matches an `fnmatch`
glob (`"blocks.*.attn.W_Q"`): "identity" (each head's matrix; needs d_head == d_model), "zero", "one",
"normal" (N(0, 1)). On the bridge, `frozen` freezes the module weight that holds the canonical tensor.
"""

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from mechmem.config import ConfigMixin
from mechmem.errors import MechmemError
from mechmem.models.backend import (
    SUPPORTED_ACTIVATIONS,
    TL3_REQUIREMENT,
    HookedTransformerConfig,
    hooked_transformer_config,
    is_transformer_lens_model,
    known_activation,
)

FIX_RULES = ("identity", "zero", "one", "normal")
NORMS = (None, "LN", "LNPre", "RMS", "RMSPre")
POSITIONS = ("standard", "rotary", "shortformer")

ARCH_FIELDS = (
    "positional_embedding_type", "rotary_dim", "rotary_base", "n_key_value_heads", "gated_mlp",
    "parallel_attn_mlp", "attn_types", "window_size", "eps", "attn_scale",
)  # fmt: skip
"""Architecture fields added for models brought from elsewhere; `to_dict` leaves them out at their defaults,
so the config dict of every model mechmem trained before them (and the run identity built from it) is
unchanged."""
TL_FIELDS = (
    "n_layers", "d_model", "n_heads", "d_mlp", "d_vocab", "n_ctx", "normalization_type", "use_attn_scale",
    "positional_embedding_type", "n_key_value_heads", "gated_mlp", "parallel_attn_mlp", "eps",
)  # fmt: skip
"""Fields passed to TransformerLens's config as they are."""

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
        for f in dataclasses.fields(self):
            if f.name in ARCH_FIELDS and data[f.name] == f.default:
                del data[f.name]
        return data

    @property
    def head_dim(self) -> int:
        return self.d_head if self.d_head is not None else self.d_model // self.n_heads

    def tl_kwargs(self) -> dict[str, Any]:
        """The TransformerLens config fields of this model (common to both backends' config classes)."""
        kwargs: dict[str, Any] = {name: getattr(self, name) for name in TL_FIELDS}
        kwargs |= {
            "d_head": self.head_dim,
            "d_vocab_out": self.d_vocab_out if self.d_vocab_out is not None else self.d_vocab,
            "act_fn": self.act_fn if self.d_mlp is not None else None,
            "attn_only": self.d_mlp is None,
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
        """The equivalent `HookedTransformerConfig` (TransformerLens 3.x; weights initialised separately)."""
        return hooked_transformer_config(**self.tl_kwargs())


def bridge_unsupported(config: Any) -> str | None:
    """Why TransformerLens 4's native model cannot compute `config` as HookedTransformer does, in one line
    naming the environment that can; None if it can (or `config` is not a `TransformerConfig`). The line
    refuses to build or load such a model under TransformerLens 4, and warns when TransformerLens 3.9 saves
    one."""
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


_BEHAVIOUR = (
    "n_layers", "d_model", "n_heads", "d_head", "d_mlp", "d_vocab", "d_vocab_out", "n_ctx", "act_fn",
    "attn_only", "normalization_type", "use_attn_scale", "attn_scale", "eps", "positional_embedding_type",
    "rotary_dim", "rotary_base", "n_key_value_heads", "gated_mlp", "parallel_attn_mlp", "attn_types",
    "window_size", "use_local_attn", "final_rms", "rotary_adjacent_pairs", "use_qk_norm", "post_embedding_ln",
    "use_normalization_before_and_after", "attn_scores_soft_cap", "output_logits_soft_cap",
    "scale_attn_by_inverse_layer_idx", "attention_dir", "use_NTK_by_parts_rope", "rope_scaling", "dtype",
    "relative_attention_max_distance", "num_experts", "clip_qkv", "use_logn_attn", "use_dynamic_ntk_rope",
    "rotary_base_local", "rotary_scaling_factor", "use_yarn_rope", "use_attention_sinks",
)  # fmt: skip
"""TransformerLens config fields that change what a model computes (compared at save, either backend)."""


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, Tensor):
        return value.item()
    return list(value) if isinstance(value, tuple) else value


def config_differences(model: nn.Module, config: Any) -> list[str]:
    """Settings of a TransformerLens model's cfg that `config` would build differently ("field: model X,
    config Y"); empty unless both are TransformerLens / `TransformerConfig`."""
    if not is_transformer_lens_model(model) or not isinstance(config, TransformerConfig):
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
    """The `TransformerConfig` that rebuilds `model`; a `MechmemError` names every cfg setting mechmem cannot
    reproduce (relative positions, QK norms, soft caps, a dtype other than float32, ...)."""
    if not is_transformer_lens_model(model):
        raise MechmemError(f"expected a TransformerLens transformer, got {type(model).__name__}")
    cfg = model.cfg
    rotary = cfg.positional_embedding_type == "rotary"
    use_scale = bool(cfg.use_attn_scale)
    default_scale = math.sqrt(cfg.d_head)
    scale = float(cfg.attn_scale) if use_scale and float(cfg.attn_scale) > 0 else default_scale
    local = getattr(cfg, "attn_types", None) if getattr(cfg, "use_local_attn", False) else None
    try:
        config = TransformerConfig(
            **{name: getattr(cfg, name) for name in ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx")},
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
