"""Train a tiny model on one of mechmem's tasks.

    python analyses/train.py --help        # the same command as `mechmem train`

A thin entry point: the command lives in `mechmem.cli.train` (its flags, what it writes), which the
installed `mechmem train` runs too.
"""

from mechmem.cli import run_script
from mechmem.cli.train import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
