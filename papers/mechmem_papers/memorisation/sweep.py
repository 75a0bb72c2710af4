"""Sweeps of capacity searches: resumable JSONL records, the 54-variant table, and d-scaling fits.

A sweep is a list of `SearchCell`s (variant, sizes, repeat, schedule). `run_sweep` runs them through the one
executor (`mechmem_papers.executor.run_cells`: in-process, or Ray tasks), which appends one
JSON line per finished cell and skips cells whose key is already in the file, so an interrupted sweep resumes
where it stopped. Repeat r uses init seeds 11r .. 11r + 10 (the published repeats drew fresh random inits).

With a trials file (`--trials`), every finished training of a cell (one fact count, 11 inits) is appended
there too, and a cell started again reads them instead of training them again: a cell interrupted mid-search
loses at most the training it was in. Each training in progress also saves its state every few minutes in a
folder beside the trials file (`trials.snapshot_dir`), so a cell stopped mid-training loses only the minutes
since its last save; the snapshot is removed once the training's line is written. A helper worker
(`help_cells`) runs only some criteria's searches of a cell and shares its trainings through the same trials
file; a worker waits for a count another one is training (its claim), or with `speculate` trains the count
likely asked next (`mechmem_papers.memorisation.trials`).

Scaling follows the authors: n_in = 2d, d_model = d_mlp = n_out = d, search precision 8 (d/16)^2; their E7
also let the epoch cap per lr phase grow with d (50,000 x 1, 2, 4, 8 for d = 16, 32, 64, 128) with patience
5,000 throughout, which `e7_schedule` applies to any base schedule. The fits are `fits.fit_scaling`
(`scaling_fits` groups the records by variant and criterion).
"""

import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mechmem.analysis.stats import format_mean_sd
from mechmem.errors import MechmemError
from mechmem.models.facts import FactsModelConfig, all_variants
from mechmem_papers.executor import Cell, append_record, run_cells
from mechmem_papers.executor import load_records as load_cell_records
from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.capacity import (
    CRITERIA,
    N_INITS,
    find_capacity,
    finished_searches,
    train_count,
)
from mechmem_papers.memorisation.fits import ScalingFit, fit_scaling
from mechmem_papers.memorisation.snapshots import (
    Snapshots,
    claim,
    held_elsewhere,
    release,
)
from mechmem_papers.memorisation.trials import (
    await_training,
    outcomes_left,
    speculations,
    training_snapshots,
    trials_of,
)

SCALING_VARIANTS = {
    "full": FactsModelConfig(
        mixing="attn", mlp=True, norms=True, bias=True, mlp_residual=True, act_fn="gelu"
    ),
    "reduced": FactsModelConfig(
        mixing="2emb", mlp=True, norms=False, bias=True, mlp_residual=False, act_fn="relu"
    ),
    "nb": FactsModelConfig(
        mixing="2emb", mlp=True, norms=False, bias=False, mlp_residual=False, act_fn="relu"
    ),
}


@dataclass(frozen=True)
class SearchCell:
    """One capacity search: a variant at one size, one repeat, one schedule."""

    config: FactsModelConfig
    repeat: int
    schedule: Schedule
    precision: int = 8
    facts_device: str = "cpu"
    """Device of the fact generator's permutation (the published runs drew it on CUDA: another fact set)."""

    @property
    def key(self) -> str:
        c, s = self.config, self.schedule
        facts = "" if self.facts_device == "cpu" else f"|facts={self.facts_device}"
        return (
            f"{c.name}|d={c.d_model}|n_in={c.n_in}|rep={self.repeat}|acc={s.target_acc}|"
            f"epochs={s.max_epochs}|patience={s.patience}|prec={self.precision}{facts}"
        )

    @property
    def seeds(self) -> list[int]:
        return [N_INITS * self.repeat + i for i in range(N_INITS)]


def scaled(cfg: FactsModelConfig, d: int) -> FactsModelConfig:
    """The variant at size d: n_in = 2d, d_model = d_mlp = n_out = d."""
    return cfg.replace(n_in=2 * d, n_out=d, d_model=d, d_mlp=d)


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """All records of a sweep file, one per key (missing file: none; a cut line: skipped)."""
    return list(load_cell_records(Path(path), flat=True).values())


def in_progress(trials: str | Path, cells: list[SearchCell], done: set[str]) -> list[dict[str, Any]]:
    """The cells of `cells` with trainings in `trials` but no finished record (key not in `done`), each in
    brief: the capacity under each criterion whose search has ended on those trainings (`finished_searches`;
    None: still running), how many trainings finished and their seconds so far."""
    by_cell: dict[str, dict[int, dict[str, Any]]] = {}
    for r in load_cell_records(Path(trials), flat=True).values():  # the file read once for every cell
        by_cell.setdefault(r.get("cell", ""), {})[int(r["n"])] = r
    out = []
    for cell in cells:
        found = {} if cell.key in done else by_cell.get(cell.key, {})
        if not found:
            continue
        known = {n: int(r["successes"]) for n, r in found.items()}
        answers = finished_searches(known, len(cell.seeds), cell.config.n_in**2, cell.precision)
        out.append(
            {
                "key": cell.key,
                "variant": cell.config.name,
                "d": cell.config.d_model,
                "config": cell.config.to_dict(),
                "schedule": cell.schedule.to_dict(),
                "repeat": cell.repeat,
                **answers,
                "trainings": len(known),
                "seconds": round(sum(float(r.get("seconds", 0.0)) for r in found.values()), 2),
            }
        )
    return out


def search_cell(
    cell: SearchCell,
    device: str,
    all_at_once: bool = False,
    trials: str | None = None,
    snapshot_every: float = 300.0,
    criteria: tuple[str, ...] = tuple(CRITERIA),
    speculate: bool = False,
) -> dict[str, Any]:
    """One cell's capacity search on `device` (resolved in the worker): its record, JSON-able.

    `all_at_once`: train every fact count the search could try in one stack (`find_capacity`). `trials`: a
    JSONL file that receives one line per finished training (fact count) of the cell and is read when the cell
    starts, so a cell interrupted mid-search resumes after its last finished training; with it, each
    training in progress saves its state every `snapshot_every` seconds (`trials.snapshot_dir`) and resumes
    from there, and the file is read again before each training, so a count another worker has finished
    meanwhile (`help_cells`) is not trained twice; a count another worker on this host is training (its
    claim, `snapshots.claim`) is waited for. With `speculate`, the wait is spent training the count the
    searches would ask next under most of the outcomes that training's snapshot still allows
    (`trials.speculations`).
    `criteria`: the searches to run (a record only when all three).
    """
    from mechmem.config import resolve_device

    earlier, last = (trials_of(trials, cell.key) if trials else {}), [time.perf_counter()]
    claimed: set[int] = set()

    def snapshots(n: int) -> Snapshots:
        return training_snapshots(trials, cell.key, n, snapshot_every)

    def train(n: int) -> bool:
        """Train n now (a speculative training, while another worker trains the count the search needs)."""
        claim(snapshots(n))
        claimed.add(n)
        last[0] = time.perf_counter()
        where = {
            "data_device": cell.facts_device,
            "device": resolve_device(device),
            "snapshots": snapshots(n),
        }
        record_trial(n, train_count(cell.config, n, cell.seeds, cell.schedule, **where))
        return True

    def guess(n: int) -> bool:
        done = {m: int(r["successes"]) for m, r in trials_of(trials, cell.key).items()}
        outcomes = outcomes_left(snapshots(n), len(cell.seeds))
        options = speculations(
            done, n, outcomes, len(cell.seeds), cell.config.n_in**2, cell.precision, criteria
        )
        free = [m for m in options if not held_elsewhere(snapshots(m))]
        return bool(free) and train(free[0])

    def recorded(n: int) -> int | None:
        """Another worker's result for n (waiting while it trains n); else None, and n is claimed."""
        idle = (lambda: guess(n)) if speculate else None
        found = await_training(trials, cell.key, n, snapshots(n), idle)
        if found is None:  # n is trained here, from now (its seconds leave out the wait)
            claim(snapshots(n))
            claimed.add(n)
            last[0] = time.perf_counter()
        return None if found is None else int(found["successes"])

    def record_trial(n: int, outcome: Any) -> None:
        now = time.perf_counter()
        line = {"cell": cell.key, "n": n, "successes": outcome.n_success, **outcome.to_dict(),
                "seconds": round(now - last[0] + outcome.earlier_seconds, 2),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        if outcome.earlier_seconds:  # resumed from a snapshot: the seconds include its earlier runs
            line["seconds_in_earlier_runs"] = round(outcome.earlier_seconds, 2)
        last[0] = now
        append_record(Path(trials), f"{cell.key}|n={n}", line, flat=True)
        snapshots(n).path.unlink(missing_ok=True)
        release(snapshots(n))

    try:
        result = find_capacity(
            cell.config,
            schedule=cell.schedule,
            seeds=cell.seeds,
            criteria=criteria,
            precision=cell.precision,
            data_device=cell.facts_device,
            device=resolve_device(device),
            all_at_once=all_at_once,
            known={n: int(r["successes"]) for n, r in earlier.items()},
            recorded=recorded if trials and not all_at_once else None,
            on_trial=record_trial if trials else None,
            snapshots=snapshots if trials else None,
        )
    finally:  # an interrupted training's claim is freed (its snapshot stays)
        for n in claimed:
            release(snapshots(n))
    if trials:  # the cell's time: its trainings', in earlier runs and by other workers too
        found = trials_of(trials, cell.key)
        result.seconds = sum(float(found[n].get("seconds", 0.0)) for n in result.scores)
    result.info.update(key=cell.key, repeat=cell.repeat)
    return {**result.to_dict(), "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def help_cells(
    cells: Iterable[SearchCell],
    path: str | Path,
    criteria: tuple[str, ...],
    trials: str | Path,
    *,
    device: str = "cpu",
    snapshot_every: float = 300.0,
    speculate: bool = False,
) -> dict[str, dict[str, Any]]:
    """A helper worker: for each cell not finished in `path`, only the searches of `criteria`, in this
    process; key -> those searches. Its trainings go to `trials`, where a worker searching the whole cell
    (`run_sweep` with the same trials file) reads them before each training of its own, so the two share the
    cell's trainings and that worker writes the cell's record. A count one worker is training is claimed
    (`snapshots.claim`), and the other waits for its result (on the same host), or with `speculate` trains
    meanwhile the count its searches would likely ask next (`search_cell`).
    """
    if not criteria or set(criteria) - set(CRITERIA):
        raise MechmemError(f"criteria must be some of {', '.join(CRITERIA)}, got {criteria!r}")
    done = {r["key"] for r in load_records(path)}
    options = {"trials": str(trials), "snapshot_every": snapshot_every, "criteria": tuple(criteria)}
    options["speculate"] = speculate
    return {c.key: search_cell(c, device, **options) for c in cells if c.key not in done}


def run_sweep(
    cells: Iterable[SearchCell],
    path: str | Path,
    *,
    device: str = "cpu",
    executor: str = "local",
    address: str | None = None,
    gpus_per_cell: float = 1.0,
    progress: bool = True,
    reuse: Iterable[str | Path] = (),
    all_at_once: bool = False,
    trials: str | Path | None = None,
    snapshot_every: float = 300.0,
    speculate: bool = False,
) -> dict[str, dict[str, Any]]:
    """Run every cell not yet in `path` (one JSON line each, appended when done); key -> record of all cells.

    `executor`, `address` and `gpus_per_cell` choose where the cells run (`executor.run_cells`);
    `device` is cpu, cuda or auto, resolved by each cell where it runs. Cells finished in a `reuse` file (same
    key: same variant, size, repeat, schedule, precision and fact device) are copied, not rerun.
    `all_at_once` trains each cell's fact counts in one stack (`find_capacity`; the same search). `trials`: a
    JSONL file of finished trainings, so a cell interrupted mid-search resumes (`search_cell`), with the
    trainings in progress saved every `snapshot_every` seconds; `speculate`: while another worker trains the
    count a search needs, train the one it likely asks next (`search_cell`).
    """
    cells = list(cells)
    trials = None if trials is None else str(trials)
    options = {
        "device": device,
        "all_at_once": all_at_once,
        "trials": trials,
        "snapshot_every": snapshot_every,
        "speculate": speculate,
    }
    jobs = [Cell(c.key, search_cell, {"cell": c, **options}) for c in cells]
    label = "capacity cells" if progress else None
    return run_cells(
        jobs,
        Path(path),
        executor=executor,
        address=address,
        device=device,
        progress=label,
        flat=True,
        gpus_per_cell=gpus_per_cell,
        reuse=[Path(p) for p in reuse],
    )


def table_rows(
    records: list[dict[str, Any]], criteria: tuple[str, ...] = ("any", "most", "all")
) -> list[list[str]]:
    """One row per variant (in first-seen order): name, repeats, mean +- sd per criterion, mean seconds."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(f"{r['variant']} (d={r['d']})", []).append(r)
    rows = []
    for name, rs in groups.items():
        rows.append(
            [
                name,
                str(len(rs)),
                *(format_mean_sd([r[c] for r in rs if c in r], ".0f", " +- ") for c in criteria),
                f"{statistics.mean(r['seconds'] for r in rs):.0f}",
            ]
        )
    return rows


def e7_schedule(schedule: Schedule, d: int) -> Schedule:
    """The authors' E7 schedule at width d: the epoch cap per lr phase times d / 16, same patience.

    With the published base (50,000 / 5,000): 50,000, 100,000, 200,000, 400,000 epochs per phase for
    d = 16, 32, 64, 128 (their E7_modal.py), patience 5,000 at every d.
    """
    return replace(schedule, max_epochs=schedule.max_epochs * max(1, d // 16))


def scaling_cells(
    variant: str,
    ds: list[int],
    repeats: int,
    schedule: Schedule,
    facts_device: str = "cpu",
    *,
    grow_epochs: bool = False,
) -> list[SearchCell]:
    """The authors' scaling cells: the variant at each d, precision 8 (d/16)^2.

    With `grow_epochs`, each d runs at `e7_schedule(schedule, d)`; otherwise every d at `schedule`.
    """
    base = SCALING_VARIANTS[variant]
    return [
        SearchCell(
            scaled(base, d),
            r,
            e7_schedule(schedule, d) if grow_epochs else schedule,
            precision=8 * (d // 16) ** 2 or 1,
            facts_device=facts_device,
        )
        for r in range(repeats)
        for d in ds
    ]


def scaling_fits(
    records: list[dict[str, Any]], criteria: tuple[str, ...] = tuple(CRITERIA)
) -> dict[str, ScalingFit]:
    """ "variant criterion" -> fit of the mean capacity over repeats against d (variants with >= 2 sizes)."""
    fits = {}
    for variant in dict.fromkeys(r["variant"] for r in records):
        for crit in criteria:
            by_d: dict[int, list[int]] = {}
            for r in records:
                if r["variant"] == variant:
                    by_d.setdefault(r["d"], []).append(r[crit])
            ds = sorted(by_d)
            if len(ds) >= 2:
                fits[f"{variant} {crit}"] = fit_scaling(ds, [sum(by_d[d]) / len(by_d[d]) for d in ds])
    return fits


def table_cells(
    only: str | None, repeats: int, schedule: Schedule, d: int = 16, facts_device: str = "cpu"
) -> list[SearchCell]:
    """The 54-variant table's cells (variants whose name contains `only`, if given) at width d, n_in = 2d."""
    variants = [v for v in all_variants(2 * d, d, d, d) if only is None or only in v.name]
    if not variants:
        raise MechmemError(f"no variant name contains {only!r}")
    return [SearchCell(v, r, schedule, facts_device=facts_device) for r in range(repeats) for v in variants]
