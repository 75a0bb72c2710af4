"""Attribution patching (AtP*) against exact activation patching: agreement and speed, per model and sweep.

    python benchmarks/attribution.py                   # the random models of benchmarks/patching.py, both
    directions python benchmarks/attribution.py --no-qk-fix       # plain first-order AtP, for comparison

Models: the random ones of `benchmarks/patching.py` (3-layer, 4-layer LayerNorm + MLP, 6-layer attention-only,
birth demo config) and, unless --no-train, the permutation task1/task2 quick models trained for --train-steps.
For each sweep and direction it prints Pearson and Spearman correlation of the effects (value minus the
unpatched metric) over all cells, the top-k overlap (k = 10, capped at the number of cells), and the time of
the exact sweep (`Patcher.sweep` given its cached runs) and of the attribution sweep (`Attributor.sweep` given
its cached forward and backward passes), with their ratio. Per model it also prints the one-time costs
(building a `Patcher`: two forward passes; an `Attributor`'s two forward and backward passes) and the total
for every sweep in both directions, one-time costs included. Times are the best of --repeats runs, on
--threads torch threads. Under each model's table, the floor of those two totals (`benchmarks/floor.py`): the
counted matmul work (exact: the Patcher's two forwards and one forward of the batch per cell, resumed at the
cell's layer for sweeps by layer; attribution: two forwards and two backwards), the float32 matmul rate
measured in the same run, the time that implies and the ratio of the measured total to it.
"""

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import BACKWARD_FACTOR, floor_table, forward_flops, matmul_rate, sweep_flops
from patching import best_of, random_models, trained_models

from mechmem.analysis.patching import Patcher
from mechmem.analysis.patching.attribution import Attributor, agreement
from mechmem.analysis.patching.tables import model_sweeps
from mechmem.cli import format_table

HEADERS = [
    "model",
    "sweep",
    "direction",
    "cells",
    "pearson",
    "spearman",
    "top-k",
    "exact ms",
    "attribution ms",
    "speed-up",
]


def bench_model(label, model, pair, repeats: int, qk_exact: bool) -> list[list]:
    def attributor() -> Attributor:
        att = Attributor(model, pair.clean, pair.corrupted, pair=pair, qk_exact=qk_exact)
        att.run("clean"), att.run("corrupted")
        return att

    t_patcher, patcher = best_of(lambda: Patcher(model, pair.clean, pair.corrupted, pair=pair), repeats)
    t_att0, att = best_of(attributor, repeats)
    rows, sweep_work = [], 0.0
    batch, pos = pair.clean.shape
    for direction in ("denoising", "noising"):
        for name in model_sweeps(model):
            t_exact, exact = best_of(partial(patcher.sweep, name, direction), repeats)
            t_att, approx = best_of(partial(att.sweep, name, direction), repeats)
            agree = agreement(approx, exact)
            sweep_work += sweep_flops(model.cfg, exact.axes, tuple(exact.values.shape), batch, pos)
            rows.append(
                [
                    label,
                    name,
                    direction,
                    exact.values.numel(),
                    agree["pearson"],
                    agree["spearman"],
                    agree["top_k"],
                    1e3 * t_exact,
                    1e3 * t_att,
                    t_exact / t_att,
                ]
            )
    total_exact = t_patcher + sum(r[7] for r in rows) / 1e3
    total_att = t_att0 + sum(r[8] for r in rows) / 1e3
    print(
        f"\n{label}: batch {len(pair.clean)}, {pair.clean.shape[1]} positions; one-time: Patcher "
        f"{1e3 * t_patcher:.1f} ms, Attributor {1e3 * t_att0:.1f} ms; every sweep, both directions, one-time "
        f"included: exact {total_exact:.2f} s, attribution {total_att:.2f} s, "
        f"speed-up {total_exact / total_att:.1f}x"
    )
    print(format_table(rows, HEADERS, floatfmt=".3g"))
    forward = forward_flops(model.cfg, batch, pos)
    work = [
        ("exact: 2 forwards + 1 per cell", 2 * forward + sweep_work, {"measured": total_exact}),
        (
            "attribution: 2 forwards + 2 backwards",
            2 * (1 + BACKWARD_FACTOR) * forward,
            {"measured": total_att},
        ),
    ]
    print(floor_table(work, RATE[0] if RATE else matmul_rate()))
    return rows


RATE: list[float] = []  # the machine's matmul FLOP/s, measured once per run (`floor.matmul_rate`)


def summary(label: str, rows: list[list]) -> str:
    def med(i: int) -> str:
        values = [r[i] for r in rows if r[i] == r[i]]  # NaN (no effect anywhere) left out
        return f"median {statistics.median(values):.2f}, worst {min(values):.2f}" if values else "n/a"

    return (
        f"{label} ({len(rows)} sweeps): pearson {med(4)}; spearman {med(5)}; top-k {med(6)}; "
        f"speed-up {med(9)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="timings are the best of this many runs")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--no-train", action="store_true", help="only the random models (no permutation training)"
    )
    parser.add_argument("--train-steps", type=int, default=1000, help="permutation training steps")
    parser.add_argument(
        "--no-qk-fix", action="store_true", help="plain AtP, without AtP*'s exact query/key softmax"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    RATE.append(matmul_rate())
    cases = (
        []
        if args.no_train
        else [
            (label.split(" (")[0], m, t.patching_pair(128, generator=torch.Generator().manual_seed(0)))
            for label, m, t in trained_models(args.train_steps)
        ]
    )
    cases += random_models()
    rows = [
        r for case in cases for r in bench_model(*case, repeats=args.repeats, qk_exact=not args.no_qk_fix)
    ]
    print()
    for label, _, _ in cases:
        print(summary(label, [r for r in rows if r[0] == label]))
    print(summary("all models", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
