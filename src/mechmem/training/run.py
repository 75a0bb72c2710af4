"""Train a preset end to end: build the task and model from configs, train, and write the run directory."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mechmem.config import Preset, TrainConfig, TrainIntervention, resolve_device
from mechmem.errors import MechmemError
from mechmem.models import build_model
from mechmem.models.checks import check_count, check_path, check_seed
from mechmem.tasks import build_task, get_preset
from mechmem.training.rundir import run_identity
from mechmem.training.trainer import TrainResult, train


def _preset_run(
    task_name: str,
    preset: str | Preset,
    *,
    seed: int | None = None,
    steps: int | None = None,
    save_every: int | None = None,
    interventions: Sequence[str | TrainIntervention] | None = None,
    **train_overrides: Any,
) -> tuple[Preset, TrainConfig]:
    """The preset and its training config with command-line style overrides applied."""
    spec = get_preset(task_name, preset) if isinstance(preset, str) else preset
    changes: dict[str, Any] = dict(train_overrides)
    if interventions is not None:
        changes["interventions"] = tuple(str(iv) for iv in interventions)
    for name, value in (("seed", seed), ("steps", steps), ("save_every", save_every)):
        if value is not None and name != "seed" and value < 0:
            raise MechmemError(f"--{name.replace('_', '-')} must be >= 0")
        if value is not None:
            changes[name] = value
    return spec, spec.train.replace(**changes) if changes else spec.train


def preset_identity(task_name: str, preset: str | Preset, **overrides: Any) -> dict[str, Any]:
    """The `rundir.run_identity` of the run `train_preset(task_name, preset, **overrides)` makes."""
    spec, cfg = _preset_run(task_name, preset, **overrides)
    return run_identity(spec.model, task_name, spec.task, cfg)


def train_preset(
    task_name: str,
    preset: str | Preset,
    *,
    out_dir: str | Path | None = None,
    seed: int | None = None,
    steps: int | None = None,
    save_every: int | None = None,
    device: str = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    interventions: Sequence[str | TrainIntervention] | None = None,
    **train_overrides: Any,
) -> TrainResult:
    """Train `task_name` with a named preset (or a `Preset`), applying command-line style overrides.

    The model's initial weights come from `torch.Generator().manual_seed(seed)`. `interventions` (spec
    strings or `TrainIntervention`s, `mechmem.training.interventions`) are set in the forward pass of every
    step before `intervene_until` (a training override; default: the whole run) and recorded in the
    checkpoint's train config.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp()) / "t1"
        >>> result = mechmem.train_preset("permutation", "task1-quick", steps=4, out_dir=run, progress=False)
        >>> result.checkpoint.name, (run / "metrics.jsonl").exists()
        ('ckpt.pt', True)
        >>> clamped = mechmem.train_preset("permutation", "task2-quick", steps=4, progress=False,
        ...                                interventions=["L0H1=zero"], intervene_until=2)
        >>> clamped.summary["interventions"]
        'L0H1=zero before step 2'
    """
    for name, value in (("steps", steps), ("save_every", save_every)):
        if value is not None:
            check_count(name, value)
    if seed is not None:
        check_seed(seed)
    if out_dir is not None:
        check_path(out_dir, "out_dir")
    resolve_device(device)
    spec, cfg = _preset_run(
        task_name,
        preset,
        seed=seed,
        steps=steps,
        save_every=save_every,
        interventions=interventions,
        **train_overrides,
    )
    task = build_task(task_name, spec.task)
    model = build_model(spec.model, generator=torch.Generator().manual_seed(cfg.seed))
    return train(
        model,
        task,
        cfg,
        model_config=spec.model,
        out_dir=out_dir,
        device=resolve_device(device),
        resume=resume,
        overwrite=overwrite,
        progress=progress,
        interventions=interventions,
    )
