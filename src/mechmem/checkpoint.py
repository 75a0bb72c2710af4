"""Self-describing checkpoints.

A checkpoint is a plain `torch.save` dict that loads with `torch.load(path, weights_only=True)`: no pickled
classes, only tensors, strings, numbers, lists and dicts. It carries everything needed to rebuild the run:

    format, format_version        "mechmem-checkpoint", 3
    mechmem_version, transformer_lens_version
    model_config                  the architecture's config dict (with its "arch" name)
    task_name, task_config        the task registry name and its config dict (always explicit, never {})
    train_config                  the trainer's config dict
    metrics                       a summary (final evaluation, wall time, ...); strict JSON (NaN -> None)
    state_dict                    the weights
    token_names                   the name of every token id (the task's `token_names`, else the id), which
                                  the loaded model's tokenizer reads (`mechmem.models.tokenizer`)
    extra                         optional: trainer state for --resume (optimiser, RNG, step), or
                                  "task_attached": `save_model`'s note when it attached the generic task
    digest                        SHA-256 over every other field; a mismatch means the file was altered

Version 1 files (digest over configs and weights only), version 2 files (no token names: they are derived
from the task) and files carrying HookedTransformer's buffers still load. `load_checkpoint` raises
`CheckpointError` with a one-line reason; writes are atomic.
"""

import hashlib
import io
import json
import os
import pickle
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mechmem.config import config_dict
from mechmem.errors import CheckpointError, MechmemError
from mechmem.io import atomic_write
from mechmem.models.checks import check_device, check_model, check_path
from mechmem.version import __version__

FORMAT = "mechmem-checkpoint"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
REQUIRED = (
    "format", "format_version", "mechmem_version", "transformer_lens_version", "model_config", "task_name",
    "task_config", "train_config", "metrics", "state_dict", "digest",
)  # fmt: skip
OPTIONAL = ("extra", "token_names")

MAX_FILE_BYTES = 16 * 2**30
"""Largest checkpoint file read (16 GiB); checked before the file is opened."""
LIMITS: dict[str, tuple[int, int]] = {
    "model_config": (4, 1_000),
    "task_config": (4, 1_000),
    "train_config": (4, 1_000),
    "metrics": (8, 100_000),
    "state_dict": (2, 100_000),
    "extra": (12, 1_000_000),
    "token_names": (1, 10_000_000),
}
"""Per field: (deepest nesting of lists/dicts, most elements over every level), checked before hashing."""
MAX_SCALAR_FIELD = 10_000
"""Longest string in the scalar fields (format, versions, task name, digest)."""


def _check_bounds(path: Path, payload: dict[str, Any], file_bytes: int) -> None:
    """Raise `CheckpointError` when a field nests deeper or holds more elements than `LIMITS` allows, or a
    tensor claims more bytes than its storage holds. The walk stops at the first limit passed."""
    tensor_bytes = 0
    for name, value in payload.items():
        if name not in LIMITS:
            if isinstance(value, str) and len(value) > MAX_SCALAR_FIELD:
                raise CheckpointError(f"{path}: field {name} is longer than {MAX_SCALAR_FIELD} characters")
            if not isinstance(value, (str, int, float, bool, type(None))):
                raise CheckpointError(
                    f"{path}: field {name} must be a plain value, got {type(value).__name__}"
                )
            continue
        max_depth, max_items = LIMITS[name]
        count = 0
        stack: list[tuple[Any, int]] = [(value, 0)]
        while stack:
            item, depth = stack.pop()
            count += 1
            if count > max_items:
                raise CheckpointError(
                    f"{path}: field {name} holds more than {max_items} elements (the limit for {name})"
                )
            if isinstance(item, torch.Tensor):
                if item.layout != torch.strided:
                    raise CheckpointError(f"{path}: a tensor in {name} is {item.layout}, not a dense tensor")
                need = item.numel() * item.element_size()
                if need > item.untyped_storage().nbytes():
                    raise CheckpointError(
                        f"{path}: a tensor in {name} claims {need} bytes but its storage holds "
                        f"{item.untyped_storage().nbytes()}"
                    )
                tensor_bytes += need
                continue
            if isinstance(item, str) and len(item) > max_items:
                raise CheckpointError(f"{path}: a string in {name} is longer than {max_items} characters")
            if not isinstance(item, (dict, list, tuple)):
                continue
            if depth >= max_depth:
                raise CheckpointError(
                    f"{path}: field {name} nests deeper than {max_depth} levels (the limit for {name})"
                )
            children = list(item.keys()) + list(item.values()) if isinstance(item, dict) else item
            if len(children) > max_items:
                raise CheckpointError(
                    f"{path}: field {name} holds more than {max_items} elements (the limit for {name})"
                )
            stack.extend((child, depth + 1) for child in children)
    if tensor_bytes > 2 * file_bytes + 2**20:
        raise CheckpointError(
            f"{path}: its tensors claim {tensor_bytes} bytes, more than twice the file's {file_bytes} bytes"
        )


WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""The dtypes a weight may have; integer, bool or complex weights are refused, never cast."""


def _check_state_dict(path: Path, state: Any) -> None:
    """Raise `CheckpointError` unless `state` maps weight names to floating-point tensors (buffers exempt)."""
    from mechmem.models.layout import BUFFER_SUFFIXES

    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: state_dict is not a mapping of tensors")
    for name, tensor in state.items():
        if not isinstance(name, str):
            raise CheckpointError(f"{path}: state_dict has a key {name!r} that is not a weight name")
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{path}: state_dict[{name!r}] is not a tensor")
        if tensor.dtype not in WEIGHT_DTYPES and not name.endswith(BUFFER_SUFFIXES):
            raise CheckpointError(
                f"{path}: weight {name} is {str(tensor.dtype).removeprefix('torch.')}, not floating point "
                "(refused rather than cast)"
            )


STORED_SIZES = (
    "n_layers", "d_model", "n_heads", "d_vocab", "d_head", "d_mlp", "d_vocab_out", "n_key_value_heads",
    "rotary_dim", "window_size",
)  # fmt: skip
"""Model-config sizes that cannot exceed the number of stored weight elements."""


def _check_sizes_fit_weights(path: Path, model_config: Any, state: dict[str, torch.Tensor]) -> None:
    """Refuse a config size larger than all the numbers the file stores, before any model is built."""
    if not isinstance(model_config, dict):
        return
    stored = sum(t.numel() for t in state.values())
    for name in STORED_SIZES:
        value = model_config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > stored:
            raise CheckpointError(
                f"{path}: model config declares {name} {value}, more than the {stored} numbers its weights "
                "hold"
            )


MAX_BUFFER_BYTES = 2**30
"""Most bytes a checkpoint's model may allocate beyond its stored weights (masks, rotary tables: 1 GiB)."""


def _weights_mismatch(expected: dict[str, torch.Tensor], state: dict[str, torch.Tensor]) -> str | None:
    """Why `state` lacks the weight names and shapes of `expected` (what the config builds), or None."""
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        what = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        return f"weights do not match the model config ({what})"
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            return f"{name} has shape {tuple(tensor.shape)}, config expects {tuple(expected[name].shape)}"
    return None


def check_declared_sizes(path: Path, skeleton: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Raise `CheckpointError` unless `state` has the weight shapes of `skeleton` (a meta-device model) and
    its buffers take at most `MAX_BUFFER_BYTES`."""
    from mechmem.models.weights import canonical_state_dict

    problem = _weights_mismatch(canonical_state_dict(skeleton), state)
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    buffers = sum(b.numel() * b.element_size() for b in skeleton.buffers())
    if buffers > MAX_BUFFER_BYTES:
        raise CheckpointError(
            f"{path}: its model config declares {buffers} bytes of buffers (attention masks, rotary tables), "
            f"more than {MAX_BUFFER_BYTES}; n_ctx is probably too large"
        )


def check_buffers(path: Path, model_config: Any, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` without its HookedTransformer buffers, each checked (`layout.buffer_problem`); raises
    `CheckpointError` naming the first bad one."""
    from mechmem.models.layout import BUFFER_SUFFIXES, buffer_problem, canonical_weights
    from mechmem.models.transformer_config import TransformerConfig

    if not isinstance(model_config, TransformerConfig):
        return state
    for name, tensor in state.items():
        problem = buffer_problem(name, tensor, model_config) if name.endswith(BUFFER_SUFFIXES) else None
        if problem:
            raise CheckpointError(f"{path}: buffer {name} {problem}")
    return canonical_weights(state)


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    t = tensor.detach().to("cpu").contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _feed(h: Any, obj: Any) -> None:
    """Hash any plain-data value: tensors by dtype, shape and bytes; containers in a fixed key order."""
    if isinstance(obj, torch.Tensor):
        h.update(f"T{obj.dtype}{tuple(obj.shape)}".encode())
        h.update(_tensor_bytes(obj))
    elif isinstance(obj, dict):
        h.update(f"D{len(obj)}".encode())
        for key in sorted(obj, key=repr):
            h.update(repr(key).encode())
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)):
        h.update(f"L{len(obj)}".encode())
        for item in obj:
            _feed(h, item)
    else:
        h.update(f"V{json.dumps(obj)}".encode())


def payload_digest(payload: dict[str, Any]) -> str:
    """SHA-256 over every field but the digest (format version 1: configs and weights only)."""
    h = hashlib.sha256()
    if payload.get("format_version") != 1:
        _feed(h, {k: v for k, v in payload.items() if k != "digest"})
        return h.hexdigest()
    for key in ("model_config", "task_name", "task_config", "train_config"):
        h.update(json.dumps(payload[key], sort_keys=True).encode())
    for name, tensor in sorted(payload["state_dict"].items()):
        h.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        h.update(_tensor_bytes(tensor))
    return h.hexdigest()


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """`torch.save` to a temporary file beside `path`, then renamed into place (`mechmem.io.atomic_write`).

    torch.save writes into memory first: its zip writer, when an interrupt skips its finalisation, finishes
    the archive later from its destructor, which must find its stream still open (a closed file aborts the
    process)."""

    def write(fh: Any) -> None:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        fh.write(buffer.getbuffer())

    atomic_write(path, writer=write)


def _logits_gap(got: torch.nn.Module, want: torch.nn.Module, seed: int) -> float | None:
    """The largest difference of two models' logits on a random probe input, where it passes 1e-4 of their
    scale (`want`'s, at least 1)."""
    cfg = got.cfg
    probe = torch.randint(cfg.d_vocab, (2, cfg.n_ctx), generator=torch.Generator().manual_seed(seed))
    logits = []
    for model in (got, want):
        was_training = model.training
        model.eval()
        with torch.no_grad():
            device = next(iter(model.parameters()), torch.empty(0)).device
            logits.append(model(probe.to(device)).float().cpu())
        model.train(was_training)
    gap = float((logits[0] - logits[1]).abs().max())
    return None if gap <= 1e-4 * max(1.0, float(logits[1].abs().max())) else gap


def check_model_matches_config(model: torch.nn.Module, model_config: Any) -> None:
    """Raise `MechmemError` unless `model_config` rebuilds `model`: same weight names and shapes, and logits
    within 1e-4 (relative to their scale) on a probe input."""
    from mechmem.models.registry import build_model
    from mechmem.models.transformer_config import config_differences
    from mechmem.models.weights import canonical_state_dict, load_canonical_state_dict

    if getattr(model, "mechmem_config", None) == model_config:
        return
    differences = config_differences(model, model_config)
    if differences:
        raise MechmemError(f"the model does not match model_config: {'; '.join(differences)}")
    reference = build_model(model_config, generator=torch.Generator().manual_seed(0))
    theirs = canonical_state_dict(model)
    problem = _weights_mismatch(canonical_state_dict(reference), theirs)
    if problem:
        raise MechmemError(f"the model's {problem}")
    cfg = getattr(model, "cfg", None)
    if not (isinstance(getattr(cfg, "d_vocab", None), int) and isinstance(getattr(cfg, "n_ctx", None), int)):
        return
    load_canonical_state_dict(reference, {k: v.detach().to("cpu") for k, v in theirs.items()})
    gap = _logits_gap(model, reference, seed=0)
    if gap is not None:
        raise MechmemError(
            f"the model does not match model_config: rebuilt from the config it gives other logits "
            f"(max |dlogit| {gap:.3g} on a probe input)"
        )


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
    """Write a checkpoint atomically, after checking the model against its config and the task against it.

    Configs may be dataclasses or dicts; `task_config=None` stores the task's default. Raises `MechmemError`.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> path = mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")
        >>> ckpt = mechmem.load_checkpoint(path)
        >>> copy = mechmem.save_checkpoint(
        ...     folder / "copy.pt", model=ckpt.model, model_config=ckpt.model_config,
        ...     task_name=ckpt.task_name, task_config=ckpt.task_config)
        >>> mechmem.load_checkpoint(copy).task_name
        'repeats'
    """
    from mechmem.io import strict_json
    from mechmem.models.backend import TL_VERSION
    from mechmem.models.tokenizer import vocabulary_names
    from mechmem.models.transformer_config import bridge_unsupported
    from mechmem.models.weights import canonical_state_dict
    from mechmem.tasks import build_task, get_task_class

    check_model(model, cfg=False)  # the facts models are HookedRootModules without a TransformerLens cfg
    check_path(path)
    if isinstance(model_config, dict):
        from mechmem.models.registry import model_config_from_dict

        model_config = model_config_from_dict(model_config)
    check_model_matches_config(model, model_config)
    refusal = bridge_unsupported(model_config)
    if refusal:  # written by TransformerLens 3.9, which computes it; TransformerLens 4 refuses to load it
        warnings.warn(refusal, stacklevel=2)
    get_task_class(task_name).check_config_fits(task_config, model)
    task = build_task(task_name, task_config)
    task.check_model(model)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "mechmem_version": __version__,
        "transformer_lens_version": TL_VERSION,
        "model_config": config_dict(model_config),
        "task_name": task_name,
        "task_config": config_dict(task.config),
        "train_config": config_dict(train_config),
        "metrics": strict_json(json.loads(json.dumps(metrics or {}))),
        "state_dict": {k: v.detach().to("cpu").clone() for k, v in canonical_state_dict(model).items()},
    }
    if extra:
        payload["extra"] = extra
    d_vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    try:
        names = vocabulary_names(task.token_names(), d_vocab if isinstance(d_vocab, int) else task.d_vocab)
    except ValueError as exc:
        raise MechmemError(f"task {task_name!r}: {exc}") from None
    payload["token_names"] = names
    payload["digest"] = payload_digest(payload)
    atomic_torch_save(payload, path)
    return Path(path)


@dataclass
class Checkpoint:
    """A loaded checkpoint: the rebuilt model plus everything needed to rebuild the run.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> path = mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")
        >>> ckpt = mechmem.load_checkpoint(path)
        >>> ckpt.task_name, ckpt.model.cfg.n_layers, ckpt.task.config.half
        ('repeats', 2, 11)
    """

    model: torch.nn.Module
    model_config: Any
    task_name: str
    task_config: dict[str, Any]
    train: dict[str, Any]
    metrics: dict[str, Any]
    path: Path
    versions: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    token_names: list[str] | None = None
    """The name of every token id the model's tokenizer uses (`model.to_str_tokens`); None for a model
    without a TransformerLens vocabulary."""

    @property
    def task(self) -> Any:
        """The task rebuilt from the checkpoint's task name and config."""
        from mechmem.tasks import build_task

        return build_task(self.task_name, self.task_config)


def read_torch_file(path: Path, max_bytes: int = MAX_FILE_BYTES) -> tuple[Any, int]:
    """The object at `path` loaded with `weights_only=True`, and the file's size; raises `CheckpointError`."""
    if not path.exists():
        raise CheckpointError(f"{path}: no such file")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{path}: file is empty")
    if size > max_bytes:
        raise CheckpointError(f"{path}: {size} bytes, more than the {max_bytes} a checkpoint may have")
    with open(path, "rb") as fh:
        head = fh.read(4)
    if not head.startswith((b"PK\x03\x04", b"\x80")):  # a zip archive (torch.save) or a legacy pickle
        raise CheckpointError(
            f"{path}: not a readable checkpoint (not a file torch.save writes; it begins {head!r})"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True), size
    except pickle.UnpicklingError:
        raise CheckpointError(
            f"{path}: not a mechmem checkpoint "
            "(it holds pickled Python objects, which a checkpoint never does; "
            "refused without running them)"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        reason = (
            "truncated or corrupt" if "zip" in str(exc).lower() or isinstance(exc, EOFError) else "unreadable"
        )
        raise CheckpointError(f"{path}: not a readable checkpoint ({reason})") from None
    except Exception as exc:  # noqa: BLE001 - any other unpickling failure is a bad file, not a crash
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(exc).__name__})") from None


def read_payload(path: str | os.PathLike) -> dict[str, Any]:
    """Load and validate the raw dict of a checkpoint file without building the model."""
    path = Path(path)
    if path.is_dir():
        candidate = path / "ckpt.pt"
        if not candidate.exists():
            raise CheckpointError(f"{path}: is a directory without ckpt.pt")
        path = candidate
    payload, size = read_torch_file(path)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a mechmem checkpoint (no 'format': {FORMAT!r} field)")
    version = payload.get("format_version")
    if version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported "
            f"(this mechmem reads {READABLE_VERSIONS})"
        )
    missing = [k for k in REQUIRED if k not in payload]
    if missing:
        raise CheckpointError(f"{path}: missing field(s) {', '.join(missing)}")
    unknown = sorted(set(payload) - set(REQUIRED) - set(OPTIONAL), key=repr)
    if unknown:
        raise CheckpointError(f"{path}: unknown field(s) {', '.join(map(str, unknown[:5]))}")
    _check_bounds(path, payload, size)
    _check_state_dict(path, payload["state_dict"])
    try:
        digest = payload_digest(payload)
    except (TypeError, ValueError, AttributeError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: malformed fields ({type(exc).__name__}: {exc})") from None
    if digest != payload["digest"]:
        raise CheckpointError(f"{path}: digest mismatch (the file was modified after it was written)")
    return payload


def load_checkpoint(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> Checkpoint:
    """Load a checkpoint safely (never executes pickled code) and rebuild its model on `device`.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> path = mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")
        >>> ckpt = mechmem.load_checkpoint(path)      # never unpickles code; digest checked
        >>> type(ckpt).__name__, ckpt.path.name
        ('Checkpoint', 'ckpt.pt')
    """
    from mechmem.errors import one_line
    from mechmem.models.backend import BACKEND, is_transformer_lens_model, move_model
    from mechmem.models.registry import build_model, model_config_from_dict
    from mechmem.models.tokenizer import attach_tokenizer, vocabulary_names
    from mechmem.models.transformer_config import bridge_unsupported
    from mechmem.models.weights import load_canonical_state_dict
    from mechmem.tasks import build_task, get_task_class

    check_path(path)
    check_device(device)
    path = Path(path)
    payload = read_payload(path)
    if path.is_dir():
        path = path / "ckpt.pt"
    _check_sizes_fit_weights(path, payload["model_config"], payload["state_dict"])
    try:
        model_config = model_config_from_dict(payload["model_config"])
    except Exception as exc:  # noqa: BLE001 - a config that passes the digest but builds no model: bad file
        raise CheckpointError(f"{path}: bad model config ({one_line(exc)})") from None
    state = check_buffers(path, model_config, payload["state_dict"])
    refusal = bridge_unsupported(model_config) if BACKEND == "bridge" else None
    if refusal:
        raise CheckpointError(f"{path}: {refusal}")
    try:
        with torch.device("meta"):
            skeleton = build_model(model_config, generator=torch.Generator().manual_seed(0))
    except Exception:  # noqa: BLE001 - the real build below reports a bad config; this is only a first look
        skeleton = None
    if skeleton is not None:  # shapes only: the declared sizes are checked before anything is allocated
        check_declared_sizes(path, skeleton, state)
    else:  # the causal masks take n_ctx**2 bytes a layer
        n_ctx, layers = payload["model_config"].get("n_ctx"), payload["model_config"].get("n_layers")
        if isinstance(n_ctx, int) and isinstance(layers, int) and n_ctx * n_ctx * layers > MAX_BUFFER_BYTES:
            raise CheckpointError(
                f"{path}: its model config declares n_ctx {n_ctx}, whose attention masks would take more "
                f"than {MAX_BUFFER_BYTES} bytes"
            )
    try:
        model = build_model(model_config, generator=torch.Generator().manual_seed(0))
    except Exception as exc:  # noqa: BLE001 - as above
        raise CheckpointError(f"{path}: bad model config ({one_line(exc)})") from None
    if skeleton is None:
        check_declared_sizes(path, model, state)
    del skeleton
    try:
        load_canonical_state_dict(model, state)
    except MechmemError as exc:
        raise CheckpointError(f"{path}: {one_line(exc)}") from None
    try:  # the config is checked against the model before the task is built: building may allocate a lot
        get_task_class(payload["task_name"]).check_config_fits(payload["task_config"] or None, model)
        task = build_task(payload["task_name"], payload["task_config"] or None)
        task.check_model(model)
    except MechmemError as exc:
        raise CheckpointError(f"{path}: {one_line(exc)}") from None
    except (TypeError, ValueError, RuntimeError, MemoryError) as exc:
        raise CheckpointError(f"{path}: bad task config ({one_line(exc)})") from None
    names = None
    if is_transformer_lens_model(model):  # files before format 3 carry none: the task names them
        try:
            names = vocabulary_names(payload.get("token_names") or task.token_names(), model.cfg.d_vocab)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: bad token names ({one_line(exc)})") from None
        attach_tokenizer(model, names)
    move_model(model, device)
    model.eval()
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
        token_names=names,
    )


def save_model(
    model: torch.nn.Module,
    path: str | os.PathLike,
    *,
    task_name: str | None = None,
    task_config: Any = None,
    metrics: dict[str, Any] | None = None,
) -> Path:
    """Turn a TransformerLens model (weights + cfg) into a mechmem checkpoint at `path`.

    Without `task_name` the generic "repeats" task is attached with a `UserWarning`, kept as
    `extra["task_attached"]`. The reloaded checkpoint must give the model's logits, else the file is removed
    and `MechmemError` raised. Returns the checkpoint's path.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> path = mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")
        >>> path.name, mechmem.load_checkpoint(path).task_name
        ('ckpt.pt', 'repeats')
    """
    from mechmem.models.transformer_config import config_from_hooked_transformer
    from mechmem.tasks.generic import RepeatsConfig

    check_model(model)
    check_path(path)
    config = config_from_hooked_transformer(model)
    attached = None
    if task_name is None:
        task_name = "repeats"
        attached = (
            "no task given: attached the generic repeats task (random sequences [r, r] over the model's "
            "vocabulary); every analysis reads the model on those, which are its own data only if it was "
            "trained on repeats (the prompt-fit check flags them where the model is no better than a uniform "
            "guess); pass task_name and task_config for the model's own task"
        )
        warnings.warn(attached, UserWarning, stacklevel=2)
    if task_config is None and task_name == "repeats":
        task_config = RepeatsConfig.for_model(model)
    path = save_checkpoint(
        Path(path),
        model=model,
        model_config=config,
        task_name=task_name,
        task_config=task_config,
        metrics=metrics,
        extra={"task_attached": attached} if attached else None,
    )
    gap = _logits_gap(load_checkpoint(path).model, model, seed=1)
    if gap is not None:
        path.unlink(missing_ok=True)
        raise MechmemError(
            f"the reloaded checkpoint gives other logits (max |dlogit| {gap:.3g}); nothing saved"
        )
    return path


save_hooked_transformer = save_model
"""Alias of `save_model`."""
