"""One training loop for every task."""

from mechmem.training.config import Preset, TrainConfig
from mechmem.training.trainer import TrainResult, lr_at, resolve_device, train

__all__ = ["Preset", "TrainConfig", "TrainResult", "lr_at", "resolve_device", "train"]
