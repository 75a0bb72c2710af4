"""Discover a checkpoint's edge-level circuit: score every edge by path patching, prune, measure faithfulness.

    python analyses/circuit.py --help        # the same command as `mechmem circuit`

A thin entry point: the command lives in `mechmem.cli.circuit` (its flags, what it writes), which the
installed `mechmem circuit` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.circuit import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
