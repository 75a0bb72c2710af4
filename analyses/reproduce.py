"""Reproduce a paper through its plugin: run (or reuse) its experiments, record every number, write its page.

    python analyses/reproduce.py --help        # the same command as `mechmem reproduce`

A thin entry point: the command lives in `mechmem.cli.reproduce` (its flags, what it writes), which the
installed `mechmem reproduce` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.reproduce import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
