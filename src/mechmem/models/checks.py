"""Checks of a model before an analysis runs on it: the activation memory a batch would need, and weights
that are not finite or so large that its forward pass overflows (a blown-up run)."""

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


PROBE_LENGTH = 16
"""Positions of each of the two probe sequences `check_finite_weights` runs (fewer for a shorter context)."""


def check_finite_weights(model: Any, *, allow: bool = False, what: str = "the checkpoint") -> None:
    """Raise `MechmemError` unless `allow`: naming the weights (not buffers) that hold NaN or inf, or the
    first module whose output on a probe batch overflows.

    The rule for finite weights: the forward pass on two probe sequences (token ids 0, 1, 2, ... modulo the
    vocabulary, `PROBE_LENGTH` positions) must give every module an output whose magnitude stays below the
    square root of its dtype's largest number (1.8e19 in float32). Analyses square activations (norms,
    variances, gradients), so larger values give inf or NaN in their results even where the pass itself
    does not overflow.
    """
    import torch

    from mechmem.models.weights import canonical_parameters  # weights under their canonical names

    bad = [
        name
        for name, tensor in canonical_parameters(model).items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if allow:
        return
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise MechmemError(
            f"{what}: weights hold NaN or inf ({shown}); every result would be meaningless "
            "(--allow-nonfinite analyses them anyway)"
        )
    if (where := overflowing_module(model)) is not None:
        raise MechmemError(
            f"{what}: weights so large that the forward pass overflows ({where} on a probe batch is not "
            "finite or exceeds the square root of its dtype's largest number); every result would be "
            "meaningless (--allow-nonfinite analyses them anyway)"
        )


def overflowing_module(model: Any) -> str | None:
    """The name of the first activation (a TransformerLens hook point, or any module of a model without them)
    whose value on the probe batch of `check_finite_weights` is NaN, +inf or a finite number of magnitude
    above the square root of its dtype's largest number (-inf is allowed: masked attention scores); None when
    none is (or the model has no vocabulary to probe it with)."""
    import torch

    cfg = getattr(model, "cfg", None)
    d_vocab, n_ctx = getattr(cfg, "d_vocab", None), getattr(cfg, "n_ctx", None)
    if not isinstance(d_vocab, int) or not isinstance(n_ctx, int) or d_vocab < 1 or n_ctx < 1:
        return None
    from mechmem.models.parts import model_device

    length = min(PROBE_LENGTH, n_ctx)
    tokens = (torch.arange(2 * length) % d_vocab).reshape(2, length).to(model_device(model))
    found: list[str] = []

    def check(name: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            for t in output if isinstance(output, (tuple, list)) else (output,):
                if found or not (isinstance(t, torch.Tensor) and t.is_floating_point()):
                    continue
                ok = (t.abs() < torch.finfo(t.dtype).max ** 0.5) | (t == -torch.inf)  # NaN compares False
                if not bool(ok.all()):
                    found.append(name or type(model).__name__)

        return hook

    points = getattr(model, "hook_dict", None) or dict(model.named_modules())
    handles = [m.register_forward_hook(check(name)) for name, m in points.items()]
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    return found[0] if found else None
