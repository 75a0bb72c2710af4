"""Run every analysis that applies to a checkpoint in one process, and write one output set.

    mechmem analyse runs/t2/ckpt.pt                 # heads, qk, ablate, patch, lens, probe, circuit, report
    mechmem analyse runs/t2 --only heads,patch --out reports/t2-quick

The checkpoint is loaded once; each analysis runs with its own command's defaults plus the shared --seed,
--device and --n-samples, so it writes the numbers its single command writes, into OUT/NAME/. OUT/analyse.json
lists what ran, what was skipped and why, and the seconds each took.
"""

import time

from mechmem import cli
from mechmem.cli import ablate, circuit, heads, lens, patch, probe, qk, report
from mechmem.errors import MechmemError, one_line

ANALYSES = {
    m.__name__.removeprefix("mechmem.cli."): m for m in (heads, qk, ablate, patch, lens, probe, circuit)
}
"""The analysis commands `analyse` runs, in order (then the report)."""
ORDER = (*ANALYSES, "report")


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=None)
    p.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(ORDER),
        help=f"comma-separated subset of {','.join(ORDER)} (default: all)",
    )
    cli.add_memory_flag(p)
    return p


def _sub_args(module: object, args: object) -> object:
    """The namespace command `module`'s own parser gives for CKPT with analyse's shared flags."""
    sub = module.parser().parse_args([str(args.ckpt)] if args.ckpt else ["--hf", args.hf])
    for name in ("seed", "device", "n_samples", "task_module", "allow_nonfinite", "memory_mb"):
        if getattr(args, name) is not None and hasattr(sub, name):  # --n-samples None: each its own default
            setattr(sub, name, getattr(args, name))
    return sub


def stage_one(name: str, ckpt: object, args: object, staged: object) -> dict:
    """Run analysis `name` on `ckpt`, staging its files under NAME/; returns its summary entry."""
    from mechmem.report.document import stage_report

    if name == "report":
        stage_report(report.build(ckpt, _sub_args(report, args)), staged, "report")
        return {"files": ["report/report.html", "report/report.json", "report/report.md"]}
    files = ANALYSES[name].outputs(ckpt, _sub_args(ANALYSES[name], args))
    entry = {"files": sorted(cli.stage_outputs(staged, files, name))}
    reasons = [v["skipped"] for v in files.values() if isinstance(v, dict) and "skipped" in v]
    return entry | ({"skipped": reasons[0]} if reasons else {})


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """`mechmem analyse`: load once, run each analysis, write every output together."""
    args = parser(prog).parse_args(argv)
    unknown = sorted(set(args.only) - set(ORDER))
    if unknown or not args.only:
        given = ", ".join(unknown) or "(none given)"
        raise cli.UsageError(f"--only: unknown analysis {given} (have {','.join(ORDER)})")
    if args.n_samples is not None and "report" in args.only and args.n_samples < report.MIN_SAMPLES:
        raise MechmemError(f"--n-samples must be at least {report.MIN_SAMPLES} for the report")
    ckpt, out = cli.load_for_analysis(args)  # every check first; torch is imported from here on
    if args.out is None:
        out = cli.claim_out(out / "analysis")
    from mechmem.io import OutputSet, dumps

    summary = {"checkpoint": str(ckpt.path), "seed": args.seed, "analyses": {}}
    failed, started = [], time.perf_counter()
    with OutputSet(out) as staged:
        for name in [n for n in ORDER if n in args.only]:
            print(f"\n== {name}", flush=True)
            t0 = time.perf_counter()
            try:
                entry = stage_one(name, ckpt, args, staged)
            except MechmemError as exc:
                failed.append(name)
                entry = {"error": one_line(exc)}
                print(f"error in {name}: {one_line(exc)}")
            summary["analyses"][name] = entry | {"seconds": round(time.perf_counter() - t0, 3)}
        summary["seconds"] = round(time.perf_counter() - started, 3)
        staged.add("analyse.json", dumps(summary, indent=2) + "\n")
    rows = [
        [n, e.get("error") or e.get("skipped") or "ok", e["seconds"]] for n, e in summary["analyses"].items()
    ]
    print()
    cli.print_table(rows, ["analysis", "outcome", "seconds"], floatfmt=".1f")
    print(f"wrote {out} ({len(summary['analyses'])} analyses in {summary['seconds']:.1f} s)")
    if failed:
        raise MechmemError(
            f"analyses that failed: {', '.join(failed)} (the others are written; see analyse.json)"
        )
    return 0
