"""One training loop for every task: `train` (in `trainer.py`).

A paper plugs in what differs through its `Task` (batches, loss, metrics, evaluation) and its `TrainConfig`
(optimiser, schedule, held parameters via `frozen_until`, activations set while training via `interventions`,
`TrainIntervention`, `interventions.py`).
"""

from mechmem.config import Preset, TrainConfig, TrainIntervention
from mechmem.training.trainer import TrainResult, lr_at, resolve_device, train

__all__ = ["Preset", "TrainConfig", "TrainIntervention", "TrainResult", "lr_at", "resolve_device", "train"]
