"""Shared plumbing for the scripts in `analyses/`.

Every script has `def main(argv: list[str] | None = None) -> int` and ends with
`raise SystemExit(run_script(main))`. Errors a user can cause (`MechmemError`, including `CheckpointError`, and
command-line errors from `ArgumentParser`) become one `error: ...` line on stderr and exit status 2; the script
writes nothing. The contract, as helpers a script calls:

    parser = ArgumentParser(description=...)      # usage errors: one line, exit 2 (not argparse's usage block)
    add_analysis_args(parser)                      # CKPT, --out, --device, --seed, --n-samples, --task-module
    ckpt, out = load_for_analysis(args)            # checks --out, loads task modules, the checkpoint, the task
                                                   # against the model and --n-samples against memory, in order
    parser.add_argument("--memory-mb", type=positive_float)   # finite and > 0
    parser.add_argument("--seed", type=seed_int)               # in [0, 2**63)
    check_out_dir(path)                            # before any work: not a file, writable
    check_n_samples(n, model, minimum=2)           # bound from `estimate_mb_per_sequence` and MEMORY_BUDGET_MB
    write_json(path, obj)                          # strict JSON: NaN and +-inf are written as null

Strict JSON: every JSON file mechmem writes is valid JSON (RFC 8259); non-finite floats become `null`. The JSON
writers live in `mechmem.io` (below checkpoints and training, which write JSON too) and `one_line` in
`mechmem.errors`; both are re-exported here for the scripts.
"""

import argparse
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from mechmem.errors import MechmemError, one_line
from mechmem.io import dumps, strict_json, write_json

MEMORY_BUDGET_MB = 8192.0
"""Largest activation memory an analysis may plan for; --n-samples above the matching bound is refused."""


class UsageError(MechmemError):
    """A command-line error: unknown flag, missing argument, value of the wrong type or out of range."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: a usage error raises `UsageError` (one line, exit 2 under `run_script`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def run_script(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a script's `main`, turning user errors into one stderr line and exit status 2."""
    try:
        return int(main(argv) or 0)
    except MechmemError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


# -- argument types (argparse turns their ArgumentTypeError into "argument --x: ...") ------------------------
def seed_int(text: str) -> int:
    """A seed: an integer in [0, 2**63) (what torch.Generator.manual_seed accepts)."""
    value = _parse(int, text, "an integer")
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed {text} is outside [0, 2**63)")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _parse(int, text, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = _parse(int, text, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (nan, inf, 0 and negatives are refused)."""
    value = _parse(float, text, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


def _parse(kind: type, text: str, what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


# -- checks that run before any work ----------------------------------------------------------------------------
def check_out_dir(path: str | os.PathLike, *, flag: str = "--out") -> Path:
    """Refuse an output directory that names a file or cannot be created/written; creates nothing."""
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


def estimate_mb_per_sequence(model: Any) -> float:
    """Rough activation memory (MB, float32) of one sequence through `model` with a full cache.

    Counts per position: every layer's attention pattern and scores (2 n_heads n_ctx), residual, attention and MLP
    activations (6 d_model + 2 d_mlp), and the logits with their softmax (2 d_vocab_out).
    """
    cfg = getattr(model, "cfg", None)
    get = lambda name, default: int(getattr(cfg, name, None) or default)
    n_ctx, layers = get("n_ctx", 64), get("n_layers", 1)
    per_pos = layers * (2 * get("n_heads", 1) * n_ctx + 6 * get("d_model", 64) + 2 * get("d_mlp", 0))
    per_pos += 2 * get("d_vocab_out", get("d_vocab", 64))
    return n_ctx * per_pos * 4 / 2**20


def check_n_samples(
    n: int, model: Any, *, minimum: int = 1, budget_mb: float = MEMORY_BUDGET_MB, flag: str = "--n-samples"
) -> int:
    """Refuse `n` below `minimum` or above what `budget_mb` allows for `model` (the bound is in the message)."""
    if n < minimum:
        raise MechmemError(f"{flag} must be at least {minimum}, got {n}")
    per_seq = estimate_mb_per_sequence(model)
    bound = max(minimum, int(budget_mb / per_seq))
    if n > bound:
        raise MechmemError(
            f"{flag} {n} needs about {n * per_seq:.0f} MB for this model; the bound is {bound} "
            f"({budget_mb:.0f} MB at {per_seq * 1024:.1f} KB per sequence)"
        )
    return n


# -- loading ------------------------------------------------------------------------------------------------------
def add_analysis_args(parser: argparse.ArgumentParser, *, n_samples: int = 512) -> argparse.ArgumentParser:
    """The arguments every analysis script shares: CKPT, --out, --device, --seed, --n-samples, --task-module."""
    parser.add_argument(
        "ckpt",
        metavar="CKPT",
        nargs="?",
        default=None,
        help="checkpoint file (or a run directory holding ckpt.pt)",
    )
    add_hf_arg(parser)
    parser.add_argument("--out", default=None, help="output directory (default: beside the checkpoint)")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument(
        "--seed", type=seed_int, default=0, help="seed for sampled inputs, in [0, 2**63) (default: 0)"
    )
    parser.add_argument(
        "--n-samples",
        type=int,
        default=n_samples,
        help=f"number of sampled sequences (default: {n_samples}; bounded by a memory estimate)",
    )
    parser.add_argument(
        "--task-module",
        action="append",
        default=[],
        metavar="FILE",
        help="a Python file that registers your own task (with mechmem.tasks.register_task); repeatable",
    )
    return parser


def add_hf_arg(parser: argparse.ArgumentParser) -> None:
    """`--hf NAME_OR_PATH`: a Hugging Face model instead of a checkpoint (CKPT is then left out)."""
    parser.add_argument(
        "--hf",
        default=None,
        metavar="NAME_OR_PATH",
        help="analyse a Hugging Face causal LM (Hub name or save_pretrained folder) instead of CKPT",
    )


def load_source(args: argparse.Namespace, *, device: Any, load: Callable[..., Any]) -> Any:
    """The checkpoint named by CKPT, or the Hugging Face model named by --hf (exactly one of them)."""
    hf = getattr(args, "hf", None)
    if (args.ckpt is None) == (hf is None):
        raise MechmemError("give a checkpoint (CKPT) or --hf NAME_OR_PATH, not both or neither")
    if hf is None:
        return load(args.ckpt, device=device)
    from mechmem.models.pretrained import pretrained_checkpoint

    return pretrained_checkpoint(hf, device=device)


def load_for_analysis(args: argparse.Namespace, *, min_samples: int = 1) -> tuple[Any, Path]:
    """Check the flags, load task modules and the checkpoint named by `args.ckpt`; return it and the output dir.

    In this order, before any work: --n-samples >= `min_samples`, --out is usable, user task modules import, the
    checkpoint loads and its task fits its model, --n-samples fits the memory budget. Only then is --out created.
    """
    from mechmem.checkpoint import load_checkpoint
    from mechmem.tasks import load_task_module
    from mechmem.training.trainer import resolve_device

    n = getattr(args, "n_samples", None)
    if n is not None and n < min_samples:
        raise MechmemError(f"--n-samples must be at least {min_samples}, got {n}")
    if args.out:
        check_out_dir(args.out)
    for module in getattr(args, "task_module", None) or []:
        load_task_module(module)
    ckpt = load_source(args, device=resolve_device(args.device), load=load_checkpoint)
    out = check_out_dir(args.out) if args.out else check_out_dir(ckpt.path.parent)
    if n is not None:
        check_n_samples(n, ckpt.model, minimum=min_samples)
    out.mkdir(parents=True, exist_ok=True)
    return ckpt, out


# -- writing ------------------------------------------------------------------------------------------------------
def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> str:
    """A plain-text table with right-aligned numbers."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [
        max(len(str(h)), *(len(r[i]) for r in body)) if body else len(str(h)) for i, h in enumerate(headers)
    ]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line, sep, *("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body)])


def print_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> None:
    print(format_table(rows, headers, floatfmt=floatfmt))


__all__ = ["dumps", "one_line", "strict_json", "write_json"]  # re-exported: scripts use them through `cli`
