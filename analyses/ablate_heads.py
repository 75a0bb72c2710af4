"""Ablate every attention head (and every attention and MLP layer) of a checkpoint; report the metric change.

    python analyses/ablate_heads.py --help        # the same command as `mechmem ablate`

A thin entry point: the command lives in `mechmem.cli.ablate` (its flags, what it writes), which the
installed `mechmem ablate` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.ablate import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
