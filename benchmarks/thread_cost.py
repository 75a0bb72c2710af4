"""CPU cost of one report with torch's own thread count and with mechmem's choice, on a quiet machine and
beside a busy process, side by side.

    python benchmarks/thread_cost.py                              # random 4 x 128 model, 64 samples: minutes
    python benchmarks/thread_cost.py --size 8x256 --n-samples 512  # the 8 x 256 report: much longer

Saves a random LayerNorm + GELU model of benchmarks/report_scaling.py (`LAYERSxD_MODEL[xHEADS][@N_CTX]`, seed
0) as a checkpoint and runs `mechmem report CKPT --n-samples N` four times in fresh processes: with `--threads
T0` (T0: what torch chooses by itself in a fresh process, the behaviour before `mechmem.threads`) and with no
flag (mechmem's choice, `mechmem.threads.choose_threads`), first on the machine as it is ("quiet"), then
beside one busy process (a Python loop on one core), started --settle seconds before so that the one-minute
load average has seen it. Each run's CPU seconds are its own (getrusage of the children), with its wall time
and the load average when it started. MECHMEM_THREADS and OMP_NUM_THREADS are removed from the runs'
environment.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the model builder of the benchmark beside this one

BUSY = "while True: pass"
"""The busy process: one core spinning."""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_report(ckpt: Path, out: Path, n: int, threads: int | None, env: dict) -> dict:
    """One `mechmem report` in a fresh process: its CPU and wall seconds, the load when it started."""
    cmd = [sys.executable, "-c", "from mechmem.cli.main import entry_point; entry_point()"]
    cmd += ["report", str(ckpt), "--out", str(out), "--n-samples", str(n)]
    cmd += [] if threads is None else ["--threads", str(threads)]
    load, cpu, wall = os.getloadavg()[0], children_cpu(), time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return {"load": load, "cpu_s": children_cpu() - cpu, "wall_s": time.perf_counter() - wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="4x128", help="LAYERSxD_MODEL[xHEADS][@N_CTX] (default 4x128)")
    parser.add_argument("--n-samples", type=int, default=64, help="the report's --n-samples (default 64)")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds the busy process runs first")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    import torch
    from report_scaling import build, parse_size

    from mechmem.checkpoint import save_model
    from mechmem.threads import available_cpus, choose_threads

    env = {k: v for k, v in os.environ.items() if k not in ("MECHMEM_THREADS", "OMP_NUM_THREADS")}
    probe = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    torch_default = int(subprocess.run(probe, check=True, capture_output=True, text=True, env=env).stdout)
    folder = Path(tempfile.mkdtemp(prefix="thread-cost."))
    model, _ = build(parse_size(args.size, 4, 64), 64, 0)
    ckpt = save_model(model, folder / "ckpt.pt")
    del model, torch
    rows = []
    settings = [("torch default", torch_default), ("mechmem choice", None)]
    for condition in ("quiet", "busy"):
        busy = None
        if condition == "busy":
            busy = subprocess.Popen([sys.executable, "-c", BUSY])
            time.sleep(args.settle)
        try:
            for name, threads in settings:
                row = run_report(ckpt, folder / "report", args.n_samples, threads, env)
                chosen = threads if threads is not None else "auto"
                rows.append({"condition": condition, "setting": name, "threads": chosen, **row})
                print(json.dumps(rows[-1]), flush=True)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
    print(f"\n{args.size} report, --n-samples {args.n_samples}; {available_cpus()} CPUs; torch default "
          f"{torch_default} threads; mechmem's choice now {choose_threads()}")  # fmt: skip
    print(f"{'condition':<8} {'setting':<15} {'threads':>7} {'load':>5} {'CPU s':>7} {'wall s':>7}")
    for r in rows:
        print(
            f"{r['condition']:<8} {r['setting']:<15} {r['threads']!s:>7} {r['load']:>5.2f} "
            f"{r['cpu_s']:>7.1f} {r['wall_s']:>7.1f}"
        )
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
