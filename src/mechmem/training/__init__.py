"""One training loop for every task: `train` (in `trainer.py`).

Every model that learns from a task's stream of batches trains here, whichever paper it belongs to (the
permutation runs, every birth experiment, the demo, `mechmem train`): a paper plugs in what differs
through its `Task` (batches, loss, metrics, evaluation) and its `TrainConfig` (optimiser, schedule, held
parameters via `frozen_until`), never through a loop of its own.

Two trainers of the memorisation paper are different algorithms, not copies of this loop, and stay in the
paper (`mechmem_papers.memorisation`): `batched` trains many initialisations as ONE stacked tensor on a fixed
fact set (full batch, per-init early stopping, learning-rate phases and restarts, a fused hand-written
gradient), with `train_reference` the published per-init loop it is tested against; `constructions.training`
trains stacked challenge models full batch with per-model patience. Neither draws batches from a task or steps
on a budget.
"""

from mechmem.config import Preset, TrainConfig
from mechmem.training.trainer import TrainResult, lr_at, resolve_device, train

__all__ = ["Preset", "TrainConfig", "TrainResult", "lr_at", "resolve_device", "train"]
