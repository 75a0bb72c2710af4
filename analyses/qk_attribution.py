"""Why each head attends: its attention score split into (query source, key source) contributions.

    python analyses/qk_attribution.py --help        # the same command as `mechmem qk`

A thin entry point: the command lives in `mechmem.cli.qk` (its flags, what it writes), which the installed
`mechmem qk` runs too.
"""

from mechmem.cli import run_script
from mechmem.cli.qk import main

if __name__ == "__main__":
    raise SystemExit(run_script(main))
