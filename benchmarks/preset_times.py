"""Measure how long every training preset takes on this machine; `analyses/train.py --list` shows the result.

    python benchmarks/preset_times.py                      # every preset (about 30 minutes on 2 busy cores)
    python benchmarks/preset_times.py --tasks facts --full-s 60 --out /tmp/times.json

Each preset is first timed over a few steps on the trainer's own clock (model building excluded). A preset
whose whole run that probe puts under --full-s seconds is then trained in full and its time recorded as
measured; a longer one is timed over a longer probe (about --probe-s seconds of steps) and its time
extrapolated as probe seconds x steps / probe steps (the probe pays one evaluation at its start and one at
its end; the full run one every eval_every steps, so an extrapolation leaves out the evaluations between).
The file records the command, the machine (CPUs, torch threads, load averages before and after) and the
date, so a reader can judge the numbers; rerun it on the machine you care about.
"""

import argparse
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone

from mechmem.cli import print_table, run_script
from mechmem.progress import format_seconds
from mechmem.training.timings import TIMES_FILE, recorded_times

FIRST_PROBE = 10
"""Steps of the first probe of every preset."""


def timed(task: str, preset: str, steps: int) -> float:
    """Seconds of `steps` training steps of the preset (the trainer's clock, evaluations included)."""
    from mechmem.training.run import train_preset

    run = train_preset(task, preset, steps=steps, progress=False)
    return float(run.summary["wall_time_s"])


def measure(task: str, preset: str, steps: int, *, full_s: float, probe_s: float) -> dict:
    """The record of one preset: full run when the first probe puts it under `full_s`, else a probe."""
    first = min(FIRST_PROBE, steps)
    seconds = timed(task, preset, first)
    estimate = seconds / max(first, 1) * steps
    if estimate <= full_s:
        took = timed(task, preset, steps)
        return {"steps": steps, "seconds": round(took, 1), "how": "full run", "measured_steps": steps}
    probe = max(first, min(steps, round(probe_s / max(seconds, 1e-9) * first)))
    if probe > first:
        seconds = timed(task, preset, probe)
    return {
        "steps": steps,
        "seconds": round(seconds / probe * steps, 1),
        "how": f"extrapolated from {probe} steps in {seconds:.1f} s",
        "measured_steps": probe,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=None, help="tasks to time (default: every task)")
    parser.add_argument("--full-s", type=float, default=240.0, help="train in full below this (seconds)")
    parser.add_argument("--probe-s", type=float, default=30.0, help="length of a long preset's probe")
    parser.add_argument("--out", default=str(TIMES_FILE), help="JSON file (default: the shipped one)")
    parser.add_argument("--update", action="store_true", help="keep the file's other presets' records")
    args = parser.parse_args(argv)
    import torch

    from mechmem.cli import write_json
    from mechmem.tasks import get_task_class, task_names

    load_before = os.getloadavg()
    old = recorded_times(args.out) if args.update else {"presets": {}}
    records = dict(old["presets"])
    for task in args.tasks or task_names():
        for preset, spec in sorted(get_task_class(task).presets.items()):
            t0 = time.perf_counter()
            records[f"{task}/{preset}"] = rec = measure(
                task, preset, spec.train.steps, full_s=args.full_s, probe_s=args.probe_s
            )
            rec["load_1min"] = round(os.getloadavg()[0], 2)
            rec["date"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            print(f"{task} {preset}: {rec['how']}, {format_seconds(rec['seconds'])}", flush=True)
            print(f"  (took {time.perf_counter() - t0:.0f} s to measure)", flush=True)
    command = "python benchmarks/preset_times.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    data = {
        "command": "; ".join([*old.get("commands", []), command]) if args.update else command,
        "commands": [*old.get("commands", []), command] if args.update else [command],
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "processor": platform.processor() or platform.machine(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "presets": records,
    }
    write_json(args.out, data)
    rows = [(k, v["steps"], format_seconds(v["seconds"]), v["how"]) for k, v in sorted(records.items())]
    print_table(rows, ["preset", "steps", "time", "how"])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
