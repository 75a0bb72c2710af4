"""Train the demo models on CPU, write a circuit report for each, and link them from reports/index.html.

    python analyses/demo.py --help        # the same command as `mechmem demo`

A thin entry point: the command lives in `mechmem.cli.demo` (its flags, what it writes), which the
installed `mechmem demo` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.demo import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
