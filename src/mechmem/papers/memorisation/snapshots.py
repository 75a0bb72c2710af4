"""Snapshots of a training in progress: its whole state, saved every few minutes, so it resumes where it was.

`batched.train_batched(snapshots=...)` saves the stack of initialisations still training (weights, Adam
moments, step counts, phases, patience), the finished rows' weights and results, with a key naming the
training. Started again with the same file, it restores them and goes on; full-batch training draws no random
numbers after the init, so it ends exactly as an uninterrupted run (tests/test_facts_batched.py). Files are
written atomically and read without unpickling code (`checkpoint.read_torch_file`).
"""

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from mechmem.checkpoint import atomic_torch_save, read_torch_file
from mechmem.errors import MechmemError


@dataclass(frozen=True)
class Snapshots:
    """Where a training saves its state while it runs, and how often; `key` names the training (a saved
    state of another training is refused, never trained on)."""

    path: Path
    key: str
    every: float = 300.0
    """Seconds between saves (0: after every epoch)."""


@dataclass(frozen=True)
class Resumed:
    """What a snapshot gives back beyond what it restores in place."""

    stack: dict[str, Tensor]
    """The active stack's tensors (`batched.ParamStack.load_state`)."""
    seconds: float
    """Wall seconds the training had run before the snapshot, over every earlier run (0 in snapshots written
    before they recorded it)."""


def save_snapshot(
    snapshots: Snapshots,
    stack: dict[str, Tensor],
    final: dict[str, Tensor],
    totals: dict[str, Tensor],
    success: Tensor,
    seconds: float,
) -> None:
    """Write the training's state: the active stack's tensors, the final weights, the totals and successes,
    and the wall seconds it has run so far."""
    state = {f"stack.{k}": t for k, t in stack.items()}
    state |= {f"final.{k}": t for k, t in final.items()} | {f"totals.{k}": t for k, t in totals.items()}
    atomic_torch_save({"key": snapshots.key, "success": success, "seconds": seconds, **state}, snapshots.path)


def load_snapshot(
    snapshots: Snapshots, final: dict[str, Tensor], totals: dict[str, Tensor], success: Tensor
) -> Resumed:
    """Restore a saved state into a fresh training's `final`, `totals` and `success` (in place); returns the
    active stack's tensors and the seconds run before. A snapshot of another training, or of other shapes,
    is refused."""
    saved, _ = read_torch_file(snapshots.path)
    if not isinstance(saved, dict) or saved.get("key") != snapshots.key:
        found = saved.get("key") if isinstance(saved, dict) else None
        raise MechmemError(f"{snapshots.path} is the snapshot of another training ({found!r})")
    for prefix, target in (("final", final), ("totals", totals)):
        for k, t in target.items():
            got = saved.get(f"{prefix}.{k}")
            if not isinstance(got, Tensor) or got.shape != t.shape:
                raise MechmemError(f"{snapshots.path}: {prefix}.{k} does not fit this training")
            t.copy_(got)
    success.copy_(saved["success"])
    stack = {k[len("stack.") :]: t for k, t in saved.items() if k.startswith("stack.")}
    return Resumed(stack, float(saved.get("seconds", 0.0)))
