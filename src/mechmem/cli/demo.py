"""Train the demo models on CPU, write a circuit report for each, and link them from reports/index.html.

    mechmem demo --out runs/demo --reports reports       # `make demo`: about 2-3 minutes on 2 idle cores
    mechmem demo --steps 200 --out /tmp/demo --reports /tmp/demo/reports   # a quick smoke run

Models: `mechmem.report.demo.DEMO_MODELS`; jobs (train, then report) run --jobs at a time. A model whose
checkpoint exists is not retrained unless --retrain.
"""

import time
from pathlib import Path

from mechmem.cli import (
    MAX_SAMPLES,
    MAX_STEPS,
    ArgumentParser,
    check_out_dir,
    int_range,
    print_table,
    sample_count,
    thread_count,
)
from mechmem.errors import MechmemError


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/demo", help="the trained runs' directory (default: runs/demo)")
    parser.add_argument("--reports", default="reports", help="directory for the reports and index.html")
    parser.add_argument("--retrain", action="store_true", help="train again even if a checkpoint exists")
    parser.add_argument("--jobs", type=thread_count, default=2, help="jobs at a time, >= 1 (default: 2)")
    parser.add_argument(
        "--steps",
        type=int_range(1, MAX_STEPS),
        default=None,
        help="override every preset's steps (smoke runs)",
    )
    parser.add_argument(
        "--n-samples",
        type=sample_count,
        default=512,
        help=f"sequences per report analysis, in [1, {MAX_SAMPLES}] (default: 512)",
    )
    parser.add_argument(
        "--models",
        nargs="*",
        default=None,
        help="names of a subset of the demo models (default: every model the papers declare)",
    )
    args = parser.parse_args(argv)
    check_out_dir(args.out)
    check_out_dir(args.reports, flag="--reports")
    from mechmem.report.demo import available, run_demo  # torch is imported from here on

    models = available()
    if args.models is not None:
        unknown = sorted(set(args.models) - {m.name for m in models})
        if unknown:
            raise MechmemError(
                f"unknown demo model(s) {', '.join(unknown)} (have: {', '.join(m.name for m in models)})"
            )
        models = [m for m in models if m.name in args.models]
    t0 = time.perf_counter()
    rows = run_demo(
        Path(args.out),
        Path(args.reports),
        models=models,
        jobs=args.jobs,
        retrain=args.retrain,
        steps=args.steps,
        n_samples=args.n_samples,
    )
    keys = ["model", "preset", "train_s", "report_s", "headline", "circuit"]
    print_table([[r.get(k, "") for k in keys] for r in rows], keys, floatfmt=".1f")
    print(f"wrote {Path(args.reports) / 'index.html'} in {time.perf_counter() - t0:.0f} s")
    failed = [r["model"] for r in rows if r.get("train_rc", 0) or r.get("report_rc", 1)]
    if failed:
        raise MechmemError(
            f"demo model(s) failed: {', '.join(map(str, failed))} (see their train.log / report.log)"
        )
    return 0
