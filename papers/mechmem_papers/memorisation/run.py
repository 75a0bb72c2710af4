"""The memorisation reproduction's `run`: the variant's sweeps, then the record (`spec` makes the spec).

    python analyses/reproduce.py memorisation                  # "committed": record + page from the data
    python analyses/reproduce.py memorisation --page-only            # the page again from memorisation.json
    python analyses/reproduce.py memorisation --variant quick        # everything at toy sizes, CPU minutes
    python analyses/reproduce.py memorisation --variant table --set max_epochs=150 --set patience=50
    python analyses/reproduce.py memorisation --variant scaling --set ds=16,32
    python analyses/reproduce.py memorisation --variant constructions --set ds=16,32
    python analyses/reproduce.py memorisation --variant paper --set device=cuda    # published schedules (GPU)
    python analyses/reproduce.py memorisation --variant paper --set executor=ray --set address=auto  # Ray

Sweeps append to the data folder's files and skip finished cells, so every variant resumes; the record is then
assembled from the files by `records.collect`, so a page never depends on one process having run everything.
The `paper` variant runs the table at 50,000 epochs per lr phase, patience 5,000, and the scaling at the
authors' E7 schedule per d (`sweep.e7_schedule`: 50,000 x 1, 2, 4, 8 for d = 16, 32, 64, 128, patience 5,000).
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.constructions.reproduce import run_constructions
from mechmem_papers.memorisation.records import collect
from mechmem_papers.memorisation.spec import RUNS, MemorisationSpec
from mechmem_papers.memorisation.sweep import e7_schedule, run_sweep, scaling_cells, table_cells


def run(spec: MemorisationSpec, log: Callable[[str], None]) -> dict[str, Any]:
    """Run the variant's sweeps (resumable), then collect the record from the data folder."""
    data = Path(spec.data)
    where = {"device": spec.device, "executor": spec.executor, "address": spec.address or None}
    schedule = Schedule(max_epochs=spec.max_epochs, patience=spec.patience)
    steps = RUNS[spec.variant]
    if "table" in steps:
        log(f"54-variant table at d={spec.d}, {spec.repeats} repeat(s) -> {data / 'facts_table.jsonl'}")
        cells = table_cells(None, spec.repeats, schedule, spec.d, spec.facts_device)
        run_sweep(cells, data / "facts_table.jsonl", **where)
    if "scaling" in steps:
        log(f"scaling at d = {spec.ds} -> {data / 'facts_scaling.jsonl'}")
        # the authors' two scaled models: "nb" (their simple model, no bias) and "full"
        cells = [
            c
            for v in ("nb", "full")
            for c in scaling_cells(
                v, list(spec.ds), spec.repeats, schedule, spec.facts_device, grow_epochs=spec.grow_epochs
            )
        ]
        run_sweep(cells, data / "facts_scaling.jsonl", reuse=[data / "facts_table.jsonl"], **where)
    if "constructions" in steps:
        command = f"python analyses/reproduce.py memorisation --variant {spec.variant}"
        run_constructions(
            data,
            quick=spec.tag == "quick",
            ds=spec.ds,
            modes=spec.modes,
            precision=16 if spec.tag == "quick" else 8,
            reuse=True,
            command=command,
            log=log,
            executor=spec.executor,
            address=spec.address or None,
        )
    per_d = {d: e7_schedule(schedule, d).to_dict() for d in spec.ds} if spec.grow_epochs else None
    return collect(
        data, schedule=schedule.to_dict(), tag=spec.tag, variant=spec.variant, scaling_schedules=per_d
    )
