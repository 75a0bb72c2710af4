"""The training loop shared by every task.

Each step draws a fresh batch from the task with an explicit generator, computes the task's loss, and takes an
optimiser step on the trainable parameters. Every `eval_every` steps it records the training-batch metrics
(computed before the step) and the task's evaluation to `metrics.jsonl`, one JSON object per line.

Activations named in `TrainConfig.interventions` are set in the forward passes of the steps before
`intervene_until` (`mechmem.training.interventions`), checked against the model before anything is written.

A non-finite loss or weight is `TrainingDiverged` and the last good checkpoint stays. Model init, training
data and evaluation data come from three generators seeded from `TrainConfig.seed`; a resumed run matches the
uninterrupted run exactly.
"""

import fnmatch
import math
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mechmem.checkpoint import save_checkpoint
from mechmem.config import TrainConfig, TrainIntervention
from mechmem.errors import MechmemError, TrainingDiverged
from mechmem.io import atomic_write, dumps, open_in_place
from mechmem.models.backend import move_model
from mechmem.models.parts import model_device
from mechmem.models.weights import canonical_parameters, load_canonical_state_dict
from mechmem.progress import Progress
from mechmem.tasks.base import Task
from mechmem.training.interventions import (
    HeldHooks,
    check_interventions,
    describe,
    intervention_hooks,
    training_interventions,
)
from mechmem.training.rundir import (
    METRICS,
    RUN_FILES,
    find_resume_point,
    prepare_fresh,
    read_metrics,
    run_identity,
    run_lock,
    step_checkpoints,
)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Learning rate at `step` for the config's warm-up and schedule."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    if cfg.schedule == "cosine":
        return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return cfg.lr + (floor - cfg.lr) * progress


def make_optimizer(params: list[torch.nn.Parameter], cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    adam = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return adam(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


@dataclass
class TrainResult:
    """What `train` returns: the trained model, the evaluation history and a summary."""

    model: torch.nn.Module
    history: list[dict[str, Any]]
    summary: dict[str, Any]
    checkpoint: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dataframe(self) -> Any:
        """One row per evaluation and logged number: `step`, `metric` (e.g. "loss", "eval_acc"), `value`."""
        import pandas as pd

        rows = [
            [record["step"], key, float(value)]
            for record in self.history
            for key, value in record.items()
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool)
        ]
        return pd.DataFrame(rows, columns=["step", "metric", "value"])

    def __repr__(self) -> str:
        steps = [r["step"] for r in self.history]
        keys = ("eval_loss", "test_loss", "eval_acc", "train_loss_last100")
        shown = [k for k in keys if isinstance(self.summary.get(k), (int, float))]
        numbers = ", ".join(f"{k} {self.summary[k]:.4g}" for k in shown[:2])
        return (
            f"TrainResult({len(steps)} evaluations"
            + (f" at steps {steps[0]}..{steps[-1]}" if steps else "")
            + (f", {numbers}" if numbers else "")
            + (f", checkpoint {str(self.checkpoint)[-80:]!r}" if self.checkpoint else "")
            + ")"
        )


def _check_finite(model: torch.nn.Module, step: int) -> None:
    """Raise `TrainingDiverged` if any weight is NaN or infinite after the update of `step`."""
    bad = [n for n, p in canonical_parameters(model).items() if not bool(torch.isfinite(p).all())]
    if bad:
        raise TrainingDiverged(
            f"weights became non-finite at step {step} ({', '.join(bad[:3])}); "
            "the last good checkpoint is kept; lower the learning rate or enable grad_clip"
        )


def _truncate_metrics(out: Path, step: int) -> list[dict[str, Any]]:
    """Keep the records of `out/metrics.jsonl` logged before `step` (a resumed run logs the rest again)."""
    if not (out / METRICS).exists():
        return []
    kept = [rec for rec in read_metrics(out) if rec["step"] < step]
    atomic_write(out / METRICS, "".join(dumps(rec) + "\n" for rec in kept), root=out)
    return kept


MAX_STEPS = 10**9
"""Most optimiser steps a run may ask for (at a millisecond a step, eleven days): more cannot finish."""


def check_run_fits(model: torch.nn.Module, cfg: TrainConfig, out: Path | None, *, progress: bool) -> None:
    """Refuse more than `MAX_STEPS` steps, or step checkpoints that would not fit the free space of `out`."""
    if cfg.steps > MAX_STEPS:
        raise MechmemError(f"--steps {cfg.steps} is more than the {MAX_STEPS} steps a run can finish")
    if out is None or not cfg.save_every:
        return
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    per_file = weights * (3 if cfg.optimizer != "sgd" else 2) + 2**16  # weights, optimiser state, fields
    files = cfg.steps // cfg.save_every
    need, free = files * per_file, shutil.disk_usage(out).free
    if need > free:
        raise MechmemError(
            f"--save-every {cfg.save_every}: {files} step checkpoints of about {per_file / 2**20:.2f} MB "
            f"need {need / 2**20:.0f} MB, more than the {free / 2**20:.0f} MB free in {out}"
        )
    if progress:
        print(
            f"will write {files} step checkpoints of about {per_file / 2**20:.2f} MB "
            f"({need / 2**20:.1f} MB of {free / 2**20:.0f} MB free) to {out / 'checkpoints'}",
            file=sys.stderr,
        )


@contextmanager
def _run_dir(out: Path | None, *, resume: bool, overwrite: bool) -> Iterator[None]:
    """Hold `out`'s lock while the run writes into it (`run_lock`); a failed fresh run with nothing to resume
    from leaves no file behind."""
    if out is None:
        yield
        return
    with run_lock(out):
        held = any((out / name).exists() for name in RUN_FILES) or step_checkpoints(out)
        ours = not resume and (overwrite or not held)  # the files the run writes will be this run's
        try:
            yield
        except BaseException:
            resumable = any((out / n).exists() for n in ("ckpt.pt", "resume.pt")) or step_checkpoints(out)
            if ours and not resumable:
                (out / METRICS).unlink(missing_ok=True)
            raise


def train(
    model: torch.nn.Module,
    task: Task,
    cfg: TrainConfig,
    *,
    model_config: Any,
    out_dir: str | Path | None = None,
    device: str | torch.device = "cpu",
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    interventions: Sequence[str | TrainIntervention] | None = None,
) -> TrainResult:
    """Train `model` on `task` and, if `out_dir` is given, write metrics.jsonl and ckpt.pt there.

    Args:
        model: a freshly built model (its initial weights define the run).
        model_config: the model's config, stored in checkpoints so the model can be rebuilt.
        out_dir: where to write `metrics.jsonl`, `ckpt.pt`, `resume.pt` and `checkpoints/step_*.pt`.
        resume: continue from the latest checkpoint in `out_dir` with trainer state (only of this very run).
        overwrite: a fresh run into a directory holding an old run deletes the old run's files first.
        progress: show progress (a bar on a terminal, a line every 10 s otherwise; `mechmem.progress`).
        interventions: activations to set in the forward pass before `cfg.intervene_until`
            (`mechmem.training.interventions`): spec strings ("L0H1=zero", "blocks.0.hook_resid_post=mean")
            or `TrainIntervention`s; they replace `cfg.interventions` and are recorded there (None: keep
            `cfg.interventions`). Checked against the model before anything is written.
    """
    out = Path(out_dir) if out_dir is not None else None
    if interventions is not None:
        cfg = cfg.replace(interventions=tuple(str(iv) for iv in interventions))
    clamps = training_interventions(cfg, interventions or ())
    if clamps:
        probe = task.train_batch(2, generator=torch.Generator().manual_seed(0)).tokens
        check_interventions(model, clamps, probe.to(model_device(model)))
    hooks = intervention_hooks(clamps)

    def intervened(step: int) -> bool:
        """Whether the forward passes of `step` run under the interventions (the final evaluation: as the last
        training step)."""
        return cfg.intervene_until is None or min(step, cfg.steps - 1) < cfg.intervene_until

    with _run_dir(out, resume=resume, overwrite=overwrite), HeldHooks(model, hooks) as clamp:
        device = torch.device(device)
        move_model(model, device)
        params = [(n, p) for n, p in canonical_parameters(model).items() if p.requires_grad]
        if not params:
            raise MechmemError("the model has no trainable parameters")
        optimizer = make_optimizer([p for _, p in params], cfg)
        data_gen = torch.Generator().manual_seed(cfg.seed + 1)
        held: list[tuple[torch.nn.Parameter, int]] = []
        for pattern, until in cfg.frozen_until:
            hits = [(p, until) for n, p in params if fnmatch.fnmatch(n, pattern)]
            if not hits:
                raise MechmemError(f"frozen_until pattern {pattern!r} matches no trainable parameter")
            held += hits

        check_run_fits(model, cfg, out, progress=progress)
        start = 0
        recent: list[float] = []
        history: list[dict[str, Any]] = []
        if resume:
            if out is None:
                raise MechmemError("--resume needs an output directory")
            _, payload = find_resume_point(out, run_identity(model_config, task.name, task.config, cfg))
            load_canonical_state_dict(model, payload["state_dict"])
            state = payload["extra"]["trainer"]
            optimizer.load_state_dict(state["optimizer"])
            data_gen.set_state(state["data_rng"])
            start = int(state["step"])
            recent = [float(x) for x in state.get("recent_losses", [])]
            history = _truncate_metrics(out, start)
        elif out is not None:
            prepare_fresh(out, overwrite=overwrite)
            with open_in_place(out / METRICS, "w"):
                pass

        def checkpoint(path: Path, step: int, summary: dict[str, Any]) -> None:
            clamp.hold(False)  # saving checks the model's logits against its config: without the hooks
            _check_finite(model, step - 1)
            save_checkpoint(
                path,
                model=model,
                model_config=model_config,
                task_name=task.name,
                task_config=task.config,
                train_config=cfg,
                metrics=summary,
                extra={
                    "trainer": {
                        "step": step,
                        "optimizer": optimizer.state_dict(),
                        "data_rng": data_gen.get_state(),
                        "recent_losses": list(recent),
                    }
                },
            )

        def evaluate(record: dict[str, Any]) -> dict[str, Any]:
            model.eval()
            generator = torch.Generator().manual_seed(cfg.seed + 2)  # the same evaluation data every time
            record.update(task.evaluate(model, generator=generator, n=cfg.eval_samples))
            model.train()
            history.append(record)
            if out is not None:
                with open_in_place(out / METRICS, "a") as fh:
                    fh.write(dumps(record) + "\n")
            return record

        t0 = time.perf_counter()
        model.train()
        bar = Progress(cfg.steps, initial=start, enabled=progress, desc=f"train {task.name}")
        for step in range(start, cfg.steps):
            lr = lr_at(step, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = task.train_batch(cfg.batch_size, generator=data_gen).to(device)
            clamp.hold(intervened(step))
            logits = model(batch.tokens)
            loss = task.loss(logits, batch)
            if not torch.isfinite(loss):
                bar.close()
                raise TrainingDiverged(
                    f"loss became {loss.item()} at step {step}; lower the learning rate or enable grad_clip"
                )
            recent = (recent + [loss.item()])[-100:]
            if step % cfg.eval_every == 0:
                with torch.no_grad():
                    record = {"step": step, "lr": lr, "loss": loss.item()}
                    record.update(task.train_metrics(model, batch, logits.detach()))
                evaluate(record)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for p, until in held:
                if step < until:
                    p.grad = None
            if cfg.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_([p for _, p in params], cfg.grad_clip)
            optimizer.step()
            bar.update(1)
            if step % 20 == 0:
                bar.set_postfix(loss=f"{recent[-1]:.4f}")
            done = step + 1
            if out is not None and cfg.save_every and done % cfg.save_every == 0:
                checkpoint(out / "checkpoints" / f"step_{done:07d}.pt", done, {"step": done})
            elif out is not None and done % cfg.eval_every == 0:
                checkpoint(out / "resume.pt", done, {"step": done})
        bar.close()
        _check_finite(model, cfg.steps - 1)

        clamp.hold(intervened(cfg.steps))
        final = evaluate({"step": cfg.steps, "loss": sum(recent) / len(recent) if recent else None})
        summary = {k: v for k, v in final.items() if k != "lr"}
        summary["train_loss_last100"] = summary.pop("loss")
        if describe(cfg):
            summary["interventions"] = describe(cfg)
        summary["wall_time_s"] = round(time.perf_counter() - t0, 2)
        ckpt_path = None
        if out is not None:
            ckpt_path = out / "ckpt.pt"
            checkpoint(ckpt_path, cfg.steps, summary)
            (out / "resume.pt").unlink(missing_ok=True)
        return TrainResult(model=model, history=history, summary=summary, checkpoint=ckpt_path)
