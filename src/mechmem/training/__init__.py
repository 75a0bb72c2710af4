"""One training loop for every task: `train` (in `trainer.py`).

A paper plugs in what differs through its `Task` (batches, loss, metrics, evaluation) and its `TrainConfig`
(optimiser, schedule, held parameters via `frozen_until`, activations set while training via `interventions`,
`TrainIntervention`, `interventions.py`).
"""

from typing import Any

from mechmem.config import Preset, TrainConfig, TrainIntervention, resolve_device

TRAINER_NAMES = ("TrainResult", "lr_at", "train")
"""Names of `trainer.py` (torch and TransformerLens), imported on first use: `mechmem.training.timings` (the
preset list, without torch) lives in this package too."""


def __getattr__(name: str) -> Any:
    if name in TRAINER_NAMES:
        from mechmem.training import trainer

        globals()[name] = value = getattr(trainer, name)
        return value
    raise AttributeError(f"module 'mechmem.training' has no attribute {name!r}")


__all__ = ["Preset", "TrainConfig", "TrainIntervention", "TrainResult", "lr_at", "resolve_device", "train"]
