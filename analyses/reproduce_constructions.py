"""Reproduce the hand-coded memorisation constructions of Linsefors & Bushnaq and measure our challenge entry.

    python analyses/reproduce_constructions.py --quick          # CPU, a few minutes: d = 8, 16, small grids
    python analyses/reproduce_constructions.py --ds 16 32       # the full comparison (about an hour on 2 cores)
    python analyses/reproduce_constructions.py --ds 64 --modes published_hand keyvalue_hand --reuse

Writes docs/reproductions/constructions.md (--quick: constructions_quick.md, so a smoke run never overwrites the
full report; or --out), with data in docs/reproductions/data/constructions_* and
figures in docs/reproductions/figures/constructions_*. --reuse keeps the capacities already in the data file and recomputes only --modes at --ds.
"""

import argparse
import shlex
import sys
from pathlib import Path

import torch

from mechmem.cli import run_script
from mechmem.papers.memorisation.constructions.capacity import EVALUATORS
from mechmem.papers.memorisation.constructions.reproduce import run_reproduction
from mechmem.errors import MechmemError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small grids, d = 8 and 16 only (minutes on 2 cores)"
    )
    parser.add_argument(
        "--ds", type=int, nargs="+", default=None, help="model sizes d (n_in = 2d, d_mlp = n_out = d)"
    )
    parser.add_argument(
        "--modes", nargs="+", default=list(EVALUATORS), help=f"modes among {', '.join(EVALUATORS)}"
    )
    parser.add_argument(
        "--precision", type=int, default=None, help="binary-search precision in facts (default 8, quick 16)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="load earlier capacities; recompute only --modes at --ds"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report path (default docs/reproductions/constructions.md, or constructions_quick.md)",
    )
    parser.add_argument("--spot-d", type=int, default=0, help="size d for single trained spot checks")
    parser.add_argument("--spot-n", type=int, nargs="*", default=[], help="fact counts to train at --spot-d")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    ds = tuple(args.ds or ((8, 16) if args.quick else (16, 32)))
    if any(d < 4 for d in ds):
        raise MechmemError(f"every d must be >= 4, got {ds}")
    unknown = [m for m in args.modes if m not in EVALUATORS]
    if unknown:
        raise MechmemError(f"unknown mode(s) {', '.join(unknown)} (known: {', '.join(EVALUATORS)})")
    torch.set_num_threads(args.threads)
    command = "python analyses/reproduce_constructions.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    out = args.out or Path(f"docs/reproductions/constructions{'_quick' if args.quick else ''}.md")
    path = run_reproduction(
        out,
        quick=args.quick,
        ds=ds,
        modes=tuple(args.modes),
        precision=args.precision or (16 if args.quick else 8),
        reuse=args.reuse,
        command=command,
        spot_d=args.spot_d,
        spot_ns=tuple(args.spot_n),
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
