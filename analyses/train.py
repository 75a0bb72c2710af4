"""Train a tiny model on one of mechmem's tasks.

    python analyses/train.py --help        # the same command as `mechmem train`

A thin entry point: the command lives in `mechmem.cli.train` (its flags, what it writes), which the
installed `mechmem train` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.train import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
