"""Seven commands against one: the README's analysis commands run one process each, beside one
`mechmem analyse` on the same checkpoint, wall and CPU seconds side by side in one run.

    python benchmarks/commands.py                      # trains task2-quick for --steps, then both ways
    python benchmarks/commands.py --ckpt runs/t2/ckpt.pt --n-samples 128

The seven are `mechmem heads`, `ablate`, `patch`, `lens`, `probe`, `circuit` and `report` (each with its own
defaults, or --n-samples for all), each a fresh interpreter as a user types them; `mechmem analyse` runs the
same seven with the same flags in one process. CPU seconds are the children's user + system time
(`resource.getrusage`). The machine's load averages are printed before and after: the figures are only
comparable within one run.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEVEN = ("heads", "ablate", "patch", "lens", "probe", "circuit", "report")


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one command, run to its end; a failure stops the benchmark with its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"error: {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ckpt", default=None, help="checkpoint to analyse (default: train one)")
    parser.add_argument("--steps", type=int, default=300, help="training steps when no --ckpt (default 300)")
    parser.add_argument("--n-samples", type=int, default=None, help="sequences for every analysis")
    args = parser.parse_args(argv)
    mechmem = [sys.executable, "-m", "mechmem"]
    extra = ["--n-samples", str(args.n_samples)] if args.n_samples else []
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.ckpt
        if ckpt is None:
            run = Path(tmp) / "t2"
            timed(
                [
                    *mechmem,
                    "train",
                    "permutation",
                    "--preset",
                    "task2-quick",
                    "--steps",
                    str(args.steps),
                    "--out",
                    str(run),
                    "--no-progress",
                ]
            )
            ckpt = str(run / "ckpt.pt")
        print(f"load averages before: {os.getloadavg()}; checkpoint {ckpt}")
        rows, total_wall, total_cpu = [], 0.0, 0.0
        for name in SEVEN:
            wall, cpu = timed([*mechmem, name, ckpt, "--out", f"{tmp}/{name}", *extra])
            rows.append((f"mechmem {name}", wall, cpu))
            total_wall, total_cpu = total_wall + wall, total_cpu + cpu
        one_wall, one_cpu = timed([*mechmem, "analyse", ckpt, "--out", f"{tmp}/all", *extra])
        print(f"load averages after: {os.getloadavg()}")
    for label, wall, cpu in [
        *rows,
        ("seven commands", total_wall, total_cpu),
        ("mechmem analyse", one_wall, one_cpu),
    ]:
        print(f"{label:>18s}  wall {wall:7.1f} s  CPU {cpu:7.1f} s")
    print(
        f"{'ratio':>18s}  wall {total_wall / one_wall:7.2f}x  CPU {total_cpu / one_cpu:7.2f}x (seven / one)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
