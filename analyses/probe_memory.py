"""Read a checkpoint's weights as associative memories and report each probe's recall.

    python analyses/probe_memory.py --help        # the same command as `mechmem probe`

A thin entry point: the command lives in `mechmem.cli.probe` (its flags, what it writes), which the
installed `mechmem probe` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.probe import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
