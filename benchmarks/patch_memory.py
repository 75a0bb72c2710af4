"""Peak memory of the activation patching sweeps at several memory budgets: the peak follows the budget.

    python benchmarks/patch_memory.py                                  # 4 x 256, 32 pairs, 16 and 512 MB
    python benchmarks/patch_memory.py --size 12x768x12 --budgets 200 2000 --n 64    # the GPT-2-small shape

Each budget runs in a fresh process (ru_maxrss only grows): it builds the random LayerNorm + GELU model of
benchmarks/report_scaling.py (`LAYERSxD_MODEL[xHEADS][@N_CTX]`, seed 0), draws --n clean/corrupted pairs of
the repeats task sized to it and runs every patching sweep the model has (`run_sweeps(..., memory_mb=BUDGET)`)
on one torch thread. It prints, per budget, the rise of the process's peak resident memory during the sweeps
(getrusage ru_maxrss), the CPU seconds, and the largest difference of any cell from the first budget's values
(the budget changes how the work is chunked, never the numbers).
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the model builder of the benchmark beside this one


def one(size_text: str, n: int, budget: float) -> dict:
    """Measure one budget in this process."""
    import torch
    from report_scaling import build, parse_size

    from mechmem.analysis.patching import run_sweeps

    torch.set_num_threads(1)
    model, task = build(parse_size(size_text, 4, 64), 64, 0)
    pair = task.patching_pair(n, generator=torch.Generator().manual_seed(0))
    before, cpu = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, time.process_time()
    with torch.no_grad():
        results = run_sweeps(model, pair, memory_mb=budget)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    values = {name: r.values.flatten().tolist() for name, r in results.items()}
    cpu = time.process_time() - cpu
    return {"budget_mb": budget, "rise_mb": peak - before, "peak_mb": peak, "cpu_s": cpu, "values": values}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="4x256", help="LAYERSxD_MODEL[xHEADS][@N_CTX] (default 4x256)")
    parser.add_argument("--n", type=int, default=32, help="clean/corrupted pairs (default 32)")
    parser.add_argument("--budgets", type=float, nargs="+", default=[16.0, 512.0], help="MB (default 16 512)")
    parser.add_argument("--one", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.size, args.n, args.one)))
        return 0
    rows = []
    for budget in args.budgets:
        cmd = [sys.executable, __file__, "--size", args.size, "--n", str(args.n), "--one", str(budget)]
        rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    first = rows[0]["values"]
    print(f"{args.size}, {args.n} pairs, every sweep, 1 thread:")
    print(f"{'budget MB':>10} {'peak rise MB':>13} {'CPU s':>7} {'max |diff|':>11}")
    for row in rows:
        diff = max(abs(a - b) for k in first for a, b in zip(first[k], row["values"][k]))
        print(f"{row['budget_mb']:>10.0f} {row['rise_mb']:>13.0f} {row['cpu_s']:>7.1f} {diff:>11.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
