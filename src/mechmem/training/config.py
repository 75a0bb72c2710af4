"""Training configuration and presets."""

from dataclasses import dataclass
from typing import Any

from mechmem.config import ConfigMixin

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULES = ("constant", "cosine", "linear")


@dataclass(frozen=True)
class TrainConfig(ConfigMixin):
    """How to train: optimiser, schedule, length, logging and checkpointing."""

    steps: int = 1000
    """Number of optimiser steps (each on a fresh batch)."""
    batch_size: int = 128
    """Sequences per step."""
    lr: float = 1e-3
    """Peak learning rate."""
    optimizer: str = "adam"
    """adam, adamw or sgd (with momentum)."""
    momentum: float = 0.9
    """SGD momentum."""
    betas: tuple[float, float] = (0.9, 0.999)
    """Adam/AdamW betas."""
    weight_decay: float = 0.0
    """Weight decay (decoupled for AdamW, L2 for Adam and SGD)."""
    schedule: str = "constant"
    """Learning-rate schedule after warm-up: constant, cosine or linear.

    Cosine and linear decay to min_lr_ratio.
    """
    warmup_steps: int = 0
    """Linear warm-up steps from 0 to lr."""
    min_lr_ratio: float = 0.0
    """Final lr as a fraction of lr, for cosine and linear schedules."""
    grad_clip: float | None = None
    """Clip the global gradient norm to this value; None disables clipping."""
    eval_every: int = 500
    """Evaluate and append a line to metrics.jsonl every this many steps (and at the end)."""
    eval_samples: int = 2048
    """Sequences per evaluation."""
    save_every: int = 0
    """Write an intermediate checkpoint every this many steps (0: only the final one)."""
    frozen_until: tuple[tuple[str, int], ...] = ()
    """(parameter glob, step) pairs: matching parameters get no update before that step.

    For freezing experiments.
    """
    seed: int = 0
    """Seeds model init (seed), training data (seed + 1) and evaluation data (seed + 2)."""

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}")
        if self.steps < 0 or self.batch_size < 1 or self.eval_every < 1:
            raise ValueError("steps must be >= 0, batch_size and eval_every >= 1")


@dataclass(frozen=True)
class Preset:
    """A named run: model, task and training configs that belong together."""

    model: Any
    """Model config (any registered architecture)."""
    task: Any
    """Task config."""
    train: TrainConfig
    """Training config."""
    description: str = ""
    """What this preset is for (shown by `mechmem train --list`)."""
