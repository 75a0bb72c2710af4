"""How many CPU threads torch uses, chosen once at start-up so that a busy machine does not multiply the cost.

torch starts one intra-op thread per core it sees. Beside another busy process those threads wait on each
other: every parallel operation ends when its slowest thread, the one sharing a core, ends, and the others
spin meanwhile, so the same work costs several times the CPU time (docs/record/2026-12-07-limits.md measures
it). `choose_threads` takes the cores this process may run on (`os.sched_getaffinity`) that the
machine's load (`os.getloadavg`, the last minute's mean number of runnable processes) leaves free:

    threads = max(1, cpus - round(load))

A `--threads N` flag, else the environment variable MECHMEM_THREADS, else OMP_NUM_THREADS (which torch reads
itself) overrides the choice. Nothing here imports torch until `use_threads` sets the number.
"""

import math
import os

from mechmem.errors import MechmemError

THREADS_ENV = "MECHMEM_THREADS"
"""Environment variable that sets the number of torch CPU threads (a `--threads` flag overrides it)."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one, else every CPU)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def default_threads(cpus: int | None = None, load: float | None = None) -> int:
    """`cpus` less the load rounded to the nearest integer, at least 1 (defaults: `available_cpus()` and the
    one-minute load average; a system without one counts as idle).

    Example:
        >>> [default_threads(cpus=2, load=0.2), default_threads(cpus=2, load=1.1)]
        [2, 1]
        >>> default_threads(cpus=8, load=3.0)
        5
    """
    cpus = available_cpus() if cpus is None else cpus
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # no load average on this system
            load = 0.0
    return max(1, min(cpus, cpus - math.floor(load + 0.5)))


def choose_threads(flag: int | None = None) -> int | None:
    """The number of torch threads: `flag` if given, else MECHMEM_THREADS, else None when OMP_NUM_THREADS is
    set (torch has read it), else `default_threads()`. A MECHMEM_THREADS that is not an integer in
    [1, 4 x the CPUs here] is a one-line `MechmemError`."""
    if flag is not None:
        return flag
    text = os.environ.get(THREADS_ENV, "").strip()
    if text:
        most = 4 * (os.cpu_count() or 1)
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= most:
            raise MechmemError(f"{THREADS_ENV}={text!r}: not an integer in [1, {most}]")
        return value
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return None
    return default_threads()


def use_threads(flag: int | None = None) -> int:
    """Set torch's number of intra-op CPU threads to `choose_threads(flag)` (imports torch); returns it."""
    import torch

    threads = choose_threads(flag)
    if threads is not None:
        torch.set_num_threads(threads)
    return torch.get_num_threads()
