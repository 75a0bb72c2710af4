"""Run the constructions experiments of Linsefors & Bushnaq (and our challenge entry) into the data folder.

    # CPU, a few minutes
    python -m mechmem.papers.memorisation.scripts.reproduce_constructions --quick --data \
        runs/constructions_quick
    # the full table (about an hour on CPU)
    python -m mechmem.papers.memorisation.scripts.reproduce_constructions --ds 16 32
    python -m mechmem.papers.memorisation.scripts.reproduce_constructions --ds 64 --modes published_hand \
        keyvalue_hand --reuse
    python -m mechmem.papers.memorisation.scripts.reproduce_constructions --ds 64 --modes keyvalue_hand \
        --reuse --spot-d 64 --spot-n 6680
    # searches as Ray tasks (2 at once here)
    python -m mechmem.papers.memorisation.scripts.reproduce_constructions --ds 16 32 --executor ray

Writes constructions_capacity_{full,quick}.json and constructions_misc_*.json into --data (default
docs/reproductions/data); --reuse keeps the capacities already there and recomputes only --modes at --ds. The
page is drawn from these files: `python analyses/reproduce.py memorisation` (or `--variant constructions`,
which runs this with the defaults and then writes the page).

Long because each construction experiment of the paper is one flag with its own published settings.
"""

import shlex
import sys
from pathlib import Path

import torch

from mechmem.cli import ArgumentParser, run_script
from mechmem.errors import MechmemError
from mechmem.papers.memorisation.constructions.evaluators import EVALUATORS
from mechmem.papers.memorisation.constructions.reproduce import run_constructions


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grids, d = 8 and 16 (minutes on 2 cores)")
    parser.add_argument(
        "--ds", type=int, nargs="+", default=None, help="sizes d (n_in = 2d, d_mlp = n_out = d)"
    )
    parser.add_argument("--modes", nargs="+", default=list(EVALUATORS), help=f"among {', '.join(EVALUATORS)}")
    parser.add_argument("--precision", type=int, default=None, help="search precision in facts (8; quick 16)")
    parser.add_argument(
        "--reuse", action="store_true", help="keep earlier capacities; recompute --modes at --ds"
    )
    parser.add_argument("--data", type=Path, default=Path("docs/reproductions/data"), help="data folder")
    parser.add_argument("--spot-d", type=int, default=0, help="size d for single trained spot checks")
    parser.add_argument("--spot-n", type=int, nargs="*", default=[], help="fact counts to train at --spot-d")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--executor", default="local", help="local (this process) or ray (one Ray task per search)"
    )
    parser.add_argument(
        "--address", default=None, help="ray: cluster to join (auto or host:port); default a local one"
    )
    args = parser.parse_args(argv)
    ds = tuple(args.ds or ((8, 16) if args.quick else (16, 32)))
    if any(d < 4 for d in ds):
        raise MechmemError(f"every d must be >= 4, got {ds}")
    unknown = [m for m in args.modes if m not in EVALUATORS]
    if unknown:
        raise MechmemError(f"unknown mode(s) {', '.join(unknown)} (known: {', '.join(EVALUATORS)})")
    torch.set_num_threads(args.threads)
    command = "python -m mechmem.papers.memorisation.scripts.reproduce_constructions " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    paths = run_constructions(
        args.data,
        quick=args.quick,
        ds=ds,
        modes=tuple(args.modes),
        precision=args.precision or (16 if args.quick else 8),
        reuse=args.reuse,
        command=command,
        spot_d=args.spot_d,
        spot_ns=tuple(args.spot_n),
        executor=args.executor,
        address=args.address,
    )
    print("wrote " + ", ".join(map(str, paths.values())))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
