"""Run directories that cannot mix runs.

A run is identified by its full configuration: the model config, the task (name and config) and the training
config (seed, steps, schedule, ...). A run directory holds one run:

    ckpt.pt, resume.pt, checkpoints/step_*.pt, metrics.jsonl    the run's files
    .lock                                                       held (fcntl) by the process writing the run

- A fresh run refuses a directory that already holds a run's files, unless `overwrite`, which first deletes
  them
  (other files, such as a launcher's log, stay).
- `--resume` continues only an identical run: every checkpoint with trainer state in the directory must carry
  the
  same configuration, else the error names the fields that differ (`train.seed 5 != 9`).
- A second process that tries to write the same directory while the first holds the lock stops with the first
  one's pid. The lock is released when the process ends, however it ends (kill -9 included).
"""

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mechmem.checkpoint import read_payload
from mechmem.errors import CheckpointError, MechmemError
from mechmem.io import output_dir

METRICS = "metrics.jsonl"
"""The trainer's log in a run directory: one JSON object per evaluation, in step order."""
RUN_FILES = ("ckpt.pt", "resume.pt", METRICS)


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of `run_dir/metrics.jsonl` in order (the one reader of the trainer's log).

    A missing or unreadable file, or a line that is not JSON, is a one-line `MechmemError`.
    """
    path = Path(run_dir) / METRICS
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise MechmemError(f"{path}: not readable ({type(exc).__name__})") from None


def run_identity(model_config: Any, task_name: str, task_config: Any, train_config: Any) -> dict[str, Any]:
    """The configuration that identifies a run (model, task name and config, training), as stored in its
    checkpoints."""
    return {
        "model": _as_dict(model_config),
        "task": {"name": task_name, **_as_dict(task_config)},
        "train": _as_dict(train_config),
    }


def _as_dict(config: Any) -> dict[str, Any]:
    return config if isinstance(config, dict) else config.to_dict()


def payload_identity(payload: dict[str, Any]) -> dict[str, Any]:
    """`run_identity` of a checkpoint payload."""
    return {
        "model": payload["model_config"],
        "task": {"name": payload["task_name"], **payload["task_config"]},
        "train": payload["train_config"],
    }


def run_differences(
    payload: dict[str, Any], identity: dict[str, Any], parts: tuple[str, ...] = ("model", "task", "train")
) -> list[str]:
    """Is this the same run? The dotted fields where checkpoint `payload` differs from the run `identity`,
    over `parts` (all three by default; the steps of one run share "model" and "task"); empty: the same run.

    The one answer to "is this the same run?": `--resume` (`find_resume_point`), reusing a finished run
    (`finished_run`), the papers' reproductions and the dynamics of a run's step checkpoints all ask it.
    """
    got = payload_identity(payload)
    return differences({k: got[k] for k in parts}, {k: identity[k] for k in parts})


def finished_run(run_dir: str | os.PathLike, identity: dict[str, Any]) -> bool:
    """True when `run_dir/ckpt.pt` is a valid checkpoint of exactly the run `identity` (so it can be reused
    instead of trained again); False when it is missing, unreadable or of another run."""
    path = Path(run_dir) / "ckpt.pt"
    if not path.exists():
        return False
    try:
        payload = read_payload(path)
    except CheckpointError:
        return False
    return not run_differences(payload, identity)


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted fields where two nested configs differ: ["train.seed 5 != 9", ...]."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(f"{name} {old.get(key, 'missing')!r} != {new.get(key, 'missing')!r}")
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
        diff = run_differences(payload, identity)
        if diff:
            raise MechmemError(
                f"--resume: {path} is a different run "
                f"({', '.join(diff[:6])}{', ...' if len(diff) > 6 else ''}); "
                "use the same settings, another --out, or --overwrite"
            )
        if best is None or payload["extra"]["trainer"]["step"] > best[1]["extra"]["trainer"]["step"]:
            best = (path, payload)
    if best is None:
        raise MechmemError(f"--resume: no checkpoint with trainer state in {out}")
    return best
