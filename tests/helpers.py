"""Shared test helpers: small model builders with overridable defaults and the one hook-leak check."""

from typing import Any

import torch


def build_transformer_cfg(**overrides: Any) -> Any:
    """A small TransformerConfig; pass keyword arguments to change any field."""
    from mechmem.models.adapter import TransformerConfig

    defaults = dict(n_layers=2, d_model=16, n_heads=2, d_vocab=6, n_ctx=9, d_mlp=32)
    defaults.update(overrides)
    return TransformerConfig(**defaults)


def build_model(seed: int = 0, **overrides: Any) -> Any:
    """A random HookedTransformer from `build_transformer_cfg(**overrides)`, weights drawn from `seed`, in eval."""
    from mechmem.models.adapter import build_transformer

    cfg = build_transformer_cfg(**overrides)
    return build_transformer(cfg, generator=torch.Generator().manual_seed(seed)).eval()


def random_tokens(model: Any, batch: int = 8, pos: int | None = None, seed: int = 0) -> torch.Tensor:
    """Uniform random tokens for `model`, [batch pos] (pos defaults to the model's context)."""
    pos = model.cfg.n_ctx if pos is None else pos
    return torch.randint(model.cfg.d_vocab, (batch, pos), generator=torch.Generator().manual_seed(seed))


def assert_no_hooks(model: torch.nn.Module) -> None:
    """No hook is left anywhere: neither TransformerLens hook points nor plain torch module hooks."""
    for name, module in model.named_modules():
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            hooks = getattr(module, kind, None)
            assert not hooks, f"{kind} left on {name or 'the model'}"
        assert not getattr(module, "fwd_hooks", None), f"TransformerLens forward hooks left on {name}"
        assert not getattr(module, "bwd_hooks", None), f"TransformerLens backward hooks left on {name}"
    assert not getattr(model, "context_level", 0), "the model is still inside a hooks() context"
