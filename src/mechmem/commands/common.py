"""What every analysis command shares: parse, load the checkpoint with every check first, run, write."""

import argparse
from collections.abc import Callable
from typing import Any

from mechmem import cli

Outputs = Callable[[Any, argparse.Namespace], dict[str, Any]]
"""An analysis command's work on a loaded checkpoint: the files it writes (name -> figure or JSON value)."""


def run_analysis(
    parser: cli.ArgumentParser, outputs: Outputs, argv: list[str] | None, *, min_samples: int = 1
) -> int:
    """Parse `argv`, load the checkpoint (`cli.load_for_analysis`: every check before any work), run
    `outputs` and write its files together into the output folder (`cli.write_outputs`)."""
    args = parser.parse_args(argv)
    ckpt, out = cli.load_for_analysis(args, min_samples=min_samples)  # torch is imported from here on
    files = outputs(ckpt, args)
    cli.write_outputs(out, files)
    print(f"wrote {', '.join(sorted(files))} in {out}")
    return 0
