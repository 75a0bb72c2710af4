"""Architectures by name, so a checkpoint can rebuild any mechmem model from its config alone.

An architecture is a frozen config dataclass (with `to_dict`/`from_dict` and a class attribute `arch`) and a
builder `build(config, *, generator) -> torch.nn.Module`. The module should be a TransformerLens
`HookedRootModule` so the analysis toolkit can hook it.
"""

from collections.abc import Callable
from typing import Any

import torch

from mechmem.errors import MechmemError

Builder = Callable[..., torch.nn.Module]
_ARCHITECTURES: dict[str, tuple[type, Builder]] = {}


def register_architecture(name: str, config_cls: type, builder: Builder) -> None:
    """Register `builder(config, *, generator=None)` for configs whose `arch` field is `name`."""
    _ARCHITECTURES[name] = (config_cls, builder)


def _known(arch: Any) -> bool:
    """Whether `arch` is registered (by `mechmem.models` on import, or by a loaded paper plugin)."""
    if arch not in _ARCHITECTURES:
        from mechmem.plugins import load_papers

        load_papers()
    return arch in _ARCHITECTURES


def model_config_from_dict(data: dict[str, Any]) -> Any:
    """Rebuild a model config from its `to_dict()` form (which carries the `arch` name)."""
    arch = data.get("arch") if isinstance(data, dict) else None
    if not _known(arch):
        raise MechmemError(f"unknown model architecture {arch!r}")
    config_cls, _ = _ARCHITECTURES[arch]
    return config_cls.from_dict(data)


def build_model(config: Any, *, generator: torch.Generator | None = None) -> torch.nn.Module:
    """Build a fresh model for `config`; initial weights are drawn from `generator`."""
    arch = getattr(config, "arch", None)
    if not _known(arch):
        raise MechmemError(f"unknown model architecture {arch!r}")
    return _ARCHITECTURES[arch][1](config, generator=generator)
