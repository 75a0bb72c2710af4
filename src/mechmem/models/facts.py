"""The one-layer fact-memorisation model with every published toggle, as a hooked model.

Architecture (Linsefors & Bushnaq, `models.MemoryToyModel`), inputs are the two tokens (t1, t2) of a fact:

    mixing = "attn"    x = W_E[t] + W_pos[p]; resid_mid = x + Attn(ln1(x))       (one head, causal)
    mixing = "uniform" as "attn" with the pattern fixed at 1/2, 1/2 on the last position (W_Q = W_K = 0)
    mixing = "2emb"    resid_mid[last] = W_E[t1] + W_E2[t2]                       (no positions, no attention)
    MLP (optional)     resid_post = resid_mid + W_out act(W_in ln2(resid_mid) + b_in) + b_out
                       (without the MLP residual: resid_post = the MLP output alone)
    logits             = W_U ln_final(resid_post) + b_U, read at the last position only.

Norms are RMSNorms with a learned gain (eps 1e-5). `bias` switches both MLP biases and the unembedding bias;
attention never has biases. Initialisation: embeddings N(0, 1), linear weights and biases
U(+-1/sqrt(fan_in)), norm gains 1.

`build_facts_model` returns a `HookedTransformer` where TransformerLens can express the variant, else a
`FactsTransformer` with the same parameter and hook names (2Emb: second embedding `embed.W_E2`, and
`blocks.0.hook_attn_out` = W_E[t1] at the last position). `forward_params` is the one forward pass; its
parameters carry a leading `init` axis so the batched trainer runs many initialisations at once.
"""

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.config import ConfigMixin
from mechmem.models.backend import HookedRootModule, HookPoint
from mechmem.models.registry import register_architecture
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.models.weights import canonical_state_dict, load_canonical_state_dict

EPS = 1e-5
MIXINGS = ("attn", "uniform", "2emb")
"""How the two input tokens are mixed: learned attention, uniform attention, or two embeddings (2Emb)."""
ACTS = ("gelu", "relu")
"""MLP activations."""
Params = dict[str, Tensor]
Hook = Callable[[str, Tensor], Tensor]


@dataclass(frozen=True)
class FactsModelConfig(ConfigMixin):
    """A one-layer fact-memorisation model (one of the 54 published variants at any size)."""

    n_in: int = 32
    """Input vocabulary size (facts are ordered pairs of input tokens)."""
    n_out: int = 16
    """Number of labels."""
    d_model: int = 16
    """Residual width (also the single attention head's width)."""
    d_mlp: int = 16
    """MLP hidden width."""
    mixing: str = "attn"
    """How the two tokens meet: "attn" (learned), "uniform" (fixed 1/2, 1/2) or "2emb" (summed embeddings)."""
    mlp: bool = True
    """Whether the block has an MLP."""
    norms: bool = True
    """RMSNorms before attention, MLP and unembedding."""
    mlp_residual: bool = True
    """Add the MLP output to the residual stream (False: the MLP output replaces it)."""
    bias: bool = True
    """Biases in both MLP linears and the unembedding."""
    act_fn: str = "gelu"
    """MLP activation: "gelu" or "relu"."""
    arch: str = "facts"
    """Architecture name for the model registry; always "facts"."""

    def __post_init__(self) -> None:
        if self.arch != "facts":
            raise ValueError(f"arch must be 'facts', got {self.arch!r}")
        if self.mixing not in MIXINGS:
            raise ValueError(f"mixing must be one of {MIXINGS}, got {self.mixing!r}")
        if self.act_fn not in ACTS:
            raise ValueError(f"act_fn must be one of {ACTS}, got {self.act_fn!r}")
        if min(self.n_in, self.n_out, self.d_model, self.d_mlp) < 1:
            raise ValueError("sizes must be positive")

    @property
    def tl_expressible(self) -> bool:
        """True when a TransformerLens HookedTransformer computes exactly this model."""
        return self.mixing != "2emb" and (not self.mlp or self.mlp_residual)

    @property
    def name(self) -> str:
        """Short variant name, e.g. "attn+mlp+norms+bias+res/gelu" or "2emb"."""
        flags = (self.mlp, self.norms, self.bias and self.mlp, self.mlp and self.mlp_residual)
        parts = [self.mixing, *(part for part, on in zip(("mlp", "norms", "bias", "res"), flags) if on)]
        return "+".join(parts) + (f"/{self.act_fn}" if self.mlp else "")

    def to_transformer_config(self) -> TransformerConfig:
        """The equivalent TL config; non-published parameters fixed at zero and frozen."""
        if not self.tl_expressible:
            raise ValueError(f"variant {self.name} is not expressible as a HookedTransformer")
        zero = ["blocks.0.attn.b_Q", "blocks.0.attn.b_K", "blocks.0.attn.b_V", "blocks.0.attn.b_O"]
        if self.mixing == "uniform":
            zero += ["blocks.0.attn.W_Q", "blocks.0.attn.W_K"]
        if not self.bias:
            zero += ["unembed.b_U"] + (["blocks.0.mlp.b_in", "blocks.0.mlp.b_out"] if self.mlp else [])
        return TransformerConfig(
            n_layers=1,
            d_model=self.d_model,
            n_heads=1,
            d_vocab=self.n_in,
            d_vocab_out=self.n_out,
            n_ctx=2,
            d_mlp=self.d_mlp if self.mlp else None,
            act_fn=self.act_fn,
            normalization_type="RMS" if self.norms else None,
            fixed=tuple((name, "zero") for name in zero),
            frozen=tuple(zero),
        )


def param_specs(cfg: FactsModelConfig) -> dict[str, tuple[tuple[int, ...], str, int]]:
    """name -> (shape, init rule, fan_in) of the published parameters in drawing order (TL names, shapes)."""
    d, h, n_out, mlp, attn = cfg.d_model, cfg.d_mlp, cfg.n_out, cfg.mlp, cfg.mixing != "2emb"
    specs = {  # name: (shape, rule, fan_in, whether the variant has it)
        "embed.W_E": ((cfg.n_in, d), "normal", 0, True),
        "embed.W_E2": ((cfg.n_in, d), "normal", 0, not attn),
        "pos_embed.W_pos": ((2, d), "normal", 0, attn),
        "blocks.0.ln1.w": ((d,), "one", 0, attn and cfg.norms),
        "blocks.0.attn.W_Q": ((1, d, d), "uniform", d, cfg.mixing == "attn"),
        "blocks.0.attn.W_K": ((1, d, d), "uniform", d, cfg.mixing == "attn"),
        "blocks.0.attn.W_V": ((1, d, d), "uniform", d, attn),
        "blocks.0.attn.W_O": ((1, d, d), "uniform", d, attn),
        "blocks.0.ln2.w": ((d,), "one", 0, mlp and cfg.norms),
        "blocks.0.mlp.W_in": ((d, h), "uniform", d, mlp),
        "blocks.0.mlp.b_in": ((h,), "uniform", d, mlp and cfg.bias),
        "blocks.0.mlp.W_out": ((h, d), "uniform", h, mlp),
        "blocks.0.mlp.b_out": ((d,), "uniform", h, mlp and cfg.bias),
        "ln_final.w": ((d,), "one", 0, cfg.norms),
        "unembed.W_U": ((d, n_out), "uniform", d, True),
        "unembed.b_U": ((n_out,), "uniform", d, cfg.bias),
    }
    return {name: (shape, rule, fan_in) for name, (shape, rule, fan_in, kept) in specs.items() if kept}


def init_params(cfg: FactsModelConfig, *, generator: torch.Generator | None = None) -> Params:
    """Published initial values (PyTorch defaults) of every trainable parameter, drawn from `generator`."""
    out: Params = {}
    for name, (shape, rule, fan_in) in param_specs(cfg).items():
        if rule == "normal":
            out[name] = torch.randn(shape, generator=generator)
        elif rule == "one":
            out[name] = torch.ones(shape)
        else:
            bound = 1.0 / math.sqrt(fan_in)
            out[name] = (torch.rand(shape, generator=generator) * 2 - 1) * bound
    return out


def _lin(x: Tensor, W: Tensor, b: Tensor | None = None) -> Tensor:
    """x [init, ..., d_in] @ W [init, d_in, d_out] (+ b [init, d_out]) as one bmm."""
    n_init = W.shape[0]
    flat = x.expand(n_init, *x.shape[1:]).reshape(n_init, -1, x.shape[-1])
    out = torch.bmm(flat, W) if b is None else torch.baddbmm(b[:, None, :], flat, W)
    return out.reshape(n_init, *x.shape[1:-1], W.shape[-1])


class RMSNormFunction(torch.autograd.Function):
    """x / rms(x) over the last axis, with a hand-written backward (fewer kernels than autograd's)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        d = x.shape[-1]
        r = torch.rsqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True).square() / d + EPS)
        xr = x * r
        ctx.save_for_backward(xr, r)
        return xr

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        xr, r = ctx.saved_tensors
        dot = torch.linalg.vecdot(grad, xr, dim=-1).unsqueeze(-1) / xr.shape[-1]
        return torch.addcmul(grad, xr, dot, value=-1).mul_(r)


def _rms(x: Tensor, w: Tensor | None) -> Tensor:
    """RMSNorm over the last axis; gain w [init, d] (None: no gain)."""
    x = RMSNormFunction.apply(x)
    return x if w is None else x * w.view(w.shape[0], *[1] * (x.dim() - 2), w.shape[-1])


def forward_params(
    cfg: FactsModelConfig,
    params: Params,
    tokens: Int[Tensor, "batch 2"],
    *,
    hook: Hook | None = None,
    last_only: bool = False,
) -> Float[Tensor, "init batch pos d_vocab_out"]:
    """Logits of a stack of models whose parameters carry a leading `init` axis.

    Args:
        cfg: the variant.
        params: name -> [init, *shape] tensors, names as in `param_specs`.
        tokens: the facts' input pairs.
        hook: optional `hook(name, activation)` returning the activation to use (TL hook names).
        last_only: compute the MLP and unembedding only at the last position (pos axis of length 1).
    """
    hk = hook if hook is not None else _identity
    norm = _norm_fn(cfg, params, hk)
    # Embedding lookups as one-hot matmuls: the backward of a gather with a leading init axis is far slower.
    one_hot = F.one_hot(tokens, cfg.n_in).to(params["embed.W_E"].dtype)
    if cfg.mixing == "2emb":
        first = _lin(one_hot[None, :, 0], params["embed.W_E"])
        second = _lin(one_hot[None, :, 1], params["embed.W_E2"])
        embed = hk("hook_embed", torch.stack([first, second], dim=2))
        resid_pre = hk("blocks.0.hook_resid_pre", embed)
        attn_out = torch.cat([torch.zeros_like(embed[:, :, :1]), embed[:, :, :1]], dim=2)
        attn_out = hk("blocks.0.hook_attn_out", attn_out)
    else:
        embed = hk("hook_embed", _lin(one_hot[None], params["embed.W_E"]))
        pos = hk("hook_pos_embed", params["pos_embed.W_pos"][:, None, :, :].expand_as(embed))
        resid_pre = hk("blocks.0.hook_resid_pre", embed + pos)
        x = norm("blocks.0.ln1", resid_pre)
        # One head; hooks see TL shapes with a head axis, the arithmetic runs without it (P = 2 positions).
        v = hk("blocks.0.attn.hook_v", _lin(x, params["blocks.0.attn.W_V"][:, 0]).unsqueeze(-2)).squeeze(-2)
        n_pos = tokens.shape[1]
        # With last_only, only the last query is computed (the read-out needs nothing else).
        rows = slice(n_pos - 1, n_pos) if last_only else slice(0, n_pos)
        causal = torch.tril(torch.ones(n_pos, n_pos, dtype=torch.bool, device=tokens.device))[rows]
        if cfg.mixing == "attn":
            q = _lin(x[:, :, rows], params["blocks.0.attn.W_Q"][:, 0])
            q = hk("blocks.0.attn.hook_q", q.unsqueeze(-2)).squeeze(-2)
            k = _lin(x, params["blocks.0.attn.W_K"][:, 0])
            k = hk("blocks.0.attn.hook_k", k.unsqueeze(-2)).squeeze(-2)
            scores = (q[..., :, None, :] * k[..., None, :, :]).sum(-1) / math.sqrt(cfg.d_model)
            scores = scores.masked_fill(~causal, float("-inf"))
            scores = hk("blocks.0.attn.hook_attn_scores", scores.unsqueeze(2)).squeeze(2)
            pattern = torch.softmax(scores, dim=-1)
        else:
            uniform = causal.float() / causal.sum(-1, keepdim=True)
            pattern = uniform.expand(v.shape[0], v.shape[1], *causal.shape)
        pattern = hk("blocks.0.attn.hook_pattern", pattern.unsqueeze(2)).squeeze(2)
        z = (pattern[..., None] * v[..., None, :, :]).sum(-2)
        z = hk("blocks.0.attn.hook_z", z.unsqueeze(-2)).squeeze(-2)
        attn_out = hk("blocks.0.hook_attn_out", _lin(z, params["blocks.0.attn.W_O"][:, 0]))
    if last_only:
        resid_pre, attn_out = resid_pre[:, :, -1:], attn_out[:, :, -1:]
    return readout(cfg, params, hk("blocks.0.hook_resid_mid", resid_pre + attn_out), hook=hook)


def _identity(_name: str, x: Tensor) -> Tensor:
    return x


def _norm_fn(cfg: FactsModelConfig, params: Params, hk: Hook) -> Callable[[str, Tensor], Tensor]:
    """The RMSNorm named `where` with its learned gain (identity without norms)."""
    if not cfg.norms:
        return lambda _where, x: x
    return lambda where, x: hk(f"{where}.hook_normalized", _rms(x, params[f"{where}.w"]))


def readout(
    cfg: FactsModelConfig,
    params: Params,
    resid: Float[Tensor, "init batch pos d_model"],
    *,
    hook: Hook | None = None,
) -> Float[Tensor, "init batch pos d_vocab_out"]:
    """Logits from the residual stream after the mixing (`resid_mid`): MLP (if any) and unembedding."""
    hk = hook if hook is not None else _identity
    norm = _norm_fn(cfg, params, hk)

    def norm_lin(where: str, x: Tensor, W: Tensor, b: Tensor | None) -> Tensor:
        """norm(x) @ W + b; without hooks the norm's gain is folded into W (one pass over the facts fewer)."""
        if hook is not None or not cfg.norms:
            return _lin(norm(where, x), W, b)
        return _lin(_rms(x, None), params[f"{where}.w"][:, :, None] * W, b)

    if cfg.mlp:
        pre = norm_lin("blocks.0.ln2", resid, params["blocks.0.mlp.W_in"], params.get("blocks.0.mlp.b_in"))
        pre = hk("blocks.0.mlp.hook_pre", pre)
        post = hk("blocks.0.mlp.hook_post", F.gelu(pre) if cfg.act_fn == "gelu" else F.relu(pre))
        mlp_out = hk(
            "blocks.0.hook_mlp_out",
            _lin(post, params["blocks.0.mlp.W_out"], params.get("blocks.0.mlp.b_out")),
        )
        resid = resid + mlp_out if cfg.mlp_residual else mlp_out
    resid = hk("blocks.0.hook_resid_post", resid)
    return norm_lin("ln_final", resid, params["unembed.W_U"], params.get("unembed.b_U"))


def hook_names(cfg: FactsModelConfig) -> list[str]:
    """Hook points of the `FactsTransformer` for `cfg`, in forward order."""
    seen: list[str] = []

    def record(name: str, x: Tensor) -> Tensor:
        seen.append(name)
        return x

    params = {k: v.unsqueeze(0) for k, v in init_params(cfg).items()}
    forward_params(cfg, params, torch.zeros(1, 2, dtype=torch.long), hook=record)
    return seen


class _Node(torch.nn.Module):
    """A plain container, so parameters and hooks sit at TL paths like `blocks.0.mlp.W_in`."""


class FactsTransformer(HookedRootModule):
    """Every facts variant as a TL-style hooked module (parameter and hook names as in HookedTransformer)."""

    def __init__(self, cfg: FactsModelConfig, params: Params) -> None:
        super().__init__()
        self.facts_config = cfg
        self.mechmem_config = cfg
        for name, value in params.items():
            *path, leaf = name.split(".")
            self._node(path).register_parameter(leaf, torch.nn.Parameter(value.clone()))
        for name in hook_names(cfg):
            *path, leaf = name.split(".")
            self._node(path).add_module(leaf, HookPoint())
        self.setup()

    def _node(self, path: list[str]) -> torch.nn.Module:
        node: torch.nn.Module = self
        for part in path:
            if part not in node._modules:
                node.add_module(part, _Node())
            node = node._modules[part]  # type: ignore[assignment]
        return node

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab_out"]:
        params = {name: p.unsqueeze(0) for name, p in self.named_parameters()}

        def hook(name: str, x: Tensor) -> Tensor:
            return self.hook_dict[name](x[0]).unsqueeze(0)

        return forward_params(self.facts_config, params, tokens, hook=hook)[0]


def model_from_params(cfg: FactsModelConfig, params: Params) -> torch.nn.Module:
    """A hooked model with these weights: HookedTransformer where TL can, else FactsTransformer."""
    if not cfg.tl_expressible:
        return FactsTransformer(cfg, params)
    model = build_transformer(cfg.to_transformer_config(), generator=torch.Generator().manual_seed(0))
    state = canonical_state_dict(model)  # TransformerLens's parameter names under either backend
    state.update({name: value.detach() for name, value in params.items()})
    with torch.no_grad():
        load_canonical_state_dict(model, state)
    return model


def model_params(cfg: FactsModelConfig, model: torch.nn.Module) -> Params:
    """The published parameters of a model built by `model_from_params` (inverse of it)."""
    state = canonical_state_dict(model)
    return {name: state[name].detach().clone() for name in param_specs(cfg)}


def build_facts_model(cfg: FactsModelConfig, *, generator: torch.Generator | None = None) -> torch.nn.Module:
    """A freshly initialised hooked model for `cfg`. Published PyTorch-default init drawn from `generator`."""
    return model_from_params(cfg, init_params(cfg, generator=generator))


register_architecture("facts", FactsModelConfig, build_facts_model)


def all_variants(
    n_in: int = 32, n_out: int = 16, d_model: int = 16, d_mlp: int = 16
) -> list[FactsModelConfig]:
    """The 54 published variants: 48 with an MLP (mixing x bias x norms x MLP residual x act) and 6 without
    (those keep `bias=True`, as in the authors' sweep)."""
    base = FactsModelConfig(n_in=n_in, n_out=n_out, d_model=d_model, d_mlp=d_mlp)
    mixings, flags = ("2emb", "uniform", "attn"), (False, True)
    out = [
        base.replace(mixing=mixing, bias=bias, norms=norms, mlp_residual=res, act_fn=act)
        for mixing, bias, norms, res, act in itertools.product(mixings, flags, flags, flags, ("gelu", "relu"))
    ]
    return out + [
        base.replace(mixing=mixing, mlp=False, norms=norms, bias=True)
        for mixing, norms in itertools.product(mixings, flags)
    ]
