"""The demo: train one small model per memory task preset in `DEMO_MODELS`, report on each, link the reports.

Each model is one job: train it (unless its checkpoint exists) with `train_preset`, then write its report with
`report_checkpoint`, output going to the model's log file. Jobs run `jobs` at a time in forked worker
processes, each on one CPU thread; without `os.fork` (or with `jobs=1`) they run one after another here.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mechmem.checkpoint import load_checkpoint
from mechmem.errors import MechmemError, one_line
from mechmem.io import describe_os_error
from mechmem.progress import LogRelay
from mechmem.report.checkpoint_report import report_checkpoint
from mechmem.report.document import write_index
from mechmem.tables import format_table
from mechmem.tasks import get_task_class
from mechmem.training.run import preset_identity, train_preset
from mechmem.training.rundir import finished_run


@dataclass(frozen=True)
class DemoModel:
    """One model of `make demo`: a name, and the task preset it is trained from."""

    name: str
    """Run and report directory name."""
    task: str
    """Task registry name."""
    preset: str
    """Preset of that task."""
    minutes: float = 1.0
    """Rough single-thread training time; the longest jobs start first."""
    save_every: int | None = None
    """Keep a step checkpoint every this many steps (the report's training-dynamics section reads them)."""


DEMO_MODELS = (
    DemoModel("birth", "birth", "demo", 0.8, save_every=25),
    DemoModel("facts", "facts", "quick", 0.5),
    DemoModel("permutation-task1", "permutation", "task1-demo", 0.3),
    DemoModel("permutation-task2", "permutation", "task2-quick", 2.0, save_every=1000),
)
"""The demo's models: one or two presets of each memory task, in name order."""


def available(models: list[DemoModel] | None = None) -> list[DemoModel]:
    """The demo models (default: `DEMO_MODELS`) whose task and preset exist in this installation."""
    out = []
    for m in DEMO_MODELS if models is None else models:
        with suppress(MechmemError):
            if m.preset in get_task_class(m.task).presets:
                out.append(m)
    return out


def run_in_log(fn: Callable[[], Any], log: Path) -> tuple[int, float]:
    """Call `fn()` with stdout and stderr (file descriptors 1 and 2) sent to `log`; returns (exit status,
    seconds), the status and error line as a command gives them."""
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as fh:
        for fd in (1, 2):
            os.dup2(fh.fileno(), fd)
        rc = 0
        try:
            fn()
        except MechmemError as exc:
            print(f"error: {one_line(exc)}", file=sys.stderr)
            rc = 2
        except OSError as exc:
            print(f"error: {describe_os_error(exc)}", file=sys.stderr)
            rc = 1
        except Exception:  # noqa: BLE001 - a failed job is logged with its traceback; the demo goes on
            traceback.print_exc()
            rc = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in enumerate(saved, start=1):
                os.dup2(copy, fd)
                os.close(copy)
    return rc, time.perf_counter() - t0


def _train(m: DemoModel, run: Path, *, steps: int | None, save_every: int | None) -> None:
    result = train_preset(
        m.task, m.preset, out_dir=run, steps=steps, save_every=save_every, overwrite=True, progress=True
    )
    rows = [(k, v) for k, v in result.summary.items() if isinstance(v, (int, float))]
    print(format_table(rows, ["metric", "value"]))
    print(f"wrote {result.checkpoint} and {run}/metrics.jsonl")


def _report(m: DemoModel, run: Path, out: Path, n_samples: int) -> None:
    title = f"{m.name} ({m.task}/{m.preset})"
    report, paths = report_checkpoint(load_checkpoint(run / "ckpt.pt"), out, title=title, n_samples=n_samples)
    print(f"circuit: {report.section('circuit').findings['summary']}")
    print(f"wrote {paths['md']}, {paths['html']} and {paths['json']}")


def demo_job(
    m: DemoModel, runs: Path, reports: Path, *, retrain: bool, steps: int | None, n_samples: int
) -> dict[str, Any]:
    """Train `m` (unless its run directory holds this very run, finished, and not `retrain`), then report on
    it; returns its summary row."""
    row: dict[str, Any] = {"model": m.name, "preset": f"{m.task}/{m.preset}", "train_s": "cached"}
    run = runs / m.name
    # a shortened smoke run still keeps about ten step checkpoints
    every = (m.save_every if steps is None else max(1, steps // 10)) if m.save_every else None
    identity = preset_identity(m.task, m.preset, steps=steps, save_every=every)
    if retrain or not finished_run(run, identity):  # a finished run of other settings is trained again
        rc, secs = run_in_log(lambda: _train(m, run, steps=steps, save_every=every), run / "train.log")
        row.update(train_s=round(secs, 1), train_rc=rc)
        if rc:
            return row
    rc, secs = run_in_log(
        lambda: _report(m, run, reports / m.name, n_samples), reports / m.name / "report.log"
    )
    row.update(report_s=round(secs, 1), report_rc=rc)
    return row


def _forked(fn: Callable[[], dict[str, Any]], out: Path) -> int:
    """Fork a child that runs `fn` on one CPU thread and writes its result to `out`; returns its pid."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        import torch

        torch.set_num_threads(1)
        out.write_text(json.dumps(fn()), encoding="utf-8")
        code = 0
    except BaseException:  # noqa: BLE001 - the forked child logs whatever stops it, then always exits
        traceback.print_exc()
    finally:
        os._exit(code)


def run_jobs(
    jobs: list[tuple[str, Callable[[], dict[str, Any]], list[Path]]], parallel: int, *, every_s: float = 15.0
) -> list[dict[str, Any]]:
    """Run (name, job, logs) triples, `parallel` at a time in forked children; returns each job's row, in
    order ({"failed": exit status} for a job that dies), relaying the jobs' progress lines."""
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
            results[i] = (
                json.loads(out.read_text(encoding="utf-8"))
                if ok
                else {"failed": os.waitstatus_to_exitcode(status)}
            )
            print(f"[{jobs[i][0]}] {'done' if ok else 'failed'} in {time.monotonic() - t0:.0f} s", flush=True)
            continue
        time.sleep(0.2)
        relay.poll({jobs[i][0]: jobs[i][2] for i, _ in running.values()})
    shutil.rmtree(tmp, ignore_errors=True)
    return results


def index_entry(data: dict[str, Any]) -> dict[str, Any]:
    """The index row of a report from its report.json: headline (after the interventions the model trained
    under, if any), named roles, edge verdict, faithfulness, seed and samples."""
    sections = data["sections"]
    edges = sections.get("edges", {})
    found = edges.get("findings", {}) if not edges.get("skipped") else {}
    under = data.get("meta", {}).get("trained under interventions")
    return {
        "headline": (f"[trained under {under}] " if under else "") + data["headline"],
        "seed": data.get("meta", {}).get("seed / samples", ""),
        "roles": sections["circuit"]["findings"].get("summary", ""),
        "verdict": found.get("verdict", "n/a"),
        "faithfulness": None
        if found.get("not_measurable", {}).get("faithfulness")
        else found.get("faithfulness"),
    }


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
    """Train (unless trained already) and report on every model, write reports/index.html; a row per model."""
    for m in models:  # import TransformerLens and the tasks once, before forking
        get_task_class(m.task)
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
    rows, entries = [], []
    for m in models:
        row = {"model": m.name, "preset": f"{m.task}/{m.preset}", **done[m.name]}
        path = reports / m.name / "report.json"
        if row.get("report_rc") == 0 and path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            row.update(headline=data["headline"], circuit=data["sections"]["circuit"]["findings"]["summary"])
            written = time.strftime("%Y-%m-%d %H:%M", time.gmtime(path.stat().st_mtime))
            entries.append(
                {"name": m.name, "href": f"{m.name}/report.html", **index_entry(data)}
                | {"preset": row["preset"], "date": written}
            )
        else:
            row.update(headline="failed: see the log", circuit="")
            entries.append(
                {"name": m.name, "href": f"{m.name}/report.log", "headline": "failed (log)", "roles": ""}
                | {"preset": row["preset"]}
            )
        rows.append(row)
    write_index(entries, reports / "index.html")
    return rows
