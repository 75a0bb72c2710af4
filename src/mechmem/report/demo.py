"""The demo: train one small model per task on CPU, report on each, and link the reports from an index page.

Each model is one job: train it (unless its checkpoint exists), then write its report, by calling
`analyses/train.py` and `analyses/report.py` in-process with their output going to the model's log files. Jobs run
`jobs` at a time in forked worker processes, each on one CPU thread, so two of them share a 2-core machine without
oversubscribing it. The parent imports TransformerLens and the papers once before forking, so no job pays that
import again (several seconds each), and a model's report starts as soon as its own training ends. Without
`os.fork` (or with `jobs=1`) the jobs run one after another in this process.
"""

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mechmem.cli import run_script
from mechmem.progress import LogRelay
from mechmem.report.document import write_index
from mechmem.training.run import preset_identity
from mechmem.training.rundir import finished_run

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
    """Rough single-thread training time; the longest jobs start first so the parallel jobs finish together."""
    save_every: int | None = None
    """Keep a step checkpoint every this many steps (the report's training-dynamics section reads them)."""


DEMO_MODELS = (
    DemoModel("permutation-task1", "permutation", "task1-quick", 1.5),
    DemoModel("permutation-task2", "permutation", "task2-quick", 2.0, save_every=1000),
    DemoModel("birth", "birth", "quick", 3.0, save_every=50),
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


_SCRIPTS: dict[str, ModuleType] = {}


def script(name: str) -> ModuleType:
    """The module of `analyses/<name>.py` (loaded once)."""
    if name not in _SCRIPTS:
        spec = importlib.util.spec_from_file_location(
            f"mechmem_script_{name}", ROOT / "analyses" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SCRIPTS[name] = module
    return _SCRIPTS[name]


def run_in_log(name: str, argv: list[str], log: Path) -> tuple[int, float]:
    """Run `analyses/<name>.py`'s main(argv) in this process with stdout and stderr (file descriptors 1 and 2)
    sent to `log`; returns (exit status, seconds). An unexpected exception is logged with its traceback, status 1."""
    log.parent.mkdir(parents=True, exist_ok=True)
    main = script(name).main
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            rc = run_script(main, argv)
        except Exception:  # noqa: BLE001 - a failed job is logged with its traceback; the demo goes on
            traceback.print_exc()
            rc = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return rc, time.perf_counter() - t0


def demo_job(
    m: DemoModel, runs: Path, reports: Path, *, retrain: bool, steps: int | None, n_samples: int
) -> dict[str, Any]:
    """Train `m` (unless its run directory holds this very run, finished, and not `retrain`; see
    `rundir.finished_run`), then report on it; returns its summary row."""
    row: dict[str, Any] = {"model": m.name, "preset": f"{m.task}/{m.preset}", "train_s": "cached"}
    run = runs / m.name
    every = (m.save_every if steps is None else max(1, steps // 10)) if m.save_every else None
    identity = preset_identity(m.task, m.preset, steps=steps, save_every=every)
    if retrain or not finished_run(run, identity):  # a finished run of other settings is trained again
        argv = [m.task, "--preset", m.preset, "--out", str(run), "--threads", "1", "--overwrite"]
        argv += ["--steps", str(steps)] if steps is not None else []
        if every:  # a shortened smoke run still keeps about ten step checkpoints
            argv += ["--save-every", str(every)]
        rc, secs = run_in_log("train", argv, run / "train.log")
        row.update(train_s=round(secs, 1), train_rc=rc)
        if rc:
            return row
    argv = [str(run / "ckpt.pt"), "--out", str(reports / m.name), "--n-samples", str(n_samples)]
    argv += ["--title", f"{m.name} ({m.task}/{m.preset})"]
    rc, secs = run_in_log("report", argv, reports / m.name / "report.log")
    row.update(report_s=round(secs, 1), report_rc=rc)
    return row


def _forked(fn: Callable[[], dict[str, Any]], out: Path) -> int:
    """Fork a child that runs `fn` on one CPU thread and writes its result to `out`; returns the child's pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        import torch

        torch.set_num_threads(1)
        out.write_text(json.dumps(fn()))
        code = 0
    except BaseException:  # noqa: BLE001 - the forked child logs whatever stops it, then always exits
        traceback.print_exc()
    finally:
        os._exit(code)


def run_jobs(
    jobs: list[tuple[str, Callable[[], dict[str, Any]], list[Path]]], parallel: int, *, every_s: float = 15.0
) -> list[dict[str, Any]]:
    """Run (name, job, logs) triples, `parallel` at a time in forked children; returns each job's row, in order.

    Says when each job ends and, every `every_s` seconds, prints each running job's latest progress line from its
    logs (`mechmem.progress.LogRelay`), so a long demo is never silent, on a terminal or in a log file.
    A job that dies returns {"failed": exit status}.
    """
    if parallel <= 1 or not hasattr(os, "fork"):
        return [fn() for _, fn, _ in jobs]
    results: list[dict[str, Any]] = [{} for _ in jobs]
    tmp = Path(tempfile.mkdtemp(prefix="mechmem-demo-"))
    running: dict[int, tuple[int, float]] = {}
    relay = LogRelay(every_s=every_s)
    todo = list(range(len(jobs)))
    while todo or running:
        while todo and len(running) < parallel:
            i = todo.pop(0)
            running[_forked(jobs[i][1], tmp / f"{i}.json")] = (i, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid in running:
            i, t0 = running.pop(pid)
            out = tmp / f"{i}.json"
            ok = os.waitstatus_to_exitcode(status) == 0 and out.exists()
            results[i] = json.loads(out.read_text()) if ok else {"failed": os.waitstatus_to_exitcode(status)}
            print(f"[{jobs[i][0]}] {'done' if ok else 'failed'} in {time.monotonic() - t0:.0f} s", flush=True)
            continue
        time.sleep(0.2)
        relay.poll({jobs[i][0]: jobs[i][2] for i, _ in running.values()})
    shutil.rmtree(tmp, ignore_errors=True)
    return results


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
    """Train (unless a checkpoint exists) and report on every model, write `reports/index.html`; one row per model."""
    script("train"), script("report")  # import TransformerLens and the papers once, before forking
    from mechmem.plugins import load_papers

    load_papers()
    order = sorted(models, key=lambda m: -m.minutes)
    print(f"training and reporting on {', '.join(m.name for m in order)} ({jobs} at a time)", flush=True)
    specs = [
        (
            m.name,
            lambda m=m: demo_job(m, runs, reports, retrain=retrain, steps=steps, n_samples=n_samples),
            [runs / m.name / "train.log", reports / m.name / "report.log"],
        )
        for m in order
    ]
    done = dict(zip([m.name for m in order], run_jobs(specs, jobs)))
    rows: dict[str, dict[str, Any]] = {}
    for m in models:
        rows[m.name] = {"model": m.name, "preset": f"{m.task}/{m.preset}", **done[m.name]}
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
