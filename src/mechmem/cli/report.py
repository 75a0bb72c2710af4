"""Write an automated circuit report for a checkpoint: report.md, report.html and report.json.

    mechmem train permutation --preset task2-quick --out runs/task2    # about 2 minutes on CPU
    mechmem report runs/task2/ckpt.pt --out runs/task2/report         # about 10 seconds on CPU

Runs the analyses that fit the checkpoint's task and architecture, names each head's role from the measured
evidence, and prints the named circuit. See docs/report.md.
"""

import argparse
from typing import Any

from mechmem import cli

MIN_SAMPLES = 32
"""Smallest --n-samples the report accepts."""


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=512)
    p.add_argument("--title", default=None, help="report title (default: the run directory's name)")
    cli.add_memory_flag(p)
    return p


def build(ckpt: Any, args: argparse.Namespace) -> Any:
    """The report of `ckpt` with the flags in `args` (not yet written), its summary printed."""
    from mechmem.report.checkpoint_report import checkpoint_report

    print(f"building the report on {args.n_samples} sequences (one progress line per step)", flush=True)
    report = checkpoint_report(
        ckpt,
        n_samples=args.n_samples,
        seed=args.seed,
        title=args.title,
        progress=True,
        memory_mb=args.memory_mb,
    )
    circuit = report.section("circuit")
    rows = [[h["layer"], h["head"], h["role"]] for h in circuit.findings["heads"]]
    if rows:
        cli.print_table(rows, ["layer", "head", "role"])
    print(f"circuit: {circuit.findings['summary']}")
    if report.headline:
        print(f"headline: {report.headline}")
    skipped = [f"{s.key} ({s.skipped})" for s in report.sections if s.skipped]
    if skipped:
        print("skipped: " + "; ".join(skipped))
    cost = report.cost
    slowest = sorted(cost["steps"].items(), key=lambda kv: -kv[1]["seconds"])[:3]
    print(
        f"took {cost['seconds']:.1f} s (CPU {cost['cpu_seconds']:.1f} s); slowest: "
        + ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in slowest)
    )
    return report


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """`mechmem report`: parse, load, build the report, write it (default: CKPT's folder/report)."""
    args = parser(prog).parse_args(argv)
    ckpt, out = cli.load_for_analysis(args, min_samples=MIN_SAMPLES)  # torch is imported from here on
    from mechmem.progress import working
    from mechmem.report.document import write_report

    if args.out is None:
        out = cli.claim_out(out / "report")
    report = build(ckpt, args)
    with working("writing the report's figures and pages", announce=False):
        paths = write_report(report, out)
    print(f"wrote {paths['md']}, {paths['html']} and {paths['json']}")
    return 0
