"""Snapshots of a training in progress: its whole state, saved every few minutes, so it resumes where it was.

`batched.train_batched(snapshots=...)` saves the stack of initialisations still training (weights, Adam
moments, step counts, phases, patience), the finished rows' weights and results, with a key naming the
training. Started again with the same file, it restores them and goes on; full-batch training draws no random
numbers after the init, so it ends exactly as an uninterrupted run (tests/test_facts_batched.py). Files are
written atomically and read without unpickling code (`checkpoint.read_torch_file`).

A training in progress is also *claimed* (`claim`): a small JSON file beside its snapshot names the process
running it (host and PID), so a second worker on the same search waits for that training's result instead of
training the same count (`held_elsewhere`). A claim of a process that has ended is free; a claim from another
host is not honoured (its process cannot be checked from here). `brief` reads a snapshot for a look at a
training that runs for hours (`sweep_facts status`).
"""

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from mechmem.checkpoint import atomic_torch_save, read_torch_file
from mechmem.errors import MechmemError
from mechmem.io import atomic_write


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


def claim_path(snapshots: Snapshots) -> Path:
    """The claim file of the training that saves to `snapshots` (beside its snapshot)."""
    return snapshots.path.with_name(f"{snapshots.path.stem}.claim")


def held_elsewhere(snapshots: Snapshots) -> bool:
    """Whether another process on this host, still running, has claimed this training (`claim`)."""
    try:
        owner = json.loads(claim_path(snapshots).read_text())
        pid = int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # no claim, or one cut mid-write: free
    if owner.get("host") != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def claim(snapshots: Snapshots) -> None:
    """Mark this training as run by this process (removed by `release`; a dead process's claim is free)."""
    snapshots.path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(claim_path(snapshots), json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))


def release(snapshots: Snapshots) -> None:
    """Remove this process's claim of the training, if it holds one."""
    if not held_elsewhere(snapshots):
        claim_path(snapshots).unlink(missing_ok=True)


@dataclass(frozen=True)
class SnapshotBrief:
    """What a snapshot says of its training in progress (`brief`)."""

    key: str
    """The training's key (the cell's key and `|n=` its fact count, in the sweeps)."""
    inits: int
    stored: int
    """Inits that have finished storing every fact."""
    training: int
    """Inits still training (the others have finished: stored, or stopped by patience or the epoch cap)."""
    phase: int
    """Learning-rate phase (from 1) of the init still training that is furthest along (the latest phase)."""
    epoch: int
    """That init's epochs in its phase so far (the most among the inits in that phase)."""
    best: int
    """Most facts any init still training has stored at once."""
    seconds: float
    """Wall seconds of training so far, over every run."""
    saved: float
    """When the snapshot was written (seconds since the epoch)."""
    worker: str
    """Who runs it: "PID p" (a running process of this host), "ended" (its process ended), "PID p on host h"
    (another host), or "none" (no claim)."""


def claim_owner(snapshots: Snapshots) -> str:
    """The worker of a training, for reading (`SnapshotBrief.worker`)."""
    try:
        owner = json.loads(claim_path(snapshots).read_text())
        pid, host = int(owner["pid"]), str(owner["host"])
    except (OSError, ValueError, KeyError, TypeError):
        return "none"
    if host != socket.gethostname():
        return f"PID {pid} on host {host}"
    return f"PID {pid}" if pid == os.getpid() or held_elsewhere(snapshots) else "ended"


def brief(path: Path) -> SnapshotBrief:
    """The state of the training saved at `path`, in brief (read without unpickling code)."""
    saved, _ = read_torch_file(path)
    try:
        success, ids, phases = saved["success"], saved["stack.ids"], saved["stack.phase"]
        running = ids.numel() > 0
        latest = phases == phases.max() if running else phases
        return SnapshotBrief(
            key=str(saved["key"]),
            inits=int(success.numel()),
            stored=int(success.sum()),
            training=int(ids.numel()),
            phase=int(phases.max()) + 1 if running else 0,
            epoch=int(saved["stack.phase_epoch"][latest].max()) if running else 0,
            best=int(saved["stack.best"].max()) if running else 0,
            seconds=float(saved.get("seconds", 0.0)),
            saved=path.stat().st_mtime,
            worker=claim_owner(Snapshots(path, str(saved["key"]))),
        )
    except (KeyError, TypeError, AttributeError, RuntimeError):
        raise MechmemError(f"{path}: not a training snapshot (fields missing or of the wrong kind)") from None
