"""Write an automated circuit report for a checkpoint: report.md, a self-contained report.html and
report.json.

    python analyses/train.py permutation --preset task2-quick --out runs/task2    # about 2 minutes on CPU
    python analyses/report.py runs/task2/ckpt.pt --out runs/task2/report         # about 10 seconds on CPU

Runs the analyses that fit the checkpoint's task and architecture (head detection, elimination/recall roles,
MLP direct effects, OV memory probes, ablation, patching, closeness to the task's optimum, and training
dynamics when the checkpoint's directory holds step checkpoints from --save-every), names each head's role
from the measured evidence with explicit thresholds, and prints the named circuit. See docs/report.md.
"""

import mechmem.cli  # noqa: F401, I001  (first, so a Ctrl-C while torch imports is one line)

from mechmem.cli import (
    ArgumentParser,
    add_analysis_args,
    claim_out,
    load_for_analysis,
    print_table,
    run_script,
)
from mechmem.progress import working

MIN_SAMPLES = 32
"""Smallest --n-samples the report accepts."""


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    add_analysis_args(parser, n_samples=512)
    parser.add_argument("--title", default=None, help="report title (default: the run directory's name)")
    args = parser.parse_args(argv)
    # Heavy imports after the arguments parse, so --help and usage errors answer at once.
    from mechmem.report.checkpoint_report import report_checkpoint

    # Role evidence compares groups of sequences (repeat / no repeat), which a few samples may not fill.
    ckpt, out = load_for_analysis(args, min_samples=MIN_SAMPLES)
    if args.out is None:
        out = claim_out(out / "report")
    with working(f"building the report on {args.n_samples} sequences"):
        report, paths = report_checkpoint(
            ckpt, out, n_samples=args.n_samples, seed=args.seed, title=args.title, progress=True
        )
    circuit = report.section("circuit")
    rows = [[h["layer"], h["head"], h["role"]] for h in circuit.findings["heads"]]
    if rows:
        print_table(rows, ["layer", "head", "role"])
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
    print(f"wrote {paths['md']}, {paths['html']} and {paths['json']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
