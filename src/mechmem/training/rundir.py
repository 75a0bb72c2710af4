"""Run directories that cannot mix runs.

A run is identified by its full configuration: the model config, the task (name and config) and the training
config (seed, steps, schedule, ...). A run directory holds one run:

    ckpt.pt, resume.pt, checkpoints/step_*.pt, metrics.jsonl    the run's files
    .lock                                                       held (fcntl) by the process writing the run

- A fresh run refuses a directory that already holds a run's files, unless `overwrite` (other files stay).
- `--resume` continues only an identical run; the error names the differing fields (`train.seed 5 != 9`).
- A second process writing the same directory stops with the first one's pid.
"""

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mechmem.checkpoint import read_payload
from mechmem.config import TrainConfig, config_dict
from mechmem.errors import CheckpointError, MechmemError
from mechmem.io import nesting_depth, open_in_place, output_dir, refuse_linked_folder

METRICS = "metrics.jsonl"
"""The trainer's log in a run directory: one JSON object per evaluation, in step order."""
RUN_FILES = ("ckpt.pt", "resume.pt", METRICS)


MAX_METRICS_DEPTH = 32
"""Deepest nesting of lists and objects in a metrics.jsonl record (deeper lines are refused unparsed)."""


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of `run_dir/metrics.jsonl` in order (the one reader of the trainer's log).

    Each line must be a JSON object with an integer "step" >= 0, nested at most `MAX_METRICS_DEPTH` deep;
    anything else is a one-line `MechmemError`.
    """
    path = Path(run_dir) / METRICS
    try:
        with open_in_place(path) as fh:
            lines = fh.read().splitlines()
    except (OSError, ValueError) as exc:
        raise MechmemError(f"{path}: not readable ({type(exc).__name__})") from None
    return [_metrics_record(path, n, line) for n, line in enumerate(lines, 1) if line.strip()]


def _metrics_record(path: Path, n: int, line: str) -> dict[str, Any]:
    """One validated line of metrics.jsonl."""
    if nesting_depth(line.encode()) > MAX_METRICS_DEPTH:
        raise MechmemError(f"{path}: line {n} nests deeper than {MAX_METRICS_DEPTH} levels")
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise MechmemError(f"{path}: line {n} is not JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise MechmemError(f"{path}: line {n} is a JSON {type(record).__name__}, not an object")
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise MechmemError(f"{path}: line {n} has no integer step >= 0 (step {step!r})")
    return record


def run_identity(model_config: Any, task_name: str, task_config: Any, train_config: Any) -> dict[str, Any]:
    """The configuration that identifies a run (model, task name and config, training), as stored in its
    checkpoints."""
    return {
        "model": config_dict(model_config),
        "task": {"name": task_name, **config_dict(task_config)},
        "train": config_dict(train_config),
    }


def payload_identity(payload: dict[str, Any]) -> dict[str, Any]:
    """`run_identity` of a checkpoint payload; a training field the file predates (e.g. `interventions`)
    counts as its default, so older runs still resume."""
    train = payload["train_config"]
    if isinstance(train, dict) and train:
        train = {**TrainConfig().to_dict(), **train}
    return run_identity(payload["model_config"], payload["task_name"], payload["task_config"], train)


def run_differences(
    payload: dict[str, Any], identity: dict[str, Any], parts: tuple[str, ...] = ("model", "task", "train")
) -> list[str]:
    """The dotted fields where checkpoint `payload` differs from the run `identity`, over `parts` (all three
    by default); empty: the same run."""
    got = payload_identity(payload)
    return differences({k: got[k] for k in parts}, {k: identity[k] for k in parts})


def finished_run(run_dir: str | os.PathLike, identity: dict[str, Any]) -> bool:
    """True when `run_dir/ckpt.pt` is a valid checkpoint of exactly the run `identity`."""
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
    """Hold `out/.lock` while writing the run (`mechmem.io.output_dir`)."""
    with output_dir(out):
        yield


def step_checkpoints(out: Path) -> list[Path]:
    """The step checkpoints of the run in `out`; a `checkpoints` folder that is a link is refused."""
    refuse_linked_folder(out / "checkpoints", out)
    return sorted((out / "checkpoints").glob("step_*.pt"))


def prepare_fresh(out: Path, *, overwrite: bool) -> None:
    """Refuse a directory that holds a run's files; with `overwrite`, delete them first (other files stay).

    The old run is either kept whole or gone whole.
    """
    existing = [out / name for name in RUN_FILES if (out / name).is_symlink() or (out / name).exists()]
    existing += step_checkpoints(out)
    if not existing:
        return
    if not overwrite:
        shown = ", ".join(str(p.relative_to(out)) for p in existing[:3]) + (
            ", ..." if len(existing) > 3 else ""
        )
        raise MechmemError(
            f"{out} already holds a run ({shown}); use --resume to continue it or --overwrite to replace it"
        )
    moved: list[tuple[Path, Path]] = []
    try:
        for path in existing:
            aside = path.with_name(f".{path.name}.{os.getpid()}.old")
            os.replace(path, aside)
            moved.append((path, aside))
    except OSError as exc:
        for path, aside in reversed(moved):
            os.replace(aside, path)
        raise MechmemError(
            f"--overwrite: cannot remove {exc.filename or path} ({os.strerror(exc.errno or 0).lower()}); "
            "the old run is left as it was"
        ) from None
    for _, aside in moved:
        aside.unlink(missing_ok=True)
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
        check_trainer_state(path, payload["extra"]["trainer"], payload["train_config"])
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


def check_trainer_state(path: Path, state: Any, train_config: Any) -> None:
    """Refuse trainer state that cannot continue a run: a step that is not an integer in [0, steps]."""
    steps = train_config.get("steps") if isinstance(train_config, dict) else None
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or not isinstance(steps, int):
        raise MechmemError(f"--resume: {path} holds no integer trainer step (step {step!r})")
    if not 0 <= step <= steps:
        raise MechmemError(f"--resume: {path} claims step {step}, outside the run's [0, {steps}]")
