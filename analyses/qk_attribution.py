"""Why each head attends: its attention score split into (query source, key source) contributions.

    python analyses/qk_attribution.py --help        # the same command as `mechmem qk`

A thin entry point: the command lives in `mechmem.cli.qk` (its flags, what it writes), which the installed
`mechmem qk` runs too.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from mechmem.cli import run_script
from mechmem.cli.qk import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
