"""The trials file of capacity searches and the trainings in progress beside it, shared between workers.

A trials file (`facts_trials.jsonl`) holds one line per finished training of a cell (one fact count, 11
inits); `trials_of` reads a cell's. Beside it, `snapshot_dir` holds each training in progress: its snapshot
(`snapshots.Snapshots`, where `training_snapshots` puts it) and its claim (`snapshots.claim`: which process
runs it). Two workers on one cell share both: before training a count, a worker waits for a count another
live worker has claimed (`await_training`), and may spend the wait on the count its searches likely ask next
(`speculations`, from the outcomes the other training can still reach, `outcomes_left`).
`trainings_in_progress` reads every snapshot in brief (`sweep_facts status`).
"""

import hashlib
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError
from mechmem_papers.executor import load_records as load_cell_records
from mechmem_papers.memorisation.capacity import next_count
from mechmem_papers.memorisation.snapshots import SnapshotBrief, Snapshots, brief, held_elsewhere

CLAIM_POLL = 30.0
"""Seconds between looks at the trials file while another worker trains the fact count a search needs."""


def trials_of(path: str | Path, cell_key: str) -> dict[int, dict[str, Any]]:
    """Fact count -> record of each training of cell `cell_key` in a trials file."""
    records = load_cell_records(Path(path), flat=True).values()
    return {int(r["n"]): r for r in records if r.get("cell") == cell_key}


def snapshot_dir(trials: str | Path) -> Path:
    """The folder of a trials file's trainings in progress: facts_trials.jsonl -> facts_trials.snapshots."""
    trials = Path(trials)
    return trials.with_name(f"{trials.stem}.snapshots")


def trainings_in_progress(trials: str | Path) -> list[SnapshotBrief]:
    """The trainings saved beside a trials file (`snapshot_dir`), in brief, oldest save first."""
    folder = snapshot_dir(trials)
    found = [brief(p) for p in folder.glob("*.pt")] if folder.is_dir() else []
    return sorted(found, key=lambda b: b.saved)


def training_snapshots(trials: str | Path, cell_key: str, n: int, every: float = 300.0) -> Snapshots:
    """Where the cell's training of n facts saves its state (and its claim), in `snapshot_dir(trials)`."""
    key = f"{cell_key}|n={n}"
    name = hashlib.sha256(key.encode()).hexdigest()[:20]
    return Snapshots(snapshot_dir(trials) / f"{name}.pt", key, every=every)


def await_training(
    trials: str, cell_key: str, n: int, saves: Snapshots, idle: Callable[[], bool] | None = None
) -> dict[str, Any] | None:
    """The trials line of the cell's training of n facts, waiting while another worker on this host trains it
    (`snapshots.held_elsewhere`); None when no worker has trained it or is training it. While it waits it
    calls `idle` (work of its own; False: none to do) or else sleeps `CLAIM_POLL` seconds."""
    told = False
    while held_elsewhere(saves) and n not in trials_of(trials, cell_key):
        if idle is not None and idle():
            continue
        if not told:
            print(f"n = {n} is in training by another worker; waiting for its result", file=sys.stderr)
            told = True
        time.sleep(CLAIM_POLL)
    return trials_of(trials, cell_key).get(n)


def outcomes_left(saves: Snapshots, n_seeds: int) -> range:
    """The successes a training in progress can still end with: from its snapshot (inits stored so far, up
    to those plus the inits still training), or every count where it has none (or an unreadable one)."""
    try:
        b = brief(saves.path)
    except MechmemError:
        return range(n_seeds + 1)
    return range(b.stored, b.stored + b.training + 1)


def speculations(
    known: dict[int, int],
    n: int,
    outcomes: Iterable[int],
    n_seeds: int,
    limit: int,
    precision: int,
    criteria: tuple[str, ...],
) -> list[int]:
    """The counts worth training while another worker trains n: those the searches of `criteria` ask next
    under n's `outcomes` still possible (successes), not trained yet; the count asked under the most outcomes
    first (ties: the one of the fewest successes)."""
    asked = Counter(next_count({**known, n: k}, n_seeds, limit, precision, criteria) for k in outcomes)
    return [m for m, _ in asked.most_common() if m is not None and m not in known]
