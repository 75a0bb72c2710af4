"""The report's verdicts on saved checkpoints, to compare two versions of the code (a speed-up
must not change them).

    python analyses/demo.py --out runs/demo --reports reports              # trains the demo models
    python benchmarks/report_verdicts.py runs/demo/*/ckpt.pt --out after.json
    PYTHONPATH=/tmp/before/src python benchmarks/report_verdicts.py runs/demo/*/ckpt.pt --out before.json
    python benchmarks/report_verdicts.py --compare before.json after.json

For each checkpoint it builds the report (`build_report` at its defaults, seed 0) and keeps what the report
concludes: every head's role, the MLP's role and key neurons, the edge circuit (its edges, verdict and scoring
method) and the task's headline, with the report's CPU time. `--compare A B` prints each verdict that differs
between two such files (none: exit 0; some: exit 1).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def verdicts(path: Path, n_samples: int) -> dict[str, Any]:
    """What the report of the checkpoint at `path` concludes (see the module docstring)."""
    from mechmem.checkpoint import load_checkpoint
    from mechmem.models.parts import Head
    from mechmem.report import build_report

    ckpt = load_checkpoint(path)
    report = build_report(ckpt.model, ckpt.task, title=str(path), n_samples=n_samples, seed=0)
    circuit, mlp, edges = (report.section(k) for k in ("circuit", "mlp", "edges"))
    out = {
        "roles": {Head(h["layer"], h["head"]).name: h["role"] for h in circuit.findings.get("heads", [])},
        "mlp": None if mlp.skipped else [mlp.findings["role"], mlp.findings["key_neurons"]],
        "edges": None if edges.skipped else [edges.findings[k] for k in ("circuit", "verdict", "method")],
        "headline": report.headline,
    }
    return {"verdicts": out, "cpu_seconds": report.cost["cpu_seconds"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoints", nargs="*", type=Path, help="checkpoint files (ckpt.pt)")
    parser.add_argument("--n-samples", type=int, default=512, help="the report's sequences per section")
    parser.add_argument("--out", type=Path, default=Path("verdicts.json"), help="JSON written here")
    parser.add_argument(
        "--compare", nargs=2, type=Path, help="two files this script wrote: their differences"
    )
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        differ = [
            f"{name} {key}: {a[name]['verdicts'][key]} -> {b[name]['verdicts'][key]}"
            for name in sorted(set(a) & set(b))
            for key in a[name]["verdicts"]
            if a[name]["verdicts"][key] != b[name]["verdicts"].get(key)
        ]
        print("\n".join(differ) or f"same verdicts on {len(set(a) & set(b))} checkpoints")
        return 1 if differ else 0
    missing = [str(p) for p in args.checkpoints if not p.is_file()]
    if missing or not args.checkpoints:
        print(f"error: no checkpoint at {', '.join(missing) or '(none given)'}", file=sys.stderr)
        return 2
    record = {str(p): verdicts(p, args.n_samples) for p in args.checkpoints}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
