"""Peak memory and time of one intervention-engine call on a large random model, at a given cache budget.

    python benchmarks/engine_memory.py --size 12x768x12 --n 64 --cache-mb 256        # about a minute of CPU
    python benchmarks/engine_memory.py --size 2x64 --n 32 --cache-mb 1e6              # seconds

Builds the random LayerNorm + GELU model of benchmarks/report_scaling.py (`LAYERSxD_MODEL[xHEADS][@N_CTX]`),
draws --n input and --n reference sequences, and asks one `Engine` (cache budget --cache-mb; 1e6 keeps every
run whole, the engine's behaviour before row chunks) for the metric under the mean ablation of every layer's
mlp_out (the mean over the reference) and the clean run; the metric is the mean log-probability of token 3 at
the last position. Prints the row chunks, the wall and CPU time, the rise of the process's peak resident
memory during the call (getrusage ru_maxrss) and the values, so that two runs at different budgets can be
compared number for number. Run each budget in its own process: the peak only grows.
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

from mechmem.analysis.interventions import Engine, Intervention, mean

sys.path.insert(
    0, str(Path(__file__).resolve().parent)
)  # the model builder of the benchmark next to this one
from report_scaling import build, parse_size


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="12x768x12", help="LAYERSxD_MODEL[xHEADS][@N_CTX]")
    parser.add_argument("--n", type=int, default=64, help="input sequences (and as many reference ones)")
    parser.add_argument("--cache-mb", type=float, default=1024.0, help="the engine's cache budget, MiB")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    try:
        args = parser.parse_args(argv)
        size = parse_size(args.size, 4, 64)
        if args.n < 1 or args.cache_mb <= 0:
            raise argparse.ArgumentTypeError("--n and --cache-mb must be positive")
    except argparse.ArgumentTypeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    model, _ = build(size, 64, 0)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 64, (args.n, size["n_ctx"]), generator=gen)
    reference = torch.randint(0, 64, (args.n, size["n_ctx"]), generator=gen)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1].log_softmax(-1)[:, 3].mean()

    setter = mean(reference)
    variants = [Intervention(f"blocks.{l}.hook_mlp_out", (), setter) for l in range(size["layers"])] + [[]]
    before, wall, cpu = peak_mb(), time.perf_counter(), time.process_time()
    engine = Engine(model, metric, cache_mb=args.cache_mb)
    values = [float(v) for v in engine.run(tokens, variants)]
    record = {
        **size,
        "n": args.n,
        "cache_mb": args.cache_mb,
        "chunks": len(engine.row_chunks(tokens)),
        "seconds": time.perf_counter() - wall,
        "cpu_seconds": time.process_time() - cpu,
        "peak_rss_mb": peak_mb(),
        "rss_rise_mb": peak_mb() - before,
        "values": values,
    }
    print(
        f"{args.size} n={args.n} cache_mb={args.cache_mb:g}: {record['chunks']} chunks, "
        f"{record['seconds']:.0f} s wall, {record['cpu_seconds']:.0f} s CPU, peak RSS {before:.0f} -> "
        f"{record['peak_rss_mb']:.0f} MB (rise {record['rss_rise_mb']:.0f})"
    )
    print("values", " ".join(f"{v:.6f}" for v in values))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
