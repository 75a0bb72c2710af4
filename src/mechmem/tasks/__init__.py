"""Task registry: tasks by name, rebuilt from a checkpoint's task name and config (`registry`).

Tasks come from three places: the core (`generic`: "repeats", which fits any model; the memory tasks
`permutation`, `birth` and `facts`, imported on first need), paper plugins (`mechmem.plugins.load_papers`),
and your own code: a file passed to the scripts as `--task-module FILE` (`load_task_module`) or an entry point
of the group "mechmem.tasks" in an installed distribution.
"""

from mechmem.tasks import generic  # noqa: F401  (registers the core's generic task, "repeats")
from mechmem.tasks.base import Batch, PatchingPair, Task, masked_accuracy, masked_cross_entropy
from mechmem.tasks.registry import (
    build_task,
    get_preset,
    get_task_class,
    load_task_module,
    register_task,
    task_names,
)

__all__ = [
    "Batch",
    "PatchingPair",
    "Task",
    "build_task",
    "get_preset",
    "get_task_class",
    "load_task_module",
    "masked_accuracy",
    "masked_cross_entropy",
    "register_task",
    "task_names",
]
