"""Checks of what a public function is given, before it does any work: that the model is a TransformerLens
model, that tokens are integer ids [batch pos] the model can read, that counts, sizes and thresholds are in
range and finite; and checks of the model itself: the activation memory a batch would need, and weights that
are not finite or so large that its forward pass overflows (a blown-up run).

Each check raises `BadArgumentType` (a `TypeError`) for a value of the wrong kind and `BadArgument` (a
`ValueError`) for a value out of range, with one sentence naming the argument; both are `MechmemError`s, so
scripts print them as one `error:` line. A task's fit to a model is `Task.check_model` (tasks.base).
"""

import math
import numbers
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mechmem.errors import BadArgument, BadArgumentType, MechmemError
from mechmem.models.parts import Head


def kind_of(value: Any) -> str:
    """A value's kind for a message: its type's name, or "None"."""
    return "None" if value is None else type(value).__name__


def check_model(model: Any, name: str = "model", *, cfg: bool = True, hooks: bool = True) -> None:
    """Refuse anything but a TransformerLens model: a torch module with hook points (with `hooks`) and a
    `cfg` (with `cfg`): a `HookedTransformer` or a `TransformerBridge`; without `cfg` any `HookedRootModule`
    (the facts models); without either any torch module that maps tokens to logits."""
    import torch

    ok = isinstance(model, torch.nn.Module) and (not cfg or getattr(model, "cfg", None) is not None)
    if not (ok and (not hooks or isinstance(getattr(model, "hook_dict", None), Mapping))):
        wanted = (
            "a TransformerLens model (HookedTransformer or TransformerBridge)"
            if cfg
            else ("a TransformerLens HookedRootModule" if hooks else "a torch module")
        )
        raise BadArgumentType(f"{name} must be {wanted}, got {kind_of(model)}")


def _vocab(model: Any, output: bool) -> int | None:
    cfg = getattr(model, "cfg", None)
    size = getattr(cfg, "d_vocab_out", None) if output else None
    size = size if isinstance(size, int) and size > 0 else getattr(cfg, "d_vocab", None)
    return size if isinstance(size, int) and size > 0 else None


def check_tokens(
    model: Any, tokens: Any, name: str = "tokens", *, ndim: int = 2, output: bool = False
) -> Any:
    """`tokens` as a tensor of token ids the model reads (integer dtypes other than int64 are converted):
    `ndim` axes ([batch pos] by default, at most the model's n_ctx positions), not empty, every id in the
    model's input vocabulary (its output vocabulary with `output`, for targets and answers). With `model`
    None only the kind, dtype, axes and sign are checked."""
    import torch

    if not isinstance(tokens, torch.Tensor):
        raise BadArgumentType(f"{name} must be a tensor of token ids, got {kind_of(tokens)}")
    if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
        raise BadArgumentType(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    axes = "[batch pos]" if ndim == 2 else f"{ndim} axes"
    if tokens.ndim != ndim:
        raise BadArgument(f"{name} must have {axes}, got shape {tuple(tokens.shape)}")
    if tokens.numel() == 0:
        raise BadArgument(f"{name} is empty (shape {tuple(tokens.shape)})")
    n_ctx = getattr(getattr(model, "cfg", None), "n_ctx", None)
    if ndim == 2 and isinstance(n_ctx, int) and tokens.shape[1] > n_ctx:
        raise BadArgument(
            f"{name} has {tokens.shape[1]} positions, more than the model's context n_ctx={n_ctx}"
        )
    vocab = _vocab(model, output)
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or (vocab is not None and high >= vocab):
        which = "output vocabulary d_vocab_out" if output else "vocabulary d_vocab"
        raise BadArgument(f"{name} hold ids from {low} to {high}; the model's {which} is {vocab}")
    return tokens if tokens.dtype == torch.long else tokens.long()


def check_count(name: str, value: Any, *, minimum: int = 1) -> int:
    """An int (not a bool) of at least `minimum`: a number of samples, draws, steps or sequences."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadArgumentType(f"{name} must be an int, got {kind_of(value)} {value!r}")
    if value < minimum:
        raise BadArgument(f"{name} must be at least {minimum}, got {value}")
    return value


def check_seed(value: Any, name: str = "seed") -> int:
    """A seed: an int (not a bool), any value."""
    return check_count(name, value, minimum=-(2**63))


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    above: bool = False,
    none: bool = False,
) -> float | None:
    """A finite real number in [`low`, `high`] (above `low` with `above`); None passes with `none`."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or _one_element(value)):
        raise BadArgumentType(f"{name} must be a number, got {kind_of(value)} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise BadArgument(f"{name} must be finite, got {value}")
    if low is not None and (value <= low if above else value < low):
        raise BadArgument(f"{name} must be {'above' if above else 'at least'} {low:g}, got {value:g}")
    if high is not None and value > high:
        raise BadArgument(f"{name} must be at most {high:g}, got {value:g}")
    return value


def _one_element(value: Any) -> bool:
    """A one-element real tensor (float() converts it)."""
    import torch

    return isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool


def check_share(name: str, value: Any) -> float:
    """A share (fraction) in [0, 1]."""
    return check_number(name, value, low=0.0, high=1.0)


def check_memory_mb(value: Any, name: str = "memory_mb") -> float:
    """A memory budget in MiB: finite and above 0."""
    return check_number(name, value, low=0.0, above=True)


def check_choice(name: str, value: Any, choices: Collection[str]) -> str:
    """One of `choices`."""
    if value not in choices:
        raise BadArgument(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")
    return value


def check_choices(name: str, values: Any, choices: Collection[str] | None = None) -> list[str]:
    """A non-empty list or tuple of names (not one string), each one of `choices` when given."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise BadArgumentType(f"{name} must be a list of names, got {kind_of(values)} {values!r}")
    if not values:
        raise BadArgument(f"{name} is empty; name at least one")
    for value in values:
        if choices is not None:
            check_choice(f"each of {name}", value, choices)
    return list(values)


def check_generator(value: Any, name: str = "generator", *, none: bool = True) -> Any:
    """A `torch.Generator` (or None with `none`)."""
    import torch

    if value is None and none:
        return None
    if not isinstance(value, torch.Generator):
        raise BadArgumentType(f"{name} must be a torch.Generator, got {kind_of(value)}")
    return value


def check_callable(name: str, value: Any) -> Any:
    """Something to call."""
    if not callable(value):
        raise BadArgumentType(f"{name} must be callable, got {kind_of(value)} {value!r}")
    return value


def check_instance(name: str, value: Any, kind: type, hint: str = "") -> Any:
    """An instance of `kind` (`hint`: how to get one)."""
    if not isinstance(value, kind):
        raise BadArgumentType(f"{name} must be a {kind.__name__}{hint}, got {kind_of(value)}")
    return value


def check_heads(model: Any, heads: Any, name: str = "heads") -> list[Head]:
    """Heads named "L{layer}H{head}" (or `Head`s) that exist in the model."""
    if isinstance(heads, (str, Head)):
        heads = [heads]
    out = []
    for head in heads:
        try:
            parsed = head if isinstance(head, Head) else Head.parse(head)
        except (ValueError, AttributeError):
            raise BadArgument(
                f"{name}: {head!r} names no head (expected L<layer>H<head>, e.g. L0H1)"
            ) from None
        layers, per_layer = model.cfg.n_layers, model.cfg.n_heads
        if not (0 <= parsed.layer < layers and 0 <= parsed.head < per_layer):
            raise BadArgument(
                f"{name}: head {parsed.name} is not in the model ({layers} layers of {per_layer} heads)"
            )
        out.append(parsed)
    return out


def check_metric_value(value: Any, name: str, *, batch: int | None = None, finite_logits: bool = True) -> Any:
    """A metric's value on the unintervened logits: a real tensor; with `batch`, a scalar or one value per
    prompt [batch]; finite where the logits were (`finite_logits`). `name` is the metric's name."""
    import torch

    try:
        value = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise BadArgumentType(f"metric {name!r} must return a tensor, got {kind_of(value)}") from None
    if value.is_complex() or value.dtype == torch.bool:
        raise BadArgumentType(f"metric {name!r} must return real numbers, got dtype {value.dtype}")
    if batch is not None and value.numel() != 1 and tuple(value.shape) != (batch,):
        raise BadArgument(
            f"metric {name!r} must return a scalar or one value per prompt ({batch}), got shape "
            f"{tuple(value.shape)}"
        )
    if finite_logits and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise BadArgument(f"metric {name!r} returned NaN or inf on finite logits of the unintervened run")
    return value


def check_device(value: Any, name: str = "device") -> Any:
    """A torch device or its name ("cpu", "cuda", "cuda:1", ...)."""
    import torch

    try:
        return torch.device(value)
    except (RuntimeError, TypeError):
        raise BadArgument(f"{name} {value!r} is not a torch device (e.g. cpu, cuda, cuda:1)") from None


def check_path(value: Any, name: str = "path") -> None:
    """A file or folder name: a str or an os.PathLike."""
    if not isinstance(value, (str, os.PathLike)):
        raise BadArgumentType(f"{name} must be a path (str or os.PathLike), got {kind_of(value)}")


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
