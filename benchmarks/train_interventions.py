"""What interventions during training cost: a plain run and the same run under each intervention.

    OMP_NUM_THREADS=1 python benchmarks/train_interventions.py                      # about a minute
    python benchmarks/train_interventions.py --presets birth/demo --steps 40 --repeats 3
    python benchmarks/train_interventions.py --steps 200 --intervene L0H0=mean

Each repeat trains the plain run and one run per --intervene spec (each spec alone, the whole run), in an
order rotated from repeat to repeat, on one torch thread, without writing files. A run's time is the wall
clock of the whole `train_preset` call (model build, the interventions' check, the steps, an evaluation at the
first and the last step); each ratio divides a run's time by the plain run's of the same repeat. The table
gives the median and the worst ratio per preset and spec; the load averages before and after are printed, as
on a shared machine they decide most of the spread.
"""

import argparse
import os
import statistics
import time

from mechmem.cli import int_range, intervention_spec, positive_int, print_table, run_script

DEFAULT_SPECS = ("L0H0=zero", "blocks.0.hook_resid_post=mean")
"""A head's output zeroed, and a whole residual stream replaced by its batch mean: both presets have them."""


def timed_run(task: str, preset: str, steps: int, spec: str | None) -> float:
    """Seconds of one `train_preset` call of `steps` steps, under `spec` (None: plain)."""
    from mechmem.training.run import train_preset

    start = time.perf_counter()
    train_preset(
        task,
        preset,
        steps=steps,
        eval_every=steps,
        progress=False,
        interventions=None if spec is None else [spec],
    )
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--presets",
        nargs="+",
        default=["permutation/task1-demo"],
        metavar="TASK/PRESET",
        help="presets to time (default: permutation/task1-demo, the smallest model: the largest overhead)",
    )
    parser.add_argument("--steps", type=positive_int, default=300, help="steps per run (default: 300)")
    parser.add_argument(
        "--repeats", type=int_range(1, 100), default=5, help="interleaved repeats (default 5)"
    )
    parser.add_argument(
        "--intervene",
        action="append",
        type=intervention_spec,
        metavar="SPEC",
        help=f"an intervention to time, repeatable (default: {', '.join(DEFAULT_SPECS)})",
    )
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    specs = args.intervene or list(DEFAULT_SPECS)
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for name in args.presets:
        task, _, preset = name.partition("/")
        variants: list[str | None] = [None, *specs]
        timed_run(task, preset, 2, specs[0])  # warm-up: first-call costs out of the measurement
        seconds: dict[str | None, list[float]] = {v: [] for v in variants}
        for repeat in range(args.repeats):
            shift = repeat % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                seconds[variant].append(timed_run(task, preset, args.steps, variant))
        for spec in specs:
            ratios = [t / p for t, p in zip(seconds[spec], seconds[None])]
            rows.append(
                [
                    name,
                    spec,
                    f"{statistics.median(seconds[None]):.2f}",
                    f"{statistics.median(seconds[spec]):.2f}",
                    f"{statistics.median(ratios):.3f}",
                    f"{max(ratios):.3f}",
                ]
            )
    print_table(rows, ["preset", "intervention", "plain s (median)", "intervened s", "median ratio", "worst"])
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{args.steps} steps a run, {args.repeats} interleaved repeats, 1 torch thread")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
