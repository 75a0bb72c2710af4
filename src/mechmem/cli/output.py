"""Writing a command's outputs: figures as PNG, every file of a run staged and renamed together, the record
of an analysis that does not apply, and the run of one analysis command (parse, load, write)."""

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mechmem.cli.args import ArgumentParser
from mechmem.cli.load import load_for_analysis
from mechmem.io import OutputSet, atomic_write, dumps


def figure_png(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes (and closed)."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG atomically and close it."""
    return atomic_write(path, figure_png(fig))


def write_outputs(out: str | os.PathLike, files: dict[str, Any]) -> list[Path]:
    """Write a script's outputs into `out` together (`mechmem.io.OutputSet`): a value whose name ends in .png
    is a matplotlib figure, any other is written as strict JSON."""
    with OutputSet(out) as staged:
        stage_outputs(staged, files)
    return [Path(out) / name for name in files]


def stage_outputs(staged: OutputSet, files: dict[str, Any], folder: str = "") -> list[str]:
    """Stage `files` (name -> figure or JSON value) in `staged`, under `folder`/ when given; returns the
    staged names."""
    names = []
    for name, value in files.items():
        names.append(f"{folder}/{name}" if folder else name)
        staged.add(names[-1], figure_png(value) if name.endswith(".png") else dumps(value, indent=2) + "\n")
    return names


def skipped(reason: str, name: str, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """An analysis that does not apply: print `skipped: REASON` and return its one output file, `name`, as
    `{"skipped": REASON, ...record}`."""
    print(f"skipped: {reason}")
    return {name: {"skipped": reason, **(record or {})}}


def run_analysis(
    parser: ArgumentParser,
    outputs: Callable[[Any, argparse.Namespace], dict[str, Any]],
    argv: list[str] | None,
    *,
    min_samples: int = 1,
) -> int:
    """An analysis command's `main`: parse `argv`, load the checkpoint (`load_for_analysis`), run `outputs`
    and write its files together."""
    args = parser.parse_args(argv)
    ckpt, out = load_for_analysis(args, min_samples=min_samples)  # torch is imported from here on
    files = outputs(ckpt, args)
    write_outputs(out, files)
    print(f"wrote {', '.join(sorted(files))} in {out}")
    return 0
