"""Write an automated circuit report for a checkpoint: report.md, a self-contained report.html and

    python analyses/report.py --help        # the same command as `mechmem report`

A thin entry point: the command lives in `mechmem.cli.report` (its flags, what it writes), which the
installed `mechmem report` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.report import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
