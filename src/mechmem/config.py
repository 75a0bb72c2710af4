"""Serialisable frozen dataclass configs.

`ConfigMixin` gives a frozen dataclass a JSON-safe `to_dict` and a `from_dict` that rejects unknown keys and
wrongly typed values with a one-line `MechmemError`. `TrainConfig` and `Preset` live here.
"""

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
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
    seed: int = 0
    """Seeds model init (seed), training data (seed + 1) and evaluation data (seed + 2)."""

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}")
        if self.steps < 0 or self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("steps must be >= 0, batch_size and eval_every >= 1")


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
