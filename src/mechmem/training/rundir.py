"""Run directories that cannot mix runs.

A run is identified by its full configuration: the model config, the task (name and config) and the training
config (seed, steps, schedule, ...). A run directory holds one run:

    ckpt.pt, resume.pt, checkpoints/step_*.pt, metrics.jsonl    the run's files
    .lock                                                       held (fcntl) by the process writing the run

- A fresh run refuses a directory that already holds a run's files, unless `overwrite`, which first deletes them
  (other files, such as a launcher's log, stay).
- `--resume` continues only an identical run: every checkpoint with trainer state in the directory must carry the
  same configuration, else the error names the fields that differ (`train.seed 5 != 9`).
- A second process that tries to write the same directory while the first holds the lock stops with the first
  one's pid. The lock is released when the process ends, however it ends (kill -9 included).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mechmem.checkpoint import read_payload
from mechmem.errors import MechmemError
from mechmem.io import output_dir

RUN_FILES = ("ckpt.pt", "resume.pt", "metrics.jsonl")


def run_identity(model_config: Any, task: Any, train_config: Any) -> dict[str, Any]:
    """The configuration that identifies a run, as stored in its checkpoints."""
    return {
        "model": model_config.to_dict(),
        "task": {"name": task.name, **task.config.to_dict()},
        "train": train_config.to_dict(),
    }


def payload_identity(payload: dict[str, Any]) -> dict[str, Any]:
    """`run_identity` of a checkpoint payload."""
    return {
        "model": payload["model_config"],
        "task": {"name": payload["task_name"], **payload["task_config"]},
        "train": payload["train_config"],
    }


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted fields where two nested configs differ: ["train.seed 5 != 9", ...]."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(
                    f"{name} {'missing' if key not in old else old[key]!r} != "
                    f"{'missing' if key not in new else new[key]!r}"
                )
            else:
                out.extend(differences(old[key], new[key], name))
        return out
    return [] if old == new else [f"{prefix} {old!r} != {new!r}"]


@contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """Hold `out/.lock` while writing the run (`mechmem.io.output_dir`): a second writer is refused with our
    pid, the lock file goes when the run ends, and a folder this run created goes too if the run fails."""
    with output_dir(out):
        yield


def step_checkpoints(out: Path) -> list[Path]:
    return sorted((out / "checkpoints").glob("step_*.pt"))


def prepare_fresh(out: Path, *, overwrite: bool) -> None:
    """Refuse a directory that holds a run's files; with `overwrite`, delete them first (other files stay)."""
    existing = [out / name for name in RUN_FILES if (out / name).exists()] + step_checkpoints(out)
    if not existing:
        return
    if not overwrite:
        shown = ", ".join(str(p.relative_to(out)) for p in existing[:3]) + (
            ", ..." if len(existing) > 3 else ""
        )
        raise MechmemError(
            f"{out} already holds a run ({shown}); use --resume to continue it or --overwrite to replace it"
        )
    for path in existing:
        path.unlink(missing_ok=True)
    if (out / "checkpoints").is_dir() and not any((out / "checkpoints").iterdir()):
        (out / "checkpoints").rmdir()


def find_resume_point(out: Path, identity: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The latest checkpoint with trainer state in `out`, after checking every one is of this very run."""
    best: tuple[Path, dict[str, Any]] | None = None
    for path in [out / "resume.pt", out / "ckpt.pt", *step_checkpoints(out)]:
        if not path.exists():
            continue
        payload = read_payload(path)
        if payload.get("extra", {}).get("trainer") is None:
            continue
        diff = differences(payload_identity(payload), identity)
        if diff:
            raise MechmemError(
                f"--resume: {path} is a different run ({', '.join(diff[:6])}{', ...' if len(diff) > 6 else ''}); "
                "use the same settings, another --out, or --overwrite"
            )
        if best is None or payload["extra"]["trainer"]["step"] > best[1]["extra"]["trainer"]["step"]:
            best = (path, payload)
    if best is None:
        raise MechmemError(f"--resume: no checkpoint with trainer state in {out}")
    return best
