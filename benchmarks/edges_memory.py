"""Peak memory and time of the report's edge section, this tree's code beside another's, in one run.

    python benchmarks/edges_memory.py                      # 12x768x12 on 1, 2 prompts; 8x256 on 4, 8, 64
    python benchmarks/edges_memory.py --runs 2x64:8 --baseline /work/main/src       # about a minute

Each run SIZE:PROMPTS is a random LayerNorm + GELU model LxD[xH] built by `build_transformer` (MLP 4 D,
context --n-ctx, vocabulary --d-vocab, the generic repeats task sized to it: `report_scaling.build`) and the
edge section's computation on PROMPTS prompts: `circuit_prompts` then `discover_circuit(ablation="mean")`,
what the report's edge section (`mechmem.report.circuit_graph.edges_section`) calls. Every run is a fresh
subprocess on one torch thread, once with this tree's src ("after") and once with --baseline's src first on
the path ("before", default /work/main/src); the two of a run start together, so they share the machine's
load. Each child prints its peak resident memory (getrusage ru_maxrss), the memory before the section (model,
prompts and imports), wall and CPU seconds and the forward calls on the model (a forward pre-hook, as the
report's cost counts them; a pass resumed at a later layer counts as a full one, the replay's and backward
passes are not counted), and the floor of that counted work (`floor.py`). With two prompt counts of one size
the table's last rows give the memory per prompt (the slope of the peak).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import forward_flops, matmul_rate
from report_scaling import build, parse_size

from mechmem.cli import format_table

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("12x768x12:1", "8x256:4", "8x256:8", "12x768x12:2", "8x256:64")
HEADERS = ["size", "prompts", "code", "edges", "peak MB", "before MB", "rise MB", "wall s", "cpu s"]
HEADERS += ["rows", "floor s", "cpu/floor"]


def child(run: str, args: argparse.Namespace) -> None:
    """One edge section in this process; prints one JSON line."""
    from mechmem.analysis.circuits.discovery import circuit_prompts, discover_circuit

    torch.set_num_threads(1)
    text, prompts = run.split(":")
    model, task = build(parse_size(text, args.heads, args.n_ctx), args.d_vocab, seed=0)
    pair, _ = circuit_prompts(model, task, int(prompts), 0)
    rows = [0]

    def count(module: torch.nn.Module, inputs: tuple, kwargs: dict) -> None:
        rows[0] += len(inputs[0] if inputs else kwargs["input"])

    model.register_forward_pre_hook(count, with_kwargs=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    start, cpu = time.perf_counter(), time.process_time()
    circuit = discover_circuit(model, pair, ablation="mean")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    flops = rows[0] * forward_flops(model.cfg, 1, pair.clean.shape[1])
    out = {"edges": len(circuit.graph.edges), "peak_mb": peak, "before_mb": before, "wall_s": wall}
    out |= {"cpu_s": cpu, "rows": rows[0], "flops": flops, "rate": matmul_rate()}
    print(json.dumps(out))


def start(run: str, src: Path, args: argparse.Namespace) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--child", run, "--heads", str(args.heads)]
    command += ["--n-ctx", str(args.n_ctx), "--d-vocab", str(args.d_vocab)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", nargs="+", default=list(RUNS), help="SIZE:PROMPTS, e.g. 12x768x12:4")
    parser.add_argument(
        "--baseline", type=Path, default=Path("/work/main/src"), help="src of the before code"
    )
    parser.add_argument("--heads", type=int, default=8, help="heads where a size names none")
    parser.add_argument("--n-ctx", type=int, default=64, help="context (sequence length)")
    parser.add_argument("--d-vocab", type=int, default=64, help="vocabulary")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args)
        return 0
    rows = []
    for run in args.runs:
        procs = {
            code: start(run, src, args) for code, src in (("before", args.baseline), ("after", ROOT / "src"))
        }
        for code, proc in procs.items():
            out = json.loads(proc.communicate()[0].strip().splitlines()[-1])
            floor_s = out["flops"] / out["rate"]
            size, prompts = run.split(":")
            rows.append(
                [size, int(prompts), code, out["edges"], out["peak_mb"], out["before_mb"]]
                + [out["peak_mb"] - out["before_mb"], out["wall_s"], out["cpu_s"], out["rows"], floor_s]
                + [out["cpu_s"] / floor_s]
            )
            print(f"{run} {code}: {json.dumps(out)}", flush=True)  # as each ends: a long run may be stopped
    print(format_table(rows, HEADERS, floatfmt=".4g"))
    by_size: dict[tuple[str, str], list[list]] = {}
    for row in rows:
        by_size.setdefault((row[0], row[2]), []).append(row)
    for (size, code), group in by_size.items():
        if len({r[1] for r in group}) > 1:
            lo, hi = min(group, key=lambda r: r[1]), max(group, key=lambda r: r[1])
            slope = (hi[4] - lo[4]) / (hi[1] - lo[1])
            print(f"{size} {code}: peak memory per prompt {slope:.0f} MB ({lo[1]} -> {hi[1]} prompts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
