"""Run analyses on every step checkpoint of a run,

    python analyses/dynamics.py --help        # the same command as `mechmem dynamics`

A thin entry point: the command lives in `mechmem.cli.dynamics` (its flags, what it writes), which the
installed `mechmem dynamics` runs too.
"""

from mechmem.cli import run_script
from mechmem.cli.dynamics import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
