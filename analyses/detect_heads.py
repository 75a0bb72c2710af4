"""Score every head as previous-token, duplicate-token and induction head over several probe lengths.

    python analyses/detect_heads.py --help        # the same command as `mechmem heads`

A thin entry point: the command lives in `mechmem.cli.heads` (its flags, what it writes), which the
installed `mechmem heads` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.heads import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
