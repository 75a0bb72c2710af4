"""The circuit report of one saved checkpoint: what `analyses/report.py` and the demo both write.

`report_checkpoint` adds the checkpoint's provenance (path, task, model class, library versions, seed and
sample count) to the report's metadata, reads the run directory's step checkpoints for the training-dynamics
section when there are any, and writes report.md, report.html and report.json.
"""

from pathlib import Path

from mechmem.analysis.dynamics import run_dir_of
from mechmem.checkpoint import Checkpoint
from mechmem.report import build_report
from mechmem.report.document import Report, write_report


def report_checkpoint(
    ckpt: Checkpoint,
    out: Path,
    *,
    n_samples: int,
    seed: int = 0,
    title: str | None = None,
    progress: bool = False,
) -> tuple[Report, dict[str, Path]]:
    """Build the report of `ckpt` and write it into `out`; returns the report and the paths written.

    Args:
        ckpt: a loaded checkpoint (`mechmem.checkpoint.load_checkpoint`).
        out: folder of report.md, report.html and report.json.
        n_samples: sequences per analysis.
        seed: seed of every generator the analyses draw from.
        title: report title (default: "<run directory>: <task>").
        progress: print the report's progress lines (`mechmem.report.ReportCost`).
    """
    meta = {
        "checkpoint": str(ckpt.path),
        "task": f"{ckpt.task_name} {ckpt.task_config}",
        "model": type(ckpt.model).__name__,
        "versions": ", ".join(f"{k} {v}" for k, v in ckpt.versions.items()),
        "seed / samples": f"{seed} / {n_samples}",
    }
    report = build_report(
        ckpt.model,
        ckpt.task,
        title=title or f"{ckpt.path.parent.name}: {ckpt.task_name}",
        meta=meta,
        n_samples=n_samples,
        seed=seed,
        run_dir=run_dir_of(ckpt.path),
        progress=progress,
    )
    return report, write_report(report, out)
