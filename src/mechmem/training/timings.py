"""How long each training preset took when it was measured (`benchmarks/preset_times.py`).

`preset_times.json` (beside this module) records, per "task/preset", the steps, the seconds, how they were
obtained and the machine's load; `mechmem train --list` shows them.
"""

import json
from pathlib import Path
from typing import Any

TIMES_FILE = Path(__file__).with_name("preset_times.json")
"""The committed measurements."""


def recorded_times(path: str | Path | None = None) -> dict[str, Any]:
    """The measurement file (default `TIMES_FILE`) as a dict ({"presets": {}} when there is none)."""
    path = Path(path or TIMES_FILE)
    if not path.exists():
        return {"presets": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def describe_time(times: dict[str, Any], task: str, preset: str, steps: int) -> str:
    """The recorded time of a preset in words ("5m17s (full run, load 4.1)"), scaled to `steps`."""
    from mechmem.progress import format_seconds

    rec = times.get("presets", {}).get(f"{task}/{preset}")
    if rec is None:
        return "not measured"
    seconds = rec["seconds"] / rec["steps"] * steps if rec["steps"] else rec["seconds"]
    how = "full run" if rec["how"] == "full run" else f"from {rec['measured_steps']} steps"
    return f"{format_seconds(seconds)} ({how}, load {rec['load_1min']:.1f})"


TIMED_STEPS = 20
"""Training steps timed per preset by `--list TASK` (the time here and now)."""


def time_here(task: str, preset: str, steps: int, device: str = "cpu") -> float:
    """The preset's training time here and now: the trainer's own clock (model building excluded) over
    `TIMED_STEPS` steps with one tiny evaluation, scaled to `steps`."""
    from mechmem.training.run import train_preset

    run = train_preset(task, preset, steps=TIMED_STEPS, device=device, progress=False, eval_samples=8)
    return run.summary["wall_time_s"] / TIMED_STEPS * steps


def preset_rows(task: str | None = None, *, device: str = "cpu") -> tuple[list[tuple], list[str], str]:
    """`mechmem train --list [TASK]`: (rows, headers, a note); with `task`, also its time here."""
    from mechmem.progress import format_seconds, working
    from mechmem.tasks import get_task_class, task_names

    times, rows = recorded_times(), []
    for name in [task] if task else task_names():
        for preset, spec in sorted(get_task_class(name).presets.items()):
            steps = spec.train.steps
            row = [name, preset, steps, describe_time(times, name, preset, steps)]
            if task:
                with working(f"timing {TIMED_STEPS} steps of {name} {preset}"):
                    row.append(format_seconds(time_here(name, preset, steps, device)))
            rows.append((*row, spec.description))
    machine = times.get("machine", {})
    note = (
        f"measured: {times.get('command', 'no measurements')} on {times.get('date', '?')}, "
        f"{machine.get('cpus', '?')} CPUs, {machine.get('torch_threads', '?')} torch threads"
    )
    if task:
        note += f"\ntime here: {TIMED_STEPS} steps on the trainer's clock now, scaled to the preset's steps"
    headers = ["task", "preset", "steps", "measured", *(["time here"] if task else []), "description"]
    return rows, headers, note
