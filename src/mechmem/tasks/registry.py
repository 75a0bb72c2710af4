"""Tasks by name: the registry every task registers into, and the loading of task plugins.

Tasks come from the core, paper plugins, a `--task-module FILE` (`load_task_module`) or an entry point of
the group "mechmem.tasks".
"""

import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from mechmem.errors import BadArgument, BadArgumentType, MechmemError
from mechmem.models.checks import kind_of
from mechmem.tasks.base import Task

_REGISTRY: dict[str, type[Task]] = {}
ENTRY_POINT_GROUP = "mechmem.tasks"
_PLUGINS_LOADED = False


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available by its `name`.

    Example:
        >>> import mechmem
        >>> from mechmem.tasks.generic import RepeatsTask
        >>> @mechmem.register_task
        ... class ShortRepeats(RepeatsTask):
        ...     name = "short-repeats-example"
        >>> mechmem.build_task("short-repeats-example", {"d_vocab": 12, "half": 2}).config.half
        2
    """
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise BadArgumentType(f"register_task takes a Task subclass, got {kind_of(cls)}")
    if not (isinstance(cls.name, str) and cls.name):
        raise BadArgument(
            f"task class {cls.__name__} needs a name (a class attribute, e.g. name = 'my-task')"
        )
    _REGISTRY[cls.name] = cls
    return cls


def _load_plugins() -> None:
    """Import every "mechmem.tasks" entry point and the paper plugins (once)."""
    global _PLUGINS_LOADED
    from mechmem.plugins import load_papers, load_plugin

    if not _PLUGINS_LOADED:
        _PLUGINS_LOADED = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            load_plugin(ep.name, ep.load, kind="task plugin")
        load_papers()


def load_task_module(path: str | Path) -> None:
    """Import a Python file that registers tasks (`--task-module FILE`); a bad file is a `MechmemError`."""
    path = Path(path)
    if not path.is_file():
        raise MechmemError(f"--task-module {path}: no such file")
    name = f"mechmem_user_tasks_{abs(hash(str(path.resolve())))}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise MechmemError(f"--task-module {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as exc:  # the file ran sys.exit(): an import that did not finish, whatever its code
        del sys.modules[name]
        raise MechmemError(
            f"--task-module {path}: import failed (it called sys.exit({exc.code!r}))"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's code: report it in one line, not a traceback
        del sys.modules[name]
        raise MechmemError(f"--task-module {path}: import failed ({type(exc).__name__}: {exc})") from None


def task_names() -> list[str]:
    """Names of all tasks that can be loaded.

    Example:
        >>> import mechmem
        >>> {"permutation", "birth", "facts", "repeats"} <= set(mechmem.task_names())
        True
    """
    _load_plugins()
    return sorted(_REGISTRY)


def get_task_class(name: str) -> type[Task]:
    """The task class registered as `name`."""
    if name not in _REGISTRY:
        _load_plugins()
    if name not in _REGISTRY:
        raise MechmemError(
            f"unknown task {name!r} (known: {', '.join(task_names())}; load your own with --task-module FILE)"
        )
    return _REGISTRY[name]


def build_task(name: str, config: Any = None) -> Task:
    """Build task `name` from a config dataclass or dict (None: the default config).

    Example:
        >>> import mechmem, torch
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 4})
        >>> task.eval_batch(2, generator=torch.Generator().manual_seed(0)).tokens.shape
        torch.Size([2, 8])
    """
    if not isinstance(name, str):
        raise BadArgumentType(f"the task name must be a str, got {kind_of(name)}")
    cls = get_task_class(name)
    if config is None:
        config = cls.config_cls()
    return cls(config)


def get_preset(task: str, preset: str) -> Any:
    """The `Preset` (model, task and train configs) called `preset` of task `task`."""
    cls = get_task_class(task)
    if preset not in cls.presets:
        raise MechmemError(
            f"task {task!r} has no preset {preset!r} (known: {', '.join(sorted(cls.presets))})"
        )
    return cls.presets[preset]
