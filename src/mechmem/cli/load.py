"""Loading what an analysis runs on: the checks of --out, the checkpoint or Hugging Face model, its task
modules, and the checks of the model against the flags, in an order that refuses bad input before any work."""

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from mechmem.cli.runner import claim_out
from mechmem.errors import MechmemError


def check_out_dir(path: str | os.PathLike, *, flag: str = "--out") -> Path:
    """Refuse an output directory that is empty text, names a file or cannot be written; creates nothing."""
    if not str(path).strip():
        raise MechmemError(f"{flag} is empty; name a folder (leave {flag} out for the default)")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MechmemError(f"{flag} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise MechmemError(f"{flag} {path}: {probe} is a file, not a directory")
    try:  # os.access alone is not enough (root, read-only file systems): try to create a file
        if not os.access(probe, os.W_OK | os.X_OK):
            raise PermissionError
        fd, tmp = tempfile.mkstemp(prefix=".mechmem-write-test.", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        reason = "permission denied on" if isinstance(exc, PermissionError) else "cannot create a file in"
        raise MechmemError(f"{flag} {path}: not writable ({reason} {probe})") from None
    return path


def load_for_analysis(args: argparse.Namespace, *, min_samples: int = 1) -> tuple[Any, Path]:
    """Check the flags, load task modules and the checkpoint named by CKPT (or the Hugging Face model named by
    --hf, exactly one of them); return it and the out dir.

    In this order: --n-samples >= `min_samples`, --out is usable, torch's threads (`mechmem.threads`), task
    modules import, the checkpoint loads
    and fits its task, --n-samples fits the memory budget. Only then is --out created.
    """
    n = getattr(args, "n_samples", None)
    if n is not None and n < min_samples:
        raise MechmemError(f"--n-samples must be at least {min_samples}, got {n}")
    if args.out is not None:
        check_out_dir(args.out)
    # torch is imported from here on, after every check the flags alone decide; then the device, at once
    from mechmem.config import resolve_device

    device = resolve_device(args.device)
    from mechmem.checkpoint import load_checkpoint
    from mechmem.models.checks import check_finite_weights, check_n_samples
    from mechmem.tasks import load_task_module
    from mechmem.threads import use_threads

    use_threads(getattr(args, "threads", None))
    for module in getattr(args, "task_module", None) or []:
        load_task_module(module)
    hf = getattr(args, "hf", None)
    if (args.ckpt is None) == (hf is None):
        raise MechmemError("give a checkpoint (CKPT) or --hf NAME_OR_PATH, not both or neither")
    if hf is None:
        ckpt = load_checkpoint(args.ckpt, device=device)
    else:
        from mechmem.pretrained import pretrained_checkpoint

        ckpt = pretrained_checkpoint(hf, device=device)
    out = check_out_dir(args.out) if args.out is not None else check_out_dir(ckpt.path.parent)
    if n is not None:
        check_n_samples(n, ckpt.model, minimum=min_samples)
    what = str(ckpt.path) if hf is None else f"--hf {hf}"  # the path of an --hf model names no real file
    check_finite_weights(ckpt.model, allow=getattr(args, "allow_nonfinite", False), what=what)
    return ckpt, claim_out(out)
