"""The circuit report of one saved checkpoint: what `mechmem report` and the demo both write.

`report_checkpoint` adds the checkpoint's provenance to the report's metadata, adds the training-dynamics
section when the run directory has step checkpoints, and writes report.md, report.html and report.json.
"""

from pathlib import Path

from mechmem.analysis.dynamics import run_dir_of
from mechmem.checkpoint import Checkpoint
from mechmem.models.checks import check_count, check_instance, check_path
from mechmem.report import build_report
from mechmem.report.document import Report, write_report
from mechmem.training.interventions import describe


def report_checkpoint(
    ckpt: Checkpoint,
    out: Path,
    *,
    n_samples: int,
    seed: int = 0,
    title: str | None = None,
    progress: bool = False,
) -> tuple[Report, dict[str, Path]]:
    """Build the report of `ckpt` (`checkpoint_report`) and write it into `out`; returns the report and the
    paths written.

    Example:

        >>> import tempfile, pathlib, mechmem
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> path = mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")
        >>> ckpt = mechmem.load_checkpoint(path)
        >>> report, paths = mechmem.report_checkpoint(ckpt, folder / "report", n_samples=64)
        >>> sorted(paths)
        ['html', 'json', 'md']
    """
    check_instance("ckpt", ckpt, Checkpoint, " (mechmem.load_checkpoint(path))")
    check_path(out, "out")
    check_count("n_samples", n_samples)
    report = checkpoint_report(ckpt, n_samples=n_samples, seed=seed, title=title, progress=progress)
    return report, write_report(report, out)


def checkpoint_report(
    ckpt: Checkpoint,
    *,
    n_samples: int,
    seed: int = 0,
    title: str | None = None,
    progress: bool = False,
    memory_mb: float = 256.0,
) -> Report:
    """The report of `ckpt`, not yet written: `build_report` on its model and task (`n_samples` sequences per
    analysis, generators seeded from `seed`, batched passes within `memory_mb`) with its provenance; title
    default: "<run directory>: <task>"."""
    under = describe(ckpt.train or {})
    meta = {
        **({"trained under interventions": under} if under else {}),
        "checkpoint": str(ckpt.path),
        "task": f"{ckpt.task_name} {ckpt.task_config}"
        + (f" ({ckpt.extra['task_attached']})" if "task_attached" in ckpt.extra else ""),
        "model": type(ckpt.model).__name__,
        "versions": ", ".join(f"{k} {v}" for k, v in ckpt.versions.items()),
    }
    return build_report(
        ckpt.model,
        ckpt.task,
        title=title or f"{ckpt.path.parent.name}: {ckpt.task_name}",
        meta=meta,
        n_samples=n_samples,
        seed=seed,
        run_dir=run_dir_of(ckpt.path),
        progress=progress,
        memory_mb=memory_mb,
    )
