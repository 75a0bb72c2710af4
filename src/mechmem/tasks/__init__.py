"""Task registry: tasks by name, rebuilt from a checkpoint's task name and config."""

from typing import Any

from mechmem.errors import MechmemError
from mechmem.tasks.base import Batch, PatchingPair, Task, masked_accuracy, masked_cross_entropy

# Paper plugins register their tasks when imported; `mechmem.plugins.load_papers` imports them on first need,
# so importing mechmem stays cheap and the core names no paper.
_REGISTRY: dict[str, type[Task]] = {}


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available by its `name`."""
    _REGISTRY[cls.name] = cls
    return cls


def task_names() -> list[str]:
    """Names of all tasks that can be loaded."""
    from mechmem.plugins import load_papers

    load_papers()
    return sorted(_REGISTRY)


def get_task_class(name: str) -> type[Task]:
    """The task class registered as `name`."""
    if name not in _REGISTRY:
        from mechmem.plugins import load_papers

        load_papers()
    if name not in _REGISTRY:
        raise MechmemError(f"unknown task {name!r} (known: {', '.join(task_names())})")
    return _REGISTRY[name]


def build_task(name: str, config: Any = None) -> Task:
    """Build task `name` from a config dataclass or dict (None: the default config)."""
    cls = get_task_class(name)
    if config is None:
        config = cls.config_cls()
    return cls(config)


def get_preset(task: str, preset: str) -> Any:
    """The `Preset` (model, task and train configs) called `preset` of task `task`."""
    cls = get_task_class(task)
    if preset not in cls.presets:
        raise MechmemError(f"task {task!r} has no preset {preset!r} (known: {', '.join(sorted(cls.presets))})")
    return cls.presets[preset]


__all__ = [
    "Batch",
    "PatchingPair",
    "Task",
    "build_task",
    "get_preset",
    "get_task_class",
    "masked_accuracy",
    "masked_cross_entropy",
    "register_task",
    "task_names",
]
