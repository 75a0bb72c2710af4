"""Run the constructions experiments of Linsefors & Bushnaq (and our challenge entry) into the data folder.

    # CPU, a few minutes
    python -m mechmem_papers.memorisation.scripts.reproduce_constructions --quick --data \
        runs/constructions_quick
    # the full table (about an hour on CPU)
    python -m mechmem_papers.memorisation.scripts.reproduce_constructions --ds 16 32
    python -m mechmem_papers.memorisation.scripts.reproduce_constructions --ds 64 --modes published_hand \
        keyvalue_hand --reuse
    python -m mechmem_papers.memorisation.scripts.reproduce_constructions --ds 64 --modes keyvalue_hand \
        --reuse --spot-d 64 --spot-n 6680
    # searches as Ray tasks (2 at once here)
    python -m mechmem_papers.memorisation.scripts.reproduce_constructions --ds 16 32 --executor ray

Writes constructions_capacity_{full,quick}.json and constructions_misc_*.json into --data (default
docs/reproductions/data); --reuse keeps the capacities already there and recomputes only --modes at --ds. The
page is drawn from these files: `python analyses/reproduce.py memorisation` (or `--variant constructions`,
which runs this with the defaults and then writes the page).
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import shlex
import sys
from pathlib import Path

from mechmem import cli
from mechmem.cli import ArgumentParser, run_script
from mechmem_papers.executor import check_executor
from mechmem_papers.memorisation.options import EVALUATORS


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grids, d = 8 and 16 (minutes on 2 cores)")
    parser.add_argument(
        "--ds",
        type=cli.int_range(4),
        nargs="+",
        default=None,
        help="sizes d >= 4 (n_in = 2d, d_mlp = n_out = d)",
    )
    parser.add_argument("--modes", nargs="+", default=list(EVALUATORS), choices=EVALUATORS, help="evaluators")
    parser.add_argument(
        "--precision", type=cli.positive_int, help="search precision in facts, >= 1 (8; quick 16)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep earlier capacities; recompute --modes at --ds"
    )
    parser.add_argument("--data", type=Path, default=Path("docs/reproductions/data"), help="data folder")
    parser.add_argument("--spot-d", type=cli.nonnegative_int, default=0, help="size d of trained spot checks")
    parser.add_argument(
        "--spot-n", type=cli.positive_int, nargs="*", default=[], help="fact counts at --spot-d"
    )
    parser.add_argument("--threads", type=cli.thread_count, default=1, help="torch CPU threads, >= 1")
    parser.add_argument(
        "--executor", default="local", help="local (this process) or ray (one Ray task per search)"
    )
    parser.add_argument(
        "--address", default=None, help="ray: cluster to join (auto or host:port); default a local one"
    )
    args = parser.parse_args(argv)
    ds = tuple(args.ds or ((8, 16) if args.quick else (16, 32)))
    check_executor(args.executor, args.address)
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem_papers.memorisation.constructions.reproduce import run_constructions

    torch.set_num_threads(args.threads)
    command = "python -m mechmem_papers.memorisation.scripts.reproduce_constructions " + shlex.join(
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
