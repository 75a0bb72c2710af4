"""Measure how long every training preset takes on this machine; `analyses/train.py --list` shows the result.

    python benchmarks/preset_times.py                      # every preset (about 30 minutes on 2 busy cores)
    python benchmarks/preset_times.py --tasks facts --full-s 60 --out /tmp/times.json
    python benchmarks/preset_times.py --tasks birth --presets birth/demo --update   # one new preset

Each preset is timed over two short probes on the trainer's own clock (model building excluded; no checkpoints
written): FIRST_PROBE steps, then more (first about --probe-s seconds' worth at the first probe's rate, then 4
times as many each time) until the longer probe takes --probe-s seconds more than the first (or covers the
preset). The two times give the seconds per step and per evaluation (a probe evaluates at its start and end,
the full run also every eval_every steps), hence an estimate of the whole run. A preset estimated under
--full-s seconds is then trained in full and its measured time recorded; a longer one records the estimate and
how it was made.
The file records the command, the machine (CPUs, torch threads, load averages before and after) and the
date, so a reader can judge the numbers; rerun it on the machine you care about.
"""

import argparse
import math
import os
import platform
import shlex
import sys
import time
from datetime import datetime, timezone

from mechmem.cli import print_table, run_script
from mechmem.progress import format_seconds
from mechmem.training.timings import TIMES_FILE, recorded_times

FIRST_PROBE = 5
"""Steps of the first probe of every preset."""


def timed(task: str, preset: str, steps: int) -> float:
    """Seconds of `steps` training steps of the preset (the trainer's clock, evaluations included)."""
    from mechmem.training.run import train_preset

    run = train_preset(task, preset, steps=steps, progress=False)
    return float(run.summary["wall_time_s"])


def evaluations(steps: int, eval_every: int) -> int:
    """How many evaluations a run of `steps` steps makes: one every `eval_every` steps from step 0, and one at
    the end."""
    return -(-steps // eval_every) + 1


def measure(task: str, preset: str, steps: int, eval_every: int, *, full_s: float, probe_s: float) -> dict:
    """The record of one preset: a full run when two probes put it under `full_s`, else their extrapolation.

    The probes (n1 and n2 steps) give two equations t = a n + b E(n) for the seconds per step `a` and per
    evaluation `b` (E: `evaluations`); the full run's estimate is a steps + b E(steps).
    """
    n1 = n2 = min(FIRST_PROBE, steps)
    t1 = t2 = timed(task, preset, n1)
    while t2 - t1 < probe_s and n2 < steps:  # grow the second probe until its steps outweigh the noise
        grow = 4 * n2 if n2 > n1 else max(2 * n1, n1 + math.ceil(probe_s / (t1 / n1)))
        n2 = min(steps, grow)
        t2 = timed(task, preset, n2)
    if n2 == steps:  # the probe was the whole run
        return {"steps": steps, "seconds": round(t2, 1), "how": "full run", "measured_steps": steps}
    e1, e2 = evaluations(n1, eval_every), evaluations(n2, eval_every)
    det = n1 * e2 - n2 * e1
    if n2 == n1 or det == 0:
        a, b = t1 / n1, 0.0
    else:
        a, b = (t1 * e2 - t2 * e1) / det, (n1 * t2 - n2 * t1) / det
        if a <= 0 or b < 0:  # noise of a loaded machine: fall back to the plain rate of the longer probe
            a, b = t2 / n2, 0.0
    estimate = a * steps + b * evaluations(steps, eval_every)
    if estimate <= full_s:
        took = timed(task, preset, steps)
        return {"steps": steps, "seconds": round(took, 1), "how": "full run", "measured_steps": steps}
    how = (
        f"extrapolated from probes of {n1} and {n2} steps ({t1:.1f} s, {t2:.1f} s): {a:.4f} s per step, "
        f"{b:.2f} s per evaluation, {evaluations(steps, eval_every)} evaluations"
    )
    return {"steps": steps, "seconds": round(estimate, 1), "how": how, "measured_steps": n2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=None, help="tasks to time (default: every task)")
    parser.add_argument(
        "--presets",
        nargs="*",
        default=None,
        help="only these TASK/PRESET names (e.g. birth/demo; use with --update)",
    )
    parser.add_argument("--full-s", type=float, default=90.0, help="train in full below this (seconds)")
    parser.add_argument("--probe-s", type=float, default=15.0, help="about how long the second probe runs")
    parser.add_argument("--out", default=str(TIMES_FILE), help="JSON file (default: the shipped one)")
    parser.add_argument("--update", action="store_true", help="keep the file's other presets' records")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: tiny models, as `make demo` runs)",
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)  # more threads than free cores make tiny steps wait on each other
    from mechmem.cli import write_json
    from mechmem.tasks import get_task_class, task_names

    load_before = os.getloadavg()
    old = recorded_times(args.out) if args.update else {"presets": {}}
    records = dict(old["presets"])
    for task in args.tasks or task_names():
        for preset, spec in sorted(get_task_class(task).presets.items()):
            if args.presets is not None and f"{task}/{preset}" not in args.presets:
                continue
            t0 = time.perf_counter()
            train = spec.train
            records[f"{task}/{preset}"] = rec = measure(
                task, preset, train.steps, train.eval_every, full_s=args.full_s, probe_s=args.probe_s
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
