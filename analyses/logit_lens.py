"""Logit lens before and after every sub-layer: the target's probability and rank at each residual stage.

    python analyses/logit_lens.py --help        # the same command as `mechmem lens`

A thin entry point: the command lives in `mechmem.cli.lens` (its flags, what it writes), which the
installed `mechmem lens` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.lens import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
