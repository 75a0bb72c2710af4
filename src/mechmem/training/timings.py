"""The training presets without torch, and how long each took when it was measured.

`preset_times.json` (beside this module) records, per "task/preset", the steps, the seconds, how they were
obtained and the machine's load (`benchmarks/preset_times.py`); `mechmem train --list` shows them.
`presets.json` is the index of every registered task's presets (steps, description), so that `mechmem train
--list` and an unknown task or preset are answered without importing torch; it is written from the registry
by `python -m mechmem.training.timings`, and a test checks that it is the registry's.
"""

import json
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError

TIMES_FILE = Path(__file__).with_name("preset_times.json")
"""The committed measurements."""
INDEX_FILE = Path(__file__).with_name("presets.json")
"""The committed index of the registered tasks' presets."""
ENTRY_POINT_GROUPS = ("mechmem.tasks", "mechmem.papers")
"""The plugin groups whose modules may register tasks (`mechmem.tasks.registry`, `mechmem.plugins`)."""


def registered_presets() -> dict[str, dict[str, dict[str, Any]]]:
    """Every registered task (plugins loaded) -> its presets -> {"steps", "description"} (imports torch)."""
    from mechmem.tasks import get_task_class, task_names

    return {
        name: {
            preset: {"steps": spec.train.steps, "description": spec.description}
            for preset, spec in sorted(get_task_class(name).presets.items())
        }
        for name in task_names()
    }


def installed_plugins() -> dict[str, list[str]]:
    """The names of the installed entry points of `ENTRY_POINT_GROUPS` (read without importing them)."""
    return {group: sorted({ep.name for ep in entry_points(group=group)}) for group in ENTRY_POINT_GROUPS}


def preset_index() -> dict[str, Any]:
    """What `INDEX_FILE` should hold: the registry's presets and the plugins installed when it was read."""
    return {"plugins": installed_plugins(), "tasks": registered_presets()}


def indexed_presets() -> dict[str, dict[str, dict[str, Any]]] | None:
    """The tasks' presets from `INDEX_FILE`, without importing torch; None when the index may be incomplete
    here (a plugin installed that it has not seen, or no index)."""
    if not INDEX_FILE.exists():
        return None
    index = json.loads(INDEX_FILE.read_text())
    seen = index.get("plugins", {})
    if any(set(names) - set(seen.get(group, [])) for group, names in installed_plugins().items()):
        return None
    return index["tasks"]


def check_preset_name(task: str, preset: str) -> None:
    """Refuse an unknown task or preset from the index, without importing torch (the same words as
    `mechmem.tasks.registry`); nothing is decided where the index may be incomplete."""
    tasks = indexed_presets()
    if tasks is None:
        return
    if task not in tasks:
        known = ", ".join(sorted(tasks))
        raise MechmemError(f"unknown task {task!r} (known: {known}; load your own with --task-module FILE)")
    if preset not in tasks[task]:
        raise MechmemError(
            f"task {task!r} has no preset {preset!r} (known: {', '.join(sorted(tasks[task]))})"
        )


def recorded_times(path: str | Path | None = None) -> dict[str, Any]:
    """The measurement file (default `TIMES_FILE`) as a dict ({"presets": {}} when there is none)."""
    path = Path(path or TIMES_FILE)
    if not path.exists():
        return {"presets": {}}
    return json.loads(path.read_text(encoding="utf-8"))


def describe_time(times: dict[str, Any], task: str, preset: str, steps: int) -> str:
    """The recorded time of a preset in words, scaled to `steps`, with the rate and the machine's load it was
    measured at ("5m17s (full run: 15.9 ms/step at load 4.1)")."""
    from mechmem.progress import format_seconds

    rec = times.get("presets", {}).get(f"{task}/{preset}")
    if rec is None:
        return "not measured"
    seconds = rec["seconds"] / rec["steps"] * steps if rec["steps"] else rec["seconds"]
    how = "full run" if rec["how"] == "full run" else f"from {rec['measured_steps']} steps"
    rate = 1000 * rec["seconds"] / rec["steps"] if rec["steps"] else float("nan")
    return f"{format_seconds(seconds)} ({how}: {rate:.1f} ms/step at load {rec['load_1min']:.1f})"


TIMED_STEPS = 20
"""Training steps timed per preset by `--list TASK` (the time here and now)."""


def time_here(task: str, preset: str, steps: int, device: str = "cpu") -> float:
    """The preset's training time here and now: the trainer's own clock (model building excluded) over
    `TIMED_STEPS` steps with one tiny evaluation, scaled to `steps`."""
    from mechmem.training.run import train_preset

    run = train_preset(task, preset, steps=TIMED_STEPS, device=device, progress=False, eval_samples=8)
    return run.summary["wall_time_s"] / TIMED_STEPS * steps


def preset_rows(task: str | None = None, *, device: str = "cpu") -> tuple[list[tuple], list[str], str]:
    """`mechmem train --list [TASK]`: (rows, headers, a note); with `task`, also its time here. Without
    `task`, read from the index where it is complete (no torch)."""
    from mechmem.progress import format_seconds, working

    tasks = None if task else indexed_presets()
    if tasks is None:
        tasks = registered_presets()
        if task:
            from mechmem.tasks import get_task_class

            get_task_class(task)  # an unknown task: its one-line error
            tasks = {task: tasks[task]}
    times, rows = recorded_times(), []
    for name, presets in tasks.items():
        for preset, spec in presets.items():
            steps = spec["steps"]
            row = [name, preset, steps, describe_time(times, name, preset, steps)]
            if task:
                with working(f"timing {TIMED_STEPS} steps of {name} {preset}"):
                    row.append(format_seconds(time_here(name, preset, steps, device)))
            rows.append((*row, spec["description"]))
    machine = times.get("machine", {})
    note = (
        f"measured: {times.get('command', 'no measurements')} on {times.get('date', '?')}, "
        f"{machine.get('cpus', '?')} CPUs, {machine.get('torch_threads', '?')} torch threads; a time scales "
        "with the load (the 1-minute load average beside it)"
    )
    if task:
        note += f"\ntime here: {TIMED_STEPS} steps on the trainer's clock now, scaled to the preset's steps"
    headers = ["task", "preset", "steps", "measured", *(["time here"] if task else []), "description"]
    return rows, headers, note


if __name__ == "__main__":  # python -m mechmem.training.timings: write the index from the registry
    INDEX_FILE.write_text(json.dumps(preset_index(), indent=1) + "\n")
    print(f"wrote {INDEX_FILE}")
