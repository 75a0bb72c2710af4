"""Self-describing checkpoints.

A checkpoint is a plain `torch.save` dict that loads with `torch.load(path, weights_only=True)`: no pickled
classes, only tensors, strings, numbers, lists and dicts. It carries everything needed to rebuild the run:

    format, format_version        "mechmem-checkpoint", 1
    mechmem_version, transformer_lens_version
    model_config                  the architecture's config dict (with its "arch" name)
    task_name, task_config        the task registry name and its config dict
    train_config                  the trainer's config dict
    metrics                       a summary (final evaluation, wall time, ...)
    state_dict                    the weights
    extra                         optional: trainer state for --resume (optimiser, RNG, step)
    digest                        SHA-256 over the configs and weights; a mismatch means the file was altered

`load_checkpoint` validates all of it and raises `CheckpointError` with a one-line reason. Writes go to a temporary
file in the same folder and are renamed into place, so an interrupted save never clobbers an existing file.
"""

import hashlib
import json
import os
import pickle
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import mechmem
from mechmem.errors import CheckpointError, MechmemError

FORMAT = "mechmem-checkpoint"
FORMAT_VERSION = 1
REQUIRED = (
    "format",
    "format_version",
    "mechmem_version",
    "transformer_lens_version",
    "model_config",
    "task_name",
    "task_config",
    "train_config",
    "metrics",
    "state_dict",
    "digest",
)
OPTIONAL = ("extra",)


def _digest(payload: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for key in ("model_config", "task_name", "task_config", "train_config"):
        h.update(json.dumps(payload[key], sort_keys=True).encode())
    for name in sorted(payload["state_dict"]):
        tensor = payload["state_dict"][name].detach().to("cpu").contiguous()
        h.update(name.encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(str(tensor.dtype).encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return h.hexdigest()


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save` to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_checkpoint(
    path: str | os.PathLike,
    *,
    model: torch.nn.Module,
    model_config: Any,
    task_name: str,
    task_config: Any,
    train_config: Any = None,
    metrics: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically. Configs may be config dataclasses or plain dicts."""

    def as_dict(cfg: Any) -> dict[str, Any]:
        if cfg is None:
            return {}
        return cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)

    payload: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "mechmem_version": mechmem.__version__,
        "transformer_lens_version": _tl_version(),
        "model_config": as_dict(model_config),
        "task_name": task_name,
        "task_config": as_dict(task_config),
        "train_config": as_dict(train_config),
        "metrics": json.loads(json.dumps(metrics or {})),
        "state_dict": {k: v.detach().to("cpu").clone() for k, v in model.state_dict().items()},
    }
    payload["digest"] = _digest(payload)
    if extra:
        payload["extra"] = extra
    atomic_torch_save(payload, path)
    return Path(path)


def _tl_version() -> str:
    from mechmem.models.adapter import TL_VERSION

    return TL_VERSION


@dataclass
class Checkpoint:
    """A loaded checkpoint: the rebuilt model plus everything needed to rebuild the run."""

    model: torch.nn.Module
    model_config: Any
    task_name: str
    task_config: dict[str, Any]
    train: dict[str, Any]
    metrics: dict[str, Any]
    path: Path
    versions: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> Any:
        """The task rebuilt from the checkpoint's task name and config."""
        from mechmem.tasks import build_task

        return build_task(self.task_name, self.task_config)


def read_payload(path: str | os.PathLike) -> dict[str, Any]:
    """Load and validate the raw dict of a checkpoint file without building the model."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    if path.is_dir():
        candidate = path / "ckpt.pt"
        if not candidate.exists():
            raise CheckpointError(f"{path}: is a directory without ckpt.pt")
        path = candidate
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: file is empty")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unsafe content"
        raise CheckpointError(f"{path}: refused to load (not a plain-data checkpoint: {first[:120]})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        reason = "truncated or corrupt" if "zip" in str(exc).lower() or isinstance(exc, EOFError) else "unreadable"
        raise CheckpointError(f"{path}: not a readable checkpoint ({reason})") from None
    except Exception as exc:  # any other unpickling failure is a bad file, not a crash
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a mechmem checkpoint")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported (this mechmem reads {FORMAT_VERSION})"
        )
    missing = [k for k in REQUIRED if k not in payload]
    if missing:
        raise CheckpointError(f"{path}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(payload) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise CheckpointError(f"{path}: unknown field(s) {', '.join(unknown)}")
    state = payload["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path}: state_dict is not a mapping of tensors")
    if _digest(payload) != payload["digest"]:
        raise CheckpointError(f"{path}: digest mismatch (the file was modified after it was written)")
    return payload


def load_checkpoint(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint safely (never executes pickled code) and rebuild its model on `device`."""
    from mechmem.models.registry import build_model, model_config_from_dict

    path = Path(path)
    payload = read_payload(path)
    if path.is_dir():
        path = path / "ckpt.pt"
    try:
        model_config = model_config_from_dict(payload["model_config"])
        model = build_model(model_config, generator=torch.Generator().manual_seed(0))
    except MechmemError as exc:
        raise CheckpointError(f"{path}: bad model config ({exc})") from None
    expected = model.state_dict()
    state = payload["state_dict"]
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        what = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise CheckpointError(f"{path}: weights do not match the model config ({what})")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(
                f"{path}: {name} has shape {tuple(tensor.shape)}, config expects {tuple(expected[name].shape)}"
            )
    model.load_state_dict(state)
    from mechmem.models.adapter import move_model

    move_model(model, device)
    model.eval()
    from mechmem.tasks import task_names

    if payload["task_name"] not in task_names():
        raise CheckpointError(f"{path}: unknown task {payload['task_name']!r}")
    return Checkpoint(
        model=model,
        model_config=model_config,
        task_name=payload["task_name"],
        task_config=payload["task_config"],
        train=payload["train_config"],
        metrics=payload["metrics"],
        path=path,
        versions={
            "mechmem": payload["mechmem_version"],
            "transformer_lens": payload["transformer_lens_version"],
        },
        extra=payload.get("extra", {}),
    )
