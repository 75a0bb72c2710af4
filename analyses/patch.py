"""Activation patching sweeps between the clean and corrupted inputs of a checkpoint's task.

    python analyses/patch.py --help        # the same command as `mechmem patch`

A thin entry point: the command lives in `mechmem.cli.patch` (its flags, what it writes), which the
installed `mechmem patch` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.patch import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
