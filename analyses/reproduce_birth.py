"""Reproduce Bietti et al. (2023), "Birth of a Transformer": run experiments (a)-(d) and write the report.

    python analyses/reproduce_birth.py --quick

`--quick` uses CPU sizes (d=64, T=128, batch 32; 15 runs, 42 min of training measured on a heavily shared
2-core machine); without it the sizes of the `quick` preset (d=128, T=128, batch 64); `--scale paper` the
paper's (GPU). Runs go to `--runs` (finished runs are reused), the report to `docs/reproductions/birth.md`
with figures in `docs/reproductions/figures/birth_*.png`. Add `--preset-run runs/birth_quick` to report a run
of `python analyses/train.py birth --preset quick --out runs/birth_quick` against the targets.
"""

import argparse
import sys
from pathlib import Path

import torch

from mechmem.papers.birth.experiments import SCALES, experiment_runs
from mechmem.papers.birth.reproduce import Reproduction, reproduce
from mechmem.cli import print_table, run_script
from mechmem.errors import MechmemError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CPU-sized runs (same as --scale quick)")
    parser.add_argument(
        "--scale", choices=sorted(SCALES), default="default", help="run sizes (default: default)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="experiments to run: freezing ffn data depth")
    parser.add_argument(
        "--runs", default="runs/birth_repro", help="directory for the runs (reused when finished)"
    )
    parser.add_argument("--doc", default="docs/reproductions/birth.md", help="markdown report to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument(
        "--corpus",
        default=None,
        help="text corpus or statistics JSON (default: shipped tiny Shakespeare counts)",
    )
    parser.add_argument(
        "--preset-run",
        default=None,
        help="run directory of `analyses/train.py birth --preset quick` to report against the targets",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--skip-speed", action="store_true", help="do not measure data-generation speed")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scale = SCALES["quick" if args.quick else args.scale]
    runs = [r for r in experiment_runs(scale, args.corpus) if args.only is None or r.group in args.only]
    if not runs:
        raise MechmemError(f"--only {args.only}: no such experiment (freezing, ffn, data, depth)")
    name = "quick" if args.quick else args.scale
    spec = Reproduction(
        runs=runs,
        scale=scale,
        run_dir=Path(args.runs) / name,
        doc=Path(args.doc),
        command=(
            "python analyses/reproduce_birth.py " + " ".join(sys.argv[1:] if argv is None else argv)
        ).strip(),
        seed=args.seed,
        corpus=args.corpus,
        preset_run=Path(args.preset_run) if args.preset_run else None,
        measure_speed=not args.skip_speed,
    )
    rows, wall = reproduce(spec, log=lambda line: print(line, flush=True))
    print_table([[c[:70], o, "yes" if ok else "no"] for c, o, ok in rows], ["paper", "ours", "holds"])
    print(f"wrote {spec.doc} ({wall / 60:.1f} min of training)")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
