"""Shared plumbing for the scripts in `analyses/`.

Every script has `def main(argv: list[str] | None = None) -> int` and ends with
`raise SystemExit(run_script(main))`. Errors a user can cause (`MechmemError`, including `CheckpointError`) become
one `error: ...` line on stderr and exit status 2; argparse's own usage errors also exit 2.
"""

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError


def run_script(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a script's `main`, turning user errors into one stderr line and exit status 2."""
    try:
        return int(main(argv) or 0)
    except MechmemError as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def add_analysis_args(parser: argparse.ArgumentParser, *, n_samples: int = 512) -> argparse.ArgumentParser:
    """The arguments every analysis script shares: CKPT, --out, --device, --seed, --n-samples."""
    parser.add_argument("ckpt", metavar="CKPT", help="checkpoint file (or a run directory holding ckpt.pt)")
    parser.add_argument("--out", default=None, help="output directory (default: beside the checkpoint)")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument("--seed", type=int, default=0, help="seed for sampled inputs (default: 0)")
    parser.add_argument(
        "--n-samples", type=int, default=n_samples, help=f"number of sampled sequences (default: {n_samples})"
    )
    return parser


def load_for_analysis(args: argparse.Namespace) -> tuple[Any, Path]:
    """Load the checkpoint named by `args.ckpt` onto `args.device`; return it and the output directory."""
    from mechmem.checkpoint import load_checkpoint
    from mechmem.training.trainer import resolve_device

    if getattr(args, "n_samples", 1) is not None and getattr(args, "n_samples", 1) < 1:
        raise MechmemError("--n-samples must be at least 1")
    ckpt = load_checkpoint(args.ckpt, device=resolve_device(args.device))
    out = Path(args.out) if args.out else ckpt.path.parent
    out.mkdir(parents=True, exist_ok=True)
    return ckpt, out


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write JSON atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
    widths = [max(len(str(h)), *(len(r[i]) for r in body)) if body else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line, sep, *("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body)])


def print_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> None:
    print(format_table(rows, headers, floatfmt=floatfmt))
