"""Checks of a model before an analysis runs on it: the activation memory a batch would need, and weights
that are not finite (a blown-up run)."""

from typing import Any

from mechmem.errors import MechmemError

MEMORY_BUDGET_MB = 8192.0
"""Largest activation memory an analysis may plan for; --n-samples above the matching bound is refused."""


def estimate_mb_per_sequence(model: Any) -> float:
    """Rough activation memory (MB, float32) one sequence costs an analysis at its peak.

    Counts per position: one layer's attention scores and pattern (2 n_heads n_ctx), its activations
    (6 d_model + 2 d_mlp), the residual stream of every layer (n_layers d_model) and the logits with their
    softmax (2 d_vocab_out).
    """
    cfg = getattr(model, "cfg", None)
    get = lambda name, default: int(getattr(cfg, name, None) or default)
    n_ctx, layers, d_model = get("n_ctx", 64), get("n_layers", 1), get("d_model", 64)
    per_pos = 2 * get("n_heads", 1) * n_ctx + 6 * d_model + 2 * get("d_mlp", 0) + layers * d_model
    per_pos += 2 * get("d_vocab_out", get("d_vocab", 64))
    return n_ctx * per_pos * 4 / 2**20


def check_n_samples(
    n: int, model: Any, *, minimum: int = 1, budget_mb: float = MEMORY_BUDGET_MB, flag: str = "--n-samples"
) -> int:
    """Refuse `n` below `minimum` or above what `budget_mb` allows for `model` (the bound is in the
    message)."""
    if n < minimum:
        raise MechmemError(f"{flag} must be at least {minimum}, got {n}")
    per_seq = estimate_mb_per_sequence(model)
    bound = max(minimum, int(budget_mb / per_seq))
    if n > bound:
        raise MechmemError(
            f"{flag} {n} needs about {n * per_seq:.0f} MB for this model; the bound is {bound} "
            f"({budget_mb:.0f} MB at {per_seq * 1024:.1f} KB per sequence)"
        )
    return n


def check_finite_weights(model: Any, *, allow: bool = False, what: str = "the checkpoint") -> None:
    """Raise `MechmemError` naming the weights (not buffers) that hold NaN or inf, unless `allow`."""
    import torch

    from mechmem.models.weights import canonical_parameters  # weights under their canonical names

    bad = [
        name
        for name, tensor in canonical_parameters(model).items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad and not allow:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise MechmemError(
            f"{what}: weights hold NaN or inf ({shown}); every result would be meaningless "
            "(--allow-nonfinite analyses them anyway)"
        )
