"""Reproduce "Can a Tiny Transformer Learn to Remember?" end to end: train, measure, write the page and figures.

    python analyses/reproduce_permutation.py --quick     # CPU, 2 idle cores: about 12 minutes from scratch
    python analyses/reproduce_permutation.py             # 5 seeds per model: about 15 minutes on 2 idle cores
    python analyses/reproduce_permutation.py --paper --device cuda   # published schedule, GPU-sized V=10/15

Trains every missing run into RUNS/PRESET/seedN (complete runs are reused), then writes
docs/reproductions/permutation.md, docs/reproductions/figures/permutation_*.png and the raw numbers
docs/reproductions/figures/permutation_results.json. --quick uses 2 Task 1 seeds and 3 Task 2 seeds instead of 5.
"""

import argparse
import json
import sys

import torch

from mechmem.cli import run_script, write_json
from mechmem.errors import MechmemError
from mechmem.papers.permutation.experiments import ReproConfig, run_reproduction
from mechmem.papers.permutation.page import write_page


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise MechmemError(f"seeds must be comma-separated integers, got {text!r}") from None
    if not seeds:
        raise MechmemError("give at least one seed")
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds (Task 1: 0,1; Task 2: 0,1,2)")
    parser.add_argument("--paper", action="store_true", help="published schedules and GPU-sized V=10/15 presets")
    parser.add_argument("--task1-seeds", default=None, help="override the Task 1 seeds, e.g. 0,1,2")
    parser.add_argument("--task2-seeds", default=None, help="override the Task 2 seeds, e.g. 0,1,2")
    parser.add_argument("--runs", default="runs/permutation", help="directory of the training runs")
    parser.add_argument("--doc", default="docs/reproductions/permutation.md", help="markdown page to write")
    parser.add_argument("--figures", default="docs/reproductions/figures", help="directory for the figures")
    parser.add_argument("--workers", type=int, default=2, help="training processes in parallel (one thread each)")
    parser.add_argument("--device", default="cpu", help="device for training (cpu or cuda)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        raise MechmemError("--workers must be at least 1")
    torch.set_num_threads(1)
    kind = "paper" if args.paper else "quick"
    cfg = ReproConfig(
        task1_preset=f"task1-{kind}",
        task2_preset=f"task2-{kind}",
        task1_seeds=_seeds(args.task1_seeds or ("0,1" if args.quick else "0,1,2,3,4")),
        task2_seeds=_seeds(args.task2_seeds or ("0,1,2" if args.quick else "0,1,2,3,4")),
        scale_presets=(f"v10-{kind}", f"v15-{kind}"),
        runs=args.runs,
        workers=args.workers,
        device=args.device,
    )
    results = run_reproduction(cfg, log=lambda msg: print(msg, flush=True))
    command = "python analyses/reproduce_permutation.py " + " ".join(sys.argv[1:] if argv is None else argv)
    page = write_page(results, args.doc, args.figures, command.strip())
    raw = write_json(f"{args.figures}/permutation_results.json", json.loads(json.dumps(results)))
    print(f"wrote {page}, {raw} and figures in {args.figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
