"""The memorisation paper as a plugin: variants, spec and run (`mechmem.plugins.Paper`).

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
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from mechmem.config import apply_options
from mechmem.errors import MechmemError
from mechmem.executor import check_executor
from mechmem.papers.memorisation.batched import Schedule
from mechmem.papers.memorisation.constructions.evaluators import EVALUATORS
from mechmem.papers.memorisation.constructions.reproduce import run_constructions
from mechmem.papers.memorisation.records import collect
from mechmem.papers.memorisation.sweep import e7_schedule, run_sweep, scaling_cells, table_cells

VARIANTS = ("committed", "quick", "table", "scaling", "constructions", "paper")
RUNS = {
    "committed": (),
    "quick": ("table", "scaling", "constructions"),
    "table": ("table",),
    "scaling": ("scaling",),
    "constructions": ("constructions",),
    "paper": ("table", "scaling"),
}


@dataclass(frozen=True)
class MemorisationSpec:
    """What one reproduction run does; options from `--set key=value` override these fields."""

    variant: str = "committed"
    """One of VARIANTS: which experiments run before the record is collected."""
    data: str = "docs/reproductions/data"
    """Folder of the sweep and constructions files (read and appended to)."""
    max_epochs: int = 150
    """Sweep schedule: epochs per lr phase (published 50,000)."""
    patience: int = 50
    """Sweep schedule: epochs without improvement (published 5,000)."""
    grow_epochs: bool = False
    """Scaling: multiply the epoch cap by d / 16 at each d (the authors' E7: 50,000 x 1, 2, 4, 8)."""
    repeats: int = 1
    """Sweep repeats (fresh init seeds each; published 4)."""
    d: int = 16
    """Width of the 54-variant table (n_in = 2d)."""
    ds: tuple[int, ...] = (16, 32)
    """Scaling widths, and the constructions' widths."""
    modes: tuple[str, ...] = tuple(EVALUATORS)
    """Constructions modes to (re)compute."""
    tag: str = "full"
    """Constructions files: full or quick (small grids)."""
    device: str = "cpu"
    """Torch device for the sweeps (cpu, cuda, auto), resolved where each cell runs."""
    facts_device: str = "cpu"
    """Device of the facts' permutation (the published runs drew it on cuda: another fact set)."""
    executor: str = "local"
    """Where sweep cells run: local (this process) or ray (`mechmem.executor`)."""
    address: str = ""
    """Ray cluster to join (auto or host:port); empty: a local Ray instance."""


def spec(variant: str, options: dict[str, str]) -> MemorisationSpec:
    """The spec of a variant, with options applied (unknown variant or option: `MechmemError`)."""
    if variant not in VARIANTS:
        raise MechmemError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    base = MemorisationSpec(variant=variant)
    if variant == "quick":
        base = replace(
            base, data="runs/memorisation_quick", max_epochs=60, patience=20, d=4, ds=(8, 16), tag="quick"
        )
    elif variant == "paper":
        base = replace(
            base,
            max_epochs=50_000,
            patience=5_000,
            grow_epochs=True,
            repeats=4,
            ds=(16, 32, 64, 128),
            device="auto",
        )
    names = [f.name for f in fields(base) if f.name != "variant"]
    out = apply_options(base, options, names)
    unknown_modes = [m for m in out.modes if m not in EVALUATORS]
    if unknown_modes:
        raise MechmemError(f"unknown mode {unknown_modes[0]!r} (known: {', '.join(EVALUATORS)})")
    check_executor(out.executor, out.address or None)
    return out


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
