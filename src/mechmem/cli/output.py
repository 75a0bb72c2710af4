"""Writing a command's outputs: figures as PNG, every file of a run staged and renamed together, the record
of an analysis that does not apply, and the `main` of an analysis command (parse, load, write)."""

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mechmem.cli.args import ArgumentParser
from mechmem.cli.load import load_for_analysis
from mechmem.io import OutputSet, dumps


def write_outputs(out: str | os.PathLike, files: dict[str, Any]) -> list[Path]:
    """Write a script's outputs into `out` together (`mechmem.io.OutputSet`): a value whose name ends in .png
    is a matplotlib figure, any other is written as strict JSON."""
    with OutputSet(out) as staged:
        stage_outputs(staged, files)
    return [Path(out) / name for name in files]


def stage_outputs(staged: OutputSet, files: dict[str, Any], folder: str = "") -> list[str]:
    """Stage `files` (name -> figure or JSON value) in `staged` under `folder`/ if given; the staged names."""
    names = []
    for name, value in files.items():
        names.append(f"{folder}/{name}" if folder else name)
        if name.endswith(".png"):
            from mechmem.plotting import figure_png

            staged.add(names[-1], figure_png(value))
        else:
            staged.add(names[-1], dumps(value, indent=2) + "\n")
    return names


def skipped(reason: str, name: str, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """An analysis that does not apply: print `skipped: REASON` and return its one output file, `name`, as
    `{"skipped": REASON, ...record}`."""
    print(f"skipped: {reason}")
    return {name: {"skipped": reason, **(record or {})}}


def analysis_main(
    parser: Callable[[str | None], ArgumentParser],
    outputs: Callable[[Any, argparse.Namespace], dict[str, Any]],
) -> Callable[..., int]:
    """The `main(argv=None, *, prog=None)` of an analysis command: parse `argv` with `parser(prog)`, load the
    checkpoint (`load_for_analysis`), run `outputs` and write its files together."""

    def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
        args = parser(prog).parse_args(argv)
        ckpt, out = load_for_analysis(args)  # torch is imported from here on
        files = outputs(ckpt, args)
        write_outputs(out, files)
        print(f"wrote {', '.join(sorted(files))} in {out}")
        return 0

    return main
