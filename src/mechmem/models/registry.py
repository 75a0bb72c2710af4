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


def _registered(arch: Any) -> tuple[type, Builder]:
    """The config class and builder of `arch`, registered by `mechmem.models` on import or by a paper plugin
    (loaded on the first unknown name)."""
    if arch not in _ARCHITECTURES:
        from mechmem.plugins import load_papers

        load_papers()
    if arch not in _ARCHITECTURES:
        raise MechmemError(f"unknown model architecture {arch!r}")
    return _ARCHITECTURES[arch]


def model_config_from_dict(data: dict[str, Any]) -> Any:
    """Rebuild a model config from its `to_dict()` form (which carries the `arch` name)."""
    config_cls, _ = _registered(data.get("arch") if isinstance(data, dict) else None)
    return config_cls.from_dict(data)


def build_model(config: Any, *, generator: torch.Generator | None = None) -> torch.nn.Module:
    """Build a fresh model for `config`; initial weights are drawn from `generator`."""
    _, builder = _registered(getattr(config, "arch", None))
    return builder(config, generator=generator)
