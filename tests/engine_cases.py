"""Shared builders for the intervention, patching and circuit tests: random models with non-zero biases,
setters, read-out metrics, patching pairs, TransformerLens's own sweeps and a hand-written circuit reference.

Not a test module: test modules import these, never each other."""

import pytest
import torch
from helpers import build_model, build_transformer_cfg, random_tokens

from mechmem.analysis.interventions import apply, from_run, mean, resample, zero
from mechmem.analysis.interventions.replay import Replay
from mechmem.analysis.patching.reference import TL_SWEEPS
from mechmem.errors import MechmemError
from mechmem.models.backend import BACKEND, hooked_transformer_config, raw_hooked_transformer
from mechmem.models.weights import canonical_parameters
from mechmem.tasks.base import PatchingPair


# -- interventions -------------------------------------------------------------------------------------------
def make_model(**overrides):
    """A random model with non-zero biases, so that zeroing an activation is not the same as removing it."""
    model = build_model(seed=1, **overrides)
    with torch.no_grad():
        for name, p in canonical_parameters(model).items():  # HookedTransformer's names on either backend
            if name.rsplit(".", 1)[-1].startswith("b_"):
                p.copy_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    return model


def make_setter(kind, model, seed=5):
    if kind == "zero":
        return zero()
    if kind == "mean":
        return mean(random_tokens(model, 11, seed=seed))
    if kind == "resample":
        return resample(random_tokens(model, 11, seed=seed), torch.Generator().manual_seed(seed))
    if kind == "from_run":
        return from_run(random_tokens(model, 6, seed=seed))
    return apply(lambda act, hook: act.flip(0) * 1.5 - 0.3)


def last_logprob(logits):
    """Per-sequence log-probability of token 2 at the last position: [batch]."""
    return logits[:, -1].log_softmax(-1)[:, 2]


def unsupported_model():
    """A model the replay cannot run, so the engine falls back to hooks: shortformer positions, or under
    TransformerLens 4 (which builds no shortformer model) TransformerLens's native model with soft-capped
    attention scores, built from its raw config."""
    if BACKEND == "hooked":
        model = build_model(
            act_fn="gelu", normalization_type="LN", d_head=8, positional_embedding_type="shortformer"
        )
    else:
        cfg = build_transformer_cfg(act_fn="gelu", normalization_type="LN", d_head=8).tl_kwargs()
        model = raw_hooked_transformer(hooked_transformer_config(**cfg, attn_scores_soft_cap=0.5)).eval()
    with pytest.raises(MechmemError):
        Replay(model)
    return model


# -- patching ------------------------------------------------------------------------------------------------
MODELS = {
    "mlp-ln": {
        "n_layers": 3,
        "d_model": 16,
        "n_heads": 3,
        "d_head": 5,
        "d_mlp": 32,
        "normalization_type": "LN",
    },
    "attn-only": {"n_layers": 2, "d_model": 12, "n_heads": 3, "d_mlp": None},
    "rms-gelu": {
        "n_layers": 2,
        "d_model": 16,
        "n_heads": 2,
        "d_mlp": 24,
        "act_fn": "gelu",
        "normalization_type": "RMS",
    },
}
"""Random models the patching tests sweep, by name (keyword arguments of `build_model`)."""


def random_pair(
    n: int, pos: int, vocab: int, generator: torch.Generator, first_diff: int = 3
) -> PatchingPair:
    """Inputs that agree before `first_diff`; answers read at varying positions."""
    clean = torch.randint(vocab, (n, pos), generator=generator)
    corrupted = clean.clone()
    corrupted[:, first_diff:] = torch.randint(vocab, (n, pos - first_diff), generator=generator)
    answer_pos = torch.randint(first_diff, pos - 1, (n,), generator=generator)  # never the last: skips happen
    answers = torch.randint(vocab, (2, n), generator=generator)
    return PatchingPair(clean, corrupted, answer_pos, answers[0], answers[1])


def tl_sweep(model, name, pair, direction, metric):
    """TransformerLens's own `get_act_patch_*` for sweep `name` of `pair` in `direction`."""
    base, source = (pair.corrupted, pair.clean) if direction == "denoising" else (pair.clean, pair.corrupted)
    _, cache = model.run_with_cache(source)
    return TL_SWEEPS[name](model, base, cache, metric)


# -- every architecture TransformerLens can express ----------------------------------------------------------
BASE = {"n_layers": 2, "d_model": 16, "n_heads": 2, "d_vocab": 11, "n_ctx": 8, "d_mlp": 24}
"""The architectures' shared config (keyword arguments of `build_model`)."""
ARCHITECTURES = {
    "rotary": {"positional_embedding_type": "rotary"},
    "partial_rotary": {"positional_embedding_type": "rotary", "rotary_dim": 4, "rotary_base": 500.0},
    "grouped_query": {"n_heads": 4, "n_key_value_heads": 2, "normalization_type": "RMS"},
    "gated_mlp": {"gated_mlp": True, "act_fn": "silu", "normalization_type": "RMS"},
    "rms_pre": {"normalization_type": "RMSPre"},
    "ln_pre": {"normalization_type": "LNPre", "eps": 1e-3},
    "parallel": {"parallel_attn_mlp": True, "normalization_type": "LN"},
    "local": {"attn_types": ("local", "global"), "window_size": 3, "normalization_type": "LN"},
    "tied": {"normalization_type": "LN"},  # W_U set to W_E^T below
    "vocab_out": {"d_vocab_out": 7, "act_fn": "gelu_new"},
    "attn_scale": {"attn_scale": 1.7, "d_mlp": None},
    "neox_like": {  # partial rotary, grouped-query, gated MLP and parallel blocks together
        "n_layers": 3,
        "n_heads": 4,
        "positional_embedding_type": "rotary",
        "rotary_dim": 2,
        "n_key_value_heads": 1,
        "gated_mlp": True,
        "act_fn": "gelu",
        "parallel_attn_mlp": True,
        "normalization_type": "LN",
    },
    "llama_like": {  # partial rotary, grouped-query, gated MLP, RMS and d_head * n_heads != d_model together
        "n_layers": 3,
        "n_heads": 4,
        "d_head": 8,
        "positional_embedding_type": "rotary",
        "rotary_dim": 4,
        "rotary_base": 100.0,
        "n_key_value_heads": 2,
        "gated_mlp": True,
        "act_fn": "silu",
        "normalization_type": "RMS",
    },
    "shortformer": {"positional_embedding_type": "shortformer"},  # not replayed: hooks
}
"""Architectures by name, on top of `BASE`."""


def arch_model(name: str):
    """The random model of architecture `name`, every bias non-zero (zeroing is then not removing)."""
    model = build_model(seed=3, **(BASE | ARCHITECTURES[name]))
    weights = canonical_parameters(model)  # HookedTransformer's names on either backend
    with torch.no_grad():
        for pname, p in weights.items():
            if pname.rsplit(".", 1)[-1].startswith("b_"):
                p.copy_(0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(pname))))
        if name == "tied":  # W_U = W_E^T (a TransformerLens 4 bridge may hold W_U as [d_vocab d_model])
            w_e, w_u = weights["embed.W_E"], weights["unembed.W_U"]
            w_u.copy_(w_e.T if w_u.shape == w_e.T.shape else w_e)
    return model


# -- circuits ------------------------------------------------------------------------------------------------
def naive_circuit_metric(model, patcher, keep):
    """Reference: one run_with_hooks that records every sender's output and rewrites each port by hand."""
    current, fwd = {}, []
    ablated = patcher.ablated
    for node in patcher.graph.nodes:
        if node.hook is not None:
            fwd.append((node.hook, lambda act, hook, name=node.hook: current.__setitem__(name, act.clone())))
    for port in patcher.graph.ports:
        senders = [e.sender for e, k in zip(patcher.graph.edges, keep.tolist()) if e.port is port and not k]

        def rewrite(act, hook, senders=senders, port=port):
            act = act.clone()
            sel = (slice(None), *port.index)
            for u in senders:
                usel = (slice(None), *u.index)
                w = model.blocks[u.layer].attn.W_O[u.index[-1]] if u.kind == "head" else None
                now, abl = current[u.hook][usel], ablated[u.hook][usel]
                act[sel] = (
                    act[sel] - (now @ w if w is not None else now) + (abl @ w if w is not None else abl)
                )
            return act

        fwd.append((port.hook, rewrite))
    mlp = not model.cfg.attn_only  # TransformerLens 3 refuses hook_mlp_in on an attention-only model
    model.set_use_split_qkv_input(True)
    if mlp:
        model.set_use_hook_mlp_in(True)
    try:
        with torch.no_grad():
            logits = model.run_with_hooks(patcher.tokens, fwd_hooks=fwd)
    finally:
        model.set_use_split_qkv_input(False)
        if mlp:
            model.set_use_hook_mlp_in(False)
    return patcher.metric(logits)
