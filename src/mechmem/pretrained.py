"""A Hugging Face model as an in-memory checkpoint, so every checkpoint script takes `--hf NAME_OR_PATH`.

Its task is the generic `repeats` task sized to the model (`RepeatsConfig.for_model`); a script's default
output folder is NAME-mechmem in the working directory.
"""

from pathlib import Path

import torch

from mechmem.checkpoint import Checkpoint
from mechmem.models.backend import TL_VERSION
from mechmem.models.huggingface import load_pretrained
from mechmem.tasks.generic import RepeatsConfig


def pretrained_checkpoint(name_or_path: str, *, device: str | torch.device = "cpu") -> Checkpoint:
    """`load_pretrained(name_or_path)` with the generic task, as a `Checkpoint` (its path names the model)."""
    model = load_pretrained(name_or_path, device=device)
    task_config = RepeatsConfig.for_model(model)
    folder = Path.cwd() / (Path(name_or_path.rstrip("/")).name + "-mechmem")
    return Checkpoint(
        model=model,
        model_config=None,
        task_name="repeats",
        task_config=task_config.to_dict(),
        train={},
        metrics={},
        path=folder / "hf",
        versions={"mechmem": "", "transformer_lens": TL_VERSION},
    )
