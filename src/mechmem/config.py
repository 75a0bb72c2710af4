"""Serialisable frozen dataclass configs.

`ConfigMixin` gives a frozen dataclass a JSON-safe `to_dict` and a `from_dict` that rejects unknown keys and
wrongly typed values with a one-line `MechmemError`. `TrainConfig`, the `TrainIntervention` it records by
its spec string, and `Preset` live here, and `resolve_device` (a `--device` name to a torch device).
"""

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mechmem.errors import MechmemError

C = TypeVar("C", bound="ConfigMixin")


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return value.to_dict()  # type: ignore[union-attr]
    return value


UNIONS = (typing.Union, types.UnionType)


def _coerce(tp: Any, value: Any) -> Any:
    """Turn JSON lists back into tuples where the field type asks for one."""
    if not isinstance(value, list):
        return value
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        return tuple(_coerce(args[0] if args else Any, v) for v in value)
    if typing.get_origin(tp) in UNIONS:
        tuples = [arg for arg in typing.get_args(tp) if typing.get_origin(arg) is tuple]
        return _coerce(tuples[0], value) if tuples else value
    return value


SCALARS: dict[Any, Any] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    type(None): lambda v: v is None,
    Any: lambda v: True,
}
"""Annotation -> whether a JSON value fits it (a bool is no number)."""


def _type_ok(tp: Any, value: Any) -> bool:
    """Whether `value` (after `_coerce`) fits the annotation `tp`; unfamiliar annotations are accepted."""
    if tp in SCALARS:
        return SCALARS[tp](value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in UNIONS:
        return any(_type_ok(arg, value) for arg in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_type_ok(args[0], v) for v in value)
        return not args or (len(args) == len(value) and all(_type_ok(a, v) for a, v in zip(args, value)))
    if origin is typing.Literal:
        return value in args
    return True


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


class ConfigMixin:
    """Mixin for frozen dataclass configs: `to_dict`, strict `from_dict`, `replace`."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        if not isinstance(data, dict):
            raise MechmemError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names)
        if unknown:
            raise MechmemError(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
        kwargs = {k: _coerce(hints.get(k, Any), v) for k, v in data.items()}
        for key, value in kwargs.items():
            if not _type_ok(hints.get(key, Any), value):
                raise MechmemError(
                    f"{cls.__name__}: field {key} must be {_type_name(hints[key])}, got {value!r}"
                )
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise MechmemError(f"{cls.__name__}: {exc}") from None

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def config_dict(config: Any) -> dict[str, Any]:
    """A config as a dict: its `to_dict()`, a copy of a mapping, {} for None."""
    if config is None:
        return {}
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


OptionParser = Callable[[str], Any]
"""A `--set` value parser: the text after `=` -> the field's value; raises ValueError or MechmemError."""


def parse_option(default: Any, text: str) -> Any:
    """A `--set` value read by the type of the field's default: 0/1 for a bool, int, float, a path, a
    comma-separated tuple (of ints when the default holds ints), else the text itself."""
    if isinstance(default, bool):
        if text not in ("0", "1"):
            raise ValueError(f"takes 0 or 1, got {text!r}")
        return text == "1"
    if isinstance(default, tuple):
        items = [v.strip() for v in text.split(",") if v.strip()]
        return tuple(int(v) for v in items) if default and isinstance(default[0], int) else tuple(items)
    if isinstance(default, (int, float)):
        return type(default)(text)
    if isinstance(default, Path):
        return Path(text)
    return text


def apply_options(
    spec: Any,
    options: dict[str, str],
    names: Iterable[str] | None = None,
    parsers: dict[str, OptionParser] | None = None,
) -> Any:
    """A paper's spec (a frozen dataclass) with its `--set NAME=VALUE` options applied: the one option parser.

    Args:
        spec: the variant's spec, holding every default.
        options: NAME -> text, as given on the command line.
        names: the fields `--set` may change (default: every field).
        parsers: NAME -> parser for fields whose text needs more than `parse_option` (a range check, a
            choice); the others are read by the type of their default.
    Raises:
        MechmemError: an unknown name ("unknown option 'x' (known: ...)") or a value its parser refuses.
    """
    known = [f.name for f in dataclasses.fields(spec)] if names is None else list(names)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise MechmemError(f"unknown option {unknown[0]!r} (known: {', '.join(known)})")
    parsers = parsers or {}
    changes = {}
    for name, text in options.items():
        try:
            changes[name] = (
                parsers[name](text) if name in parsers else parse_option(getattr(spec, name), text)
            )
        except ValueError as exc:
            raise MechmemError(f"--set {name}={text}: {exc}") from None
    return dataclasses.replace(spec, **changes)


INTERVENTION_OPS = ("zero", "mean")
"""What `mechmem train --intervene` sets an activation to (a library function is "fn:NAME")."""
_INTERVENTION = re.compile(
    r"(?:L(?P<layer>\d+)H(?P<head>\d+)|(?P<hook>[A-Za-z_][\w.]*)(?:\[(?P<index>\d+)\])?)"
    r"\s*=\s*(?P<op>zero|mean|fn:[^\s=]+)"
)


@dataclass(frozen=True)
class TrainIntervention:
    """An activation set in every training forward pass (Singh et al. 2024 clamp activations while training);
    gradients flow through everything else. Written as a spec string:

        L{l}H{h}=zero|mean     head h's output: `blocks.{l}.attn.hook_z` at head index h
        HOOK=zero|mean         any TransformerLens hook, e.g. blocks.0.hook_resid_post, blocks.0.mlp.hook_post
        HOOK[i]=zero|mean      index i of the hook's last axis (a neuron of mlp.hook_post, a coordinate)
        HOOK=fn:NAME           a library function fn(act, hook) -> act (`TrainIntervention.function`)

    "mean" is the mean over the current training batch (axis 0), at each position, detached: a constant for
    the gradient, tracking the model as it trains without a second forward pass.

    Example:
        >>> from mechmem.config import TrainIntervention
        >>> iv = TrainIntervention.parse("blocks.0.mlp.hook_post[3]=mean")
        >>> iv.hook, iv.index, iv.op, str(TrainIntervention.parse("L1H0=zero"))
        ('blocks.0.mlp.hook_post', 3, 'mean', 'L1H0=zero')
    """

    hook: str
    """TransformerLens hook name ("blocks.{l}.attn.hook_z" for a head)."""
    op: str = "zero"
    """"zero", "mean" or "fn:NAME"."""
    head: int | None = None
    """Head index into hook_z's head axis (axis 2), else None."""
    index: int | None = None
    """Index into the activation's last axis, else None (the whole activation)."""
    fn: Callable[[Any, Any], Any] | None = field(default=None, compare=False, repr=False)
    """For "fn:NAME": fn(act, hook) -> new act (out of place); None when only the spec string is known."""

    @classmethod
    def parse(cls, text: str) -> "TrainIntervention":
        """The intervention a spec string names; a one-line ValueError when it names none."""
        match = _INTERVENTION.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ValueError(
                f"{text!r} is no intervention: expected L<layer>H<head>=OP, HOOK=OP or HOOK[i]=OP "
                f"with OP one of {', '.join(INTERVENTION_OPS)}"
            )
        if match["layer"] is not None:
            hook = f"blocks.{int(match['layer'])}.attn.hook_z"
            return cls(hook, match["op"], head=int(match["head"]))
        return cls(match["hook"], match["op"], index=None if match["index"] is None else int(match["index"]))

    @classmethod
    def function(
        cls, hook: str, fn: Callable[[Any, Any], Any], name: str | None = None
    ) -> "TrainIntervention":
        """Set the activation at `hook` to `fn(act, hook)` (whole activation; return new values, do not
        write into `act`); recorded as "HOOK=fn:NAME", NAME defaulting to the function's name.

        Example:
            >>> import torch
            >>> from mechmem.config import TrainIntervention
            >>> u = torch.nn.functional.normalize(torch.ones(16), dim=0)     # a residual direction
            >>> def no_u(act, hook):
            ...     return act - (act @ u)[..., None] * u                    # project it out
            >>> str(TrainIntervention.function("blocks.0.hook_resid_post", no_u))
            'blocks.0.hook_resid_post=fn:no_u'
        """
        label = name if name is not None else getattr(fn, "__name__", type(fn).__name__)
        return dataclasses.replace(cls.parse(f"{hook}=fn:{label}"), fn=fn)

    def __str__(self) -> str:
        if self.head is not None:
            return f"L{self.hook.split('.')[1]}H{self.head}={self.op}"
        return f"{self.hook}{'' if self.index is None else f'[{self.index}]'}={self.op}"


OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine", "linear")


@dataclass(frozen=True)
class TrainConfig(ConfigMixin):
    """How to train: optimiser, schedule, length, logging and checkpointing."""

    steps: int = 1000
    """Number of optimiser steps (each on a fresh batch)."""
    batch_size: int = 128
    """Sequences per step."""
    lr: float = 1e-3
    """Peak learning rate."""
    optimizer: str = "adam"
    """adam, adamw or sgd (with momentum)."""
    momentum: float = 0.9
    """SGD momentum."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam/AdamW betas."""
    weight_decay: float = 0.0
    """Weight decay (decoupled for AdamW, L2 for Adam and SGD)."""
    schedule: str = "constant"
    """Learning-rate schedule after warm-up: constant, cosine or linear (decaying to min_lr_ratio)."""
    warmup_steps: int = 0
    """Linear warm-up steps from 0 to lr."""
    min_lr_ratio: float = 0.0
    """Final lr as a fraction of lr, for cosine and linear schedules."""
    grad_clip: float | None = None
    """Clip the global gradient norm to this value; None disables clipping."""
    eval_every: int = 500
    """Evaluate and append a line to metrics.jsonl every this many steps (and at the end)."""
    eval_samples: int = 2048
    """Sequences per evaluation."""
    save_every: int = 0
    """Write an intermediate checkpoint every this many steps (0: only the final one)."""
    frozen_until: tuple[tuple[str, int], ...] = ()
    """(parameter glob, step) pairs: matching parameters get no update before that step."""
    interventions: tuple[str, ...] = ()
    """Activations set in the forward pass before `intervene_until`, as `TrainIntervention` spec strings."""
    intervene_until: int | None = None
    """Forward passes (training and evaluation) at steps below this run under the interventions; None: every
    one, the final evaluation included."""
    seed: int = 0
    """Seeds model init (seed), training data (seed + 1) and evaluation data (seed + 2)."""

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}")
        if self.steps < 0 or self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("steps must be >= 0, batch_size and eval_every >= 1")
        if self.intervene_until is not None and self.intervene_until < 0:
            raise ValueError("intervene_until must be >= 0")
        canonical = tuple(str(TrainIntervention.parse(str(spec))) for spec in self.interventions)
        object.__setattr__(self, "interventions", canonical)


@dataclass(frozen=True)
class Preset:
    """A named run: model, task and training configs that belong together."""

    model: Any
    """Model config (any registered architecture)."""
    task: Any
    """Task config."""
    train: TrainConfig
    """Training config."""
    description: str = ""
    """What this preset is for (shown by `mechmem train --list`)."""


def resolve_device(device: str) -> Any:
    """The device named `device`: "auto" (CUDA when available, else the CPU), "cpu", "cuda" or "cuda:N"; a
    CUDA device this machine lacks is a one-line `MechmemError`. Imports torch and nothing else of weight, so
    a command calls it before loading anything."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu" and not re.fullmatch(r"cuda(:\d+)?", device):
        raise MechmemError(f"unknown device {device!r} (use auto, cpu, cuda or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MechmemError(
            f"--device {device}: this machine has no CUDA device torch can use; use --device cpu"
        )
    if ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise MechmemError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device(device)
