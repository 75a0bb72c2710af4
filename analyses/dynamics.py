"""Run analyses on every step checkpoint of a run,

    python analyses/dynamics.py --help        # the same command as `mechmem dynamics`

A thin entry point: the command lives in `mechmem.cli.dynamics` (its flags, what it writes), which the
installed `mechmem dynamics` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.dynamics import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
