"""The demo: train one small model per task on CPU, report on each, and link the reports from an index page.

Trainings and reports run as separate `analyses/*.py` subprocesses, `jobs` at a time, each limited to one CPU
thread (OMP_NUM_THREADS=1), so two of them share a 2-core machine without oversubscribing it. A model whose
checkpoint already exists is not retrained unless asked.
"""

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mechmem.progress import watch_logs
from mechmem.report.document import write_index

ROOT = Path(__file__).resolve().parents[3]
"""The repository root (where `analyses/` lives)."""


@dataclass(frozen=True)
class DemoModel:
    """One demo model: a name, and the task preset it is trained from."""

    name: str
    """Run and report directory name."""
    task: str
    """Task registry name."""
    preset: str
    """Preset of that task."""
    minutes: float = 1.0
    """Rough single-thread training time; the longest trainings start first so the parallel jobs finish together."""


DEMO_MODELS = (
    DemoModel("permutation-task1", "permutation", "task1-quick", 1.5),
    DemoModel("permutation-task2", "permutation", "task2-quick", 2.0),
    DemoModel("birth", "birth", "quick", 3.0),
    DemoModel("facts", "facts", "quick", 0.5),
)


def available(models: tuple[DemoModel, ...] = DEMO_MODELS) -> list[DemoModel]:
    """The demo models whose task and preset exist in this installation."""
    from mechmem.errors import MechmemError
    from mechmem.tasks import get_task_class

    out = []
    for m in models:
        try:
            if m.preset in get_task_class(m.task).presets:
                out.append(m)
        except MechmemError:
            pass
    return out


def run_logged(cmd: list[str], log: Path) -> tuple[int, float]:
    """Run `cmd` from the repository root with one CPU thread; stdout and stderr go to `log`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        rc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, check=False
        ).returncode
    return rc, time.perf_counter() - t0


def parallel(
    tasks: list[tuple[list[str], Path]], jobs: int, names: list[str] | None = None, every_s: float = 15.0
) -> list[tuple[int, float]]:
    """Run (command, log) pairs, `jobs` at a time; returns (exit status, seconds) per command, in order.

    With `names`, says when each job ends and, every `every_s` seconds, prints each running job's latest progress
    line from its log (`mechmem.progress.watch_logs`), so a long demo is never silent.
    """

    def one(i: int) -> tuple[int, float]:
        rc, secs = run_logged(*tasks[i])
        if names is not None:
            status = "done" if rc == 0 else f"failed (exit {rc}, see {tasks[i][1]})"
            print(f"[{names[i]}] {status} in {secs:.0f} s", flush=True)
        return rc, secs

    stop = threading.Event()
    logs = dict(zip(names or [], (log for _, log in tasks)))
    watcher = threading.Thread(target=watch_logs, args=(logs, stop), kwargs={"every_s": every_s}, daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(one, range(len(tasks))))
    finally:
        stop.set()
        watcher.join()


def run_demo(
    runs: Path,
    reports: Path,
    *,
    models: list[DemoModel],
    jobs: int = 2,
    retrain: bool = False,
    steps: int | None = None,
    n_samples: int = 512,
) -> list[dict[str, object]]:
    """Train (unless a checkpoint exists), report, and write `reports/index.html`; returns one row per model.

    Long because it runs the two stages (trainings two at a time, then reports) with their progress relay and
    failure handling in one place, so the order of events is visible at a glance.
    """
    py = sys.executable
    rows: dict[str, dict[str, object]] = {
        m.name: {"model": m.name, "preset": f"{m.task}/{m.preset}"} for m in models
    }
    todo = sorted(
        (m for m in models if retrain or not (runs / m.name / "ckpt.pt").exists()), key=lambda m: -m.minutes
    )
    train_cmds = []
    for m in todo:
        cmd = [
            py,
            "analyses/train.py",
            m.task,
            "--preset",
            m.preset,
            "--out",
            str(runs / m.name),
        ]
        train_cmds.append(
            (cmd + (["--steps", str(steps)] if steps is not None else []), runs / m.name / "train.log")
        )
    if todo:
        print(
            f"training {', '.join(m.name for m in todo)} ({jobs} at a time; progress every 15 s)", flush=True
        )
    for m, (rc, secs) in zip(todo, parallel(train_cmds, jobs, [f"train {m.name}" for m in todo])):
        rows[m.name].update(train_s=round(secs, 1), train_rc=rc)
    for m in models:
        rows[m.name].setdefault("train_s", "cached")
    trained = [
        m for m in models if (runs / m.name / "ckpt.pt").exists() and rows[m.name].get("train_rc", 0) == 0
    ]
    report_cmds = [
        (
            [
                py,
                "analyses/report.py",
                str(runs / m.name / "ckpt.pt"),
                "--out",
                str(reports / m.name),
                "--n-samples",
                str(n_samples),
                "--title",
                f"{m.name} ({m.task}/{m.preset})",
            ],
            reports / m.name / "report.log",
        )
        for m in trained
    ]
    print(f"reporting on {', '.join(m.name for m in trained)}", flush=True)
    for m, (rc, secs) in zip(trained, parallel(report_cmds, jobs, [f"report {m.name}" for m in trained])):
        rows[m.name].update(report_s=round(secs, 1), report_rc=rc)
    entries = []
    for m in models:
        path = reports / m.name / "report.json"
        if rows[m.name].get("report_rc") == 0 and path.exists():
            data = json.loads(path.read_text())
            circuit = data["sections"]["circuit"]["findings"]["summary"]
            rows[m.name].update(headline=data["headline"], circuit=circuit)
            entries.append(
                {
                    "name": m.name,
                    "href": f"{m.name}/report.html",
                    "headline": data["headline"],
                    "roles": circuit,
                }
            )
        else:
            rows[m.name].update(headline="failed: see the log", circuit="")
            entries.append(
                {"name": m.name, "href": f"{m.name}/report.log", "headline": "failed (log)", "roles": ""}
            )
    write_index(entries, reports / "index.html")
    return list(rows.values())
