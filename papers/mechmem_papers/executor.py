"""One way to run the cells of a sweep: in this process, or as Ray tasks on one machine or a cluster.

A sweep is a list of independent cells. A `Cell` names a module-level function (pickled by reference, so Ray
workers import it) and its keyword arguments; the function returns a JSON-serialisable record. `run_cells`
runs every cell whose key is not yet in the records file, appends each record to that file the moment it
arrives (so a killed sweep resumes where it stopped) and returns every record, stored or new, in cell order:

    cells = [Cell(f"d={d}|seed={s}", train_one, {"d": d, "seed": s}) for d in (8, 16) for s in range(3)]
    records = run_cells(cells, Path("runs/sweep.jsonl"))                      # in-process, one cell at a time
    records = run_cells(cells, Path("runs/sweep.jsonl"), executor="ray")      # a local Ray instance
    records = run_cells(cells, path, executor="ray", address="head:6379", device="cuda")  # a cluster, 1
    GPU/cell

Records are the same whichever executor ran them, provided each cell takes all its randomness from its kwargs
(an explicit seed) — which is the project's rule anyway. Two things make that hold in practice: every cell
runs with one torch thread (`threads`; CPU reductions may otherwise be summed in a different order), and every
record goes through JSON before it is returned, so a fresh record and one read back from the file are equal
objects. Records are written by the project's one JSON writer (`mechmem.io.dumps`): a NaN or infinite float
becomes `null` in the returned record and in the file alike, so no records file ever holds NaN. Fields that
measure the run itself (wall-clock seconds, a finish time) naturally differ from run to run.

The records file is JSON lines, `{"key": ..., "record": {...}}` per cell, or with `flat=True` the record
itself carrying its key under "key" (the memorisation sweeps' committed format). Lines may come in any order:
Ray appends records as they finish.

Ray is imported only when `executor="ray"`. Without `address` a local instance is started for the sweep
(`num_cpus` cells at once) and shut down after it; an instance already initialised in this process (a test
fixture, a notebook) is reused and left running. With `address` ("auto", or host:port of a head started by
`ray start --head`) the sweep joins that cluster; every node needs mechmem installed (see
docs/distributed.md).
"""

import json
import re
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError
from mechmem.io import dumps
from mechmem.progress import Progress

EXECUTORS = ("local", "ray")
"""Names accepted by `run_cells(executor=...)`."""

_ADDRESS = re.compile(r"^(ray://)?[A-Za-z0-9.\-]+:\d{1,5}$")


@dataclass(frozen=True)
class Cell:
    """One independent unit of a sweep."""

    key: str
    """Unique name of the cell; the records file is keyed by it.

    Put every setting that changes the record in it.
    """
    fn: Callable[..., dict]
    """Module-level function returning a JSON-serialisable record (Ray pickles it by reference)."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of `fn`, picklable; they carry the cell's seed."""


def software() -> dict[str, str]:
    """The versions a record was computed with: Python, torch, TransformerLens and its backend."""
    import platform

    import torch

    from mechmem.models.backend import BACKEND, TL_VERSION

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformer_lens": TL_VERSION,
        "backend": BACKEND,
    }


def check_executor(executor: str, address: str | None = None) -> None:
    """Raise `MechmemError` for an unknown executor, or an address that is not "auto" or host:port."""
    if executor not in EXECUTORS:
        raise MechmemError(f"unknown executor {executor!r} (known: {', '.join(EXECUTORS)})")
    if address is not None:
        if executor != "ray":
            raise MechmemError(f"an address ({address!r}) needs executor ray, not {executor!r}")
        if address != "auto" and not _ADDRESS.match(address):
            raise MechmemError(f"bad Ray address {address!r} (use auto, host:port or ray://host:port)")


def load_records(path: Path, *, flat: bool = False) -> dict[str, dict]:
    """key -> record of a records file (none if it does not exist; an unfinished last line is ignored)."""
    if not path.exists():
        return {}
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    out = {}
    for i, line in enumerate(lines):
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a sweep killed while writing its last record
                break
            raise MechmemError(f"{path}: line {i + 1} is not JSON") from None
        out[item["key"]] = item if flat else item["record"]
    return out


def _canonical(record: Any, key: str) -> dict:
    if not isinstance(record, dict):
        raise MechmemError(f"cell {key!r} returned {type(record).__name__}, not a dict")
    try:
        return json.loads(dumps(record))
    except (TypeError, ValueError) as err:
        raise MechmemError(f"cell {key!r} returned a record that is not JSON: {err}") from None


def append_record(path: Path, key: str, record: dict, flat: bool = False) -> None:
    """Append one record line to a records file (`flat`: the record's fields beside "key", else under
    "record"); an unfinished last line left by a killed writer is dropped first."""
    if flat and record.get("key", key) != key:
        raise MechmemError(f"cell {key!r} returned a record with key {record['key']!r}")
    line = dumps({"key": key, **record} if flat else {"key": key, "record": record})
    with open(path, "a+b") as fh:
        fh.seek(0)
        text = fh.read()
        if text and not text.endswith(b"\n"):  # a sweep killed mid-line: drop its unfinished record
            fh.truncate(text.rfind(b"\n") + 1)
        fh.write((line + "\n").encode())


def _copy_reused(
    keys: list[str], done: dict[str, dict], reuse: Iterable[Path], records: Path | None, flat: bool
) -> None:
    """Cells not in `done` but finished in a `reuse` file: into `done`, and appended to `records`."""
    for other in reuse:
        found = load_records(Path(other), flat=flat)
        for key in [k for k in keys if k in found and k not in done]:
            done[key] = found[key]
            if records is not None:
                append_record(records, key, found[key], flat)


def call_cell(fn: Callable[..., dict], kwargs: dict, threads: int) -> dict:
    """Run one cell with `threads` torch threads (restored afterwards): what both executors call."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn(**kwargs)
    finally:
        torch.set_num_threads(before)


def run_cells(
    cells: Iterable[Cell],
    records: Path | None = None,
    *,
    executor: str = "local",
    address: str | None = None,
    device: str = "cpu",
    progress: str | None = "cells",
    num_cpus: int | None = None,
    gpus_per_cell: float = 1.0,
    threads: int = 1,
    flat: bool = False,
    reuse: Iterable[Path] = (),
) -> dict[str, dict]:
    """Run every cell not yet in `records` and return key -> record for all cells, in cell order.

    Args:
        cells: the sweep; keys must be unique.
        records: JSON-lines file read for finished cells and appended to as cells finish (None: no file).
        executor: "local" (this process, one cell at a time) or "ray".
        address: Ray only: "auto" or host:port of a running cluster; None starts a local instance.
        device: what the cells run on, for Ray's resource requests only ("cuda...": `gpus_per_cell` GPUs per
            cell; "auto": GPUs when the cluster has any); each cell reads its own device from its kwargs.
        progress: label of the progress line written as each cell finishes (None: silent).
        num_cpus: CPUs of a local Ray instance started here (cells at once on CPU; None: all).
        gpus_per_cell: GPUs one cell asks Ray for when it runs on CUDA (0.25: four cells share a GPU).
        threads: torch threads inside each cell (1 keeps records identical across executors).
        flat: the records file holds the records themselves, each with its "key" (see the module docstring).
        reuse: other records files (same layout); a cell finished there is copied into `records`, not rerun
            (one cell that belongs to two sweeps, e.g. a table variant that is also a scaling point).
    """
    cells = list(cells)
    check_executor(executor, address)
    keys = [c.key for c in cells]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise MechmemError(f"two cells share the key {dup!r}")
    if records is not None:
        records = Path(records)
        records.parent.mkdir(parents=True, exist_ok=True)
    stored = load_records(records, flat=flat) if records is not None else {}
    done = {k: stored[k] for k in keys if k in stored}
    _copy_reused(keys, done, reuse, records, flat)
    todo = [c for c in cells if c.key not in done]
    run = (
        _run_ray(todo, device, address, num_cpus, gpus_per_cell, threads)
        if todo and executor == "ray"
        else ((c, call_cell(c.fn, c.kwargs, threads)) for c in todo)
    )
    bar = Progress(
        len(cells), initial=len(done), desc=progress or "", enabled=progress is not None, every_s=0
    )
    with bar, closing(run):
        for cell, raw in run:
            done[cell.key] = _canonical(raw, cell.key)
            if records is not None:
                append_record(records, cell.key, done[cell.key], flat)
            bar.set_postfix(cell=cell.key)
            bar.update()
    return {k: done[k] for k in keys}


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MechmemError("executor ray needs Ray: install mechmem[ray] (pip install -e '.[ray]')") from None
    return ray


def _check_reachable(address: str) -> None:
    """Fail in seconds, with one line, when nothing listens at host:port (Ray itself retries for minutes)."""
    if address == "auto":
        return
    host, port = address.removeprefix("ray://").rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise MechmemError(f"no Ray cluster reachable at {address} ({err.strerror or err})") from None


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """The `ray` module, initialised: reuses a running instance, else joins `address` or starts a local one
    (loopback only, no dashboard, no usage reporting), shut down on exit if started here."""
    import os

    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        _check_reachable(address)
    options: dict[str, Any] = {"log_to_driver": False}
    if address is None:
        options.update(
            address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1"
        )
    else:
        options.update(address=address)
    try:
        ray.init(**options)
    except (ConnectionError, ValueError, RuntimeError, SystemExit) as err:
        raise MechmemError(f"could not start or join Ray ({address or 'local'}): {err}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _run_ray(
    cells: list[Cell],
    device: str,
    address: str | None,
    num_cpus: int | None,
    gpus_per_cell: float,
    threads: int,
) -> Iterator[tuple[Cell, dict]]:
    """Submit one Ray task per cell and yield (cell, record) as they finish; cancel the rest on error."""
    with ray_session(address, num_cpus) as ray:
        gpus = ray.cluster_resources().get("GPU", 0)
        gpu = device.startswith("cuda") or (device == "auto" and gpus > 0)
        if gpu and gpus < gpus_per_cell:
            raise MechmemError(
                f"device {device} asks {gpus_per_cell} GPU per cell; the Ray cluster has {gpus:g}"
            )
        task = ray.remote(call_cell).options(num_cpus=1, num_gpus=gpus_per_cell if gpu else 0, max_retries=0)
        pending = {task.remote(c.fn, c.kwargs, threads): c for c in cells}
        try:
            while pending:
                (ready,), _ = ray.wait(list(pending), num_returns=1)
                try:
                    record = ray.get(ready)
                except ray.exceptions.RayTaskError as err:
                    if isinstance(err.cause, MechmemError):  # a user error inside a cell: its one line
                        raise err.cause from None
                    raise
                yield pending.pop(ready), record
        finally:
            for ref in pending:
                ray.cancel(ref)


__all__ = ["EXECUTORS", "Cell", "call_cell", "check_executor", "load_records", "ray_session", "run_cells"]
