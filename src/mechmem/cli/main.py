"""The `mechmem` command: one subcommand per script, and `mechmem analyse` for every analysis in one process.

    mechmem --help                                        # the subcommands, one line each
    mechmem train permutation --preset task2-quick --out t2
    mechmem analyse t2/ckpt.pt                            # every analysis that applies, one output set
    mechmem heads t2/ckpt.pt --n-samples 128              # one analysis; `mechmem heads --help` for its flags

Each subcommand is the `main` of one module of `mechmem.cli`; the scripts in `analyses/` call the same
functions.
"""

import sys

from mechmem.cli import (
    UsageError,
    ablate,
    analyse,
    circuit,
    demo,
    dynamics,
    examples,
    heads,
    lens,
    patch,
    probe,
    qk,
    report,
    reproduce,
    run_script,
    train,
)
from mechmem.version import __version__

COMMANDS = {
    "train": (train, "train a tiny model on a task preset"),
    "analyse": (analyse, "every analysis that applies to a checkpoint, in one process"),
    "heads": (heads, "previous-token, duplicate-token and induction scores of every head"),
    "ablate": (ablate, "zero / mean / resample ablation of every head and layer"),
    "patch": (patch, "activation patching sweeps between clean and corrupted prompts"),
    "lens": (lens, "logit lens before and after every sub-layer"),
    "probe": (probe, "the weights read as associative memories"),
    "circuit": (circuit, "edge-level circuit discovery and its faithfulness"),
    "qk": (qk, "why each head attends: its score split over pairs of residual sources"),
    "report": (report, "the circuit report: report.md, report.html, report.json"),
    "dynamics": (dynamics, "analyses over every step checkpoint of a run"),
    "reproduce": (reproduce, "a paper's experiments, their record and page"),
    "demo": (demo, "train the demo models and report on each"),
    "examples": (examples, "copy the example notebooks and analysis scripts into a folder"),
}
"""Subcommand -> (its module, one line of help)."""


def usage() -> str:
    """The text of `mechmem --help`."""
    width = max(map(len, COMMANDS))
    return "\n".join(
        [
            "usage: mechmem COMMAND [ARGS...]      (mechmem COMMAND --help: its flags)",
            "",
            "Train tiny transformers on synthetic memory tasks; take them apart with TransformerLens hooks.",
            "",
            "commands:",
            *(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()),
            "",
            "  --version  print the version",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch `mechmem COMMAND ARGS...` to the command's `main(ARGS, prog="mechmem COMMAND")`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"mechmem {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise UsageError(f"unknown command {name!r}: choose from {', '.join(COMMANDS)} (see mechmem --help)")
    return COMMANDS[name][0].main(rest, prog=f"mechmem {name}")


def entry_point() -> None:
    """The console script `mechmem` (`[project.scripts]`): `main` under `run_script`, one-line errors."""
    raise SystemExit(run_script(main))
