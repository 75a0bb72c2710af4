"""The memorisation run record: everything the page shows, assembled from the sweep and constructions files.

`collect` reads a data folder (docs/reproductions/data for the committed runs) without training anything:

    facts_table.jsonl              one line per (variant, repeat, schedule) search of the 54-variant table
    facts_anchor_2emb_nomlp.json   the anchor variant under a 20x longer schedule (optional)
    facts_scaling.jsonl            the d-scaling searches
    facts_trials.jsonl             each finished training of a search in progress (optional): a scaling cell
                                   at a shown schedule that is still searching enters `scaling_running` with
                                   the criteria whose searches have ended
    facts_benchmark.json           batched vs per-init training time (optional)
    constructions_capacity_TAG.json, constructions_misc_TAG.json    the constructions (TAG = full | quick)

The published values, each with its source and the exact sentence, table row or code line it is read from, are
the package file `published.json` beside this module (`PUBLISHED`), not a file of the data folder.

Sweep records of the requested (base) schedule enter the record whole (`table`, `scaling`: the comparisons and
fits use only these, so every variant is compared under one schedule; the scaling may give each d its own
schedule, as the authors' E7 did); records of every other schedule enter in brief (`other_schedules`,
`scaling_other`): the page shows each variant's longest schedule beside its base one, and the capacity against
the epoch cap. Records written before the fact generator had a device option drew the permutation on the CPU
and are marked so (`facts_device`).
"""

import json
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError
from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.sweep import in_progress, load_records, scaling_cells, scaling_fits

PUBLISHED = Path(__file__).with_name("published.json")
"""The published-values file, read relative to this package."""
PUBLISHED_NAME = "papers/mechmem_papers/memorisation/published.json"
"""How the page names it."""


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def _brief(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("variant", "d", "config", "repeat", "schedule", "any", "most", "all", "seconds")
    return {**{k: record[k] for k in keep if k in record}, "facts_device": record.get("facts_device", "cpu")}


def _running(
    data_dir: Path, scaling_all: list[dict[str, Any]], per_d: dict[int, dict[str, Any]], e7: dict[str, Any]
) -> list[dict[str, Any]]:
    """The authors' two scaled models still searching at the authors' E7 schedule (or the requested one) of
    a d the scaling ran (`sweep.in_progress`: the criteria whose searches have ended on the finished
    trainings)."""
    schedules = {}
    for d in sorted({r["d"] for r in scaling_all}):
        if str(d) in e7["max_epochs"]:
            schedules.setdefault(d, []).append(
                Schedule(max_epochs=e7["max_epochs"][str(d)], patience=e7["patience"])
            )
        if d in per_d:
            schedules.setdefault(d, []).append(Schedule.from_dict(per_d[d]))
    cells = [
        c
        for d, scheds in schedules.items()
        for sched in dict.fromkeys(scheds)
        for v in ("nb", "full")
        for c in scaling_cells(v, [d], 1, sched)
    ]
    return in_progress(data_dir / "facts_trials.jsonl", cells, {r["key"] for r in scaling_all})


def collect(
    data_dir: str | Path,
    *,
    schedule: dict[str, Any],
    tag: str = "full",
    published: str | Path | None = None,
    variant: str = "committed",
    scaling_schedules: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The run record from the files in `data_dir` (see the module docstring); JSON-able.

    Args:
        data_dir: folder of the sweep and constructions files.
        schedule: `Schedule.to_dict()` of the sweep records to show.
        tag: which constructions files ("full" or "quick").
        published: the published-values file (default: the package's `PUBLISHED`).
        variant: the variant that produced the data (shown on the page).
        scaling_schedules: d -> the schedule of the scaling records to show at that d (default: `schedule`
            at every d).
    """
    data_dir = Path(data_dir)
    published_path = Path(published) if published else PUBLISHED
    if not published_path.exists():
        raise MechmemError(f"no published values at {published_path}")
    table_all = load_records(data_dir / "facts_table.jsonl")
    table = [r for r in table_all if r["schedule"] == schedule]
    scaling_all = load_records(data_dir / "facts_scaling.jsonl")
    per_d = scaling_schedules or {}
    scaling = [r for r in scaling_all if r["schedule"] == per_d.get(r["d"], schedule)]
    scaling_keys = {r["key"] for r in scaling}
    published_values = json.loads(published_path.read_text(encoding="utf-8"))
    running = _running(data_dir, scaling_all, per_d, published_values["scaling_schedule"]["value"])
    cap_name, misc_name = f"constructions_capacity_{tag}.json", f"constructions_misc_{tag}.json"
    capacities, misc = _read(data_dir / cap_name), _read(data_dir / misc_name)
    if not table or capacities is None or misc is None:
        raise MechmemError(
            f"{data_dir} lacks facts_table.jsonl records of schedule {schedule} or {cap_name} / {misc_name}"
        )
    sources = ["facts_table.jsonl", "facts_scaling.jsonl", cap_name, misc_name]
    int8_name = f"constructions_int8_{tag}.json"
    int8 = _read(data_dir / int8_name)
    sources += [int8_name] if int8 else []
    sources += ["facts_trials.jsonl"] if running else []
    anchor, bench = _read(data_dir / "facts_anchor_2emb_nomlp.json"), _read(data_dir / "facts_benchmark.json")
    sources += [
        n for n, x in (("facts_anchor_2emb_nomlp.json", anchor), ("facts_benchmark.json", bench)) if x
    ]
    return {
        "variant": variant,
        "schedule": schedule,
        "table": table,
        "other_schedules": [_brief(r) for r in table_all if r["schedule"] != schedule],
        "anchor": anchor,
        "scaling": scaling,
        "scaling_other": [_brief(r) for r in scaling_all if r["key"] not in scaling_keys],
        "scaling_running": running,
        "facts_devices": sorted({r.get("facts_device", "cpu") for r in table_all + scaling_all}),
        "scaling_fits": {k: f.to_dict() for k, f in scaling_fits(scaling).items()},
        "benchmark": bench,
        "constructions": {**capacities, **misc, "tag": tag, **({"int8": int8} if int8 else {})},
        "published": published_values,
        "sources": sources,
    }
