"""Task registry: tasks by name, rebuilt from a checkpoint's task name and config (`registry`).

The core's tasks ("repeats"; `permutation`, `birth` and `facts` on first need), paper plugins, a
`--task-module FILE` or an entry point of the group "mechmem.tasks" register here.
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
