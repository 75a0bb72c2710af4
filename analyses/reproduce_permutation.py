"""Alias of `analyses/reproduce.py permutation` (the permutation paper's plugin), kept for old commands.

    python analyses/reproduce_permutation.py --quick          # = reproduce.py permutation --variant quick
    python analyses/reproduce_permutation.py --paper --device cuda --page-only

Other flags pass through to reproduce.py (--page-only, --docs); --runs, --workers, --device, --task1-seeds,
--task2-seeds, --executor and --address become `--set` options. Record:
docs/reproductions/data/permutation.json.
"""

from reproduce import main as reproduce_main

from mechmem.cli import ArgumentParser, run_script

OPTIONS = ("runs", "workers", "device", "task1_seeds", "task2_seeds", "executor", "address")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 Task 1 and 3 Task 2 seeds (variant quick)")
    parser.add_argument(
        "--paper", action="store_true", help="published schedules, GPU-sized V=10/15 (variant paper)"
    )
    for name in OPTIONS:
        parser.add_argument(
            f"--{name.replace('_', '-')}", dest=name, default=None, help=f"--set {name}=VALUE"
        )
    args, rest = parser.parse_known_args(argv)
    variant = "paper" if args.paper else "quick" if args.quick else "full"
    sets = [f"--set={name}={getattr(args, name)}" for name in OPTIONS if getattr(args, name) is not None]
    return reproduce_main(["permutation", "--variant", variant, *sets, *rest])


if __name__ == "__main__":
    raise SystemExit(run_script(main))
