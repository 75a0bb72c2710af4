"""Triggered-bigram generation: the vectorised sampler vs a per-token loop written like the authors' generator.

    python benchmarks/birth_data.py --batch 512 --seq-len 256

Prints sequences per second for both and their ratio (goal: >= 50x).
"""

import argparse
import time

import numpy as np
import torch

from mechmem.birth.corpus import load_stats
from mechmem.birth.data import TriggerSampler, reference_sequences
from mechmem.cli import run_script


def per_second(fn, n: int, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return n * repeats / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="sequences per batch")
    parser.add_argument("--seq-len", type=int, default=256, help="sequence length T")
    parser.add_argument("--triggers", type=int, default=5, help="number of triggers K")
    parser.add_argument("--fixed", action="store_true", help="fixed instead of random triggers")
    parser.add_argument("--ref-seqs", type=int, default=64, help="sequences the reference loop generates per repeat")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sampler = TriggerSampler(
        load_stats(), seq_len=args.seq_len, n_triggers=args.triggers, fixed_triggers=args.fixed
    )
    gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
    fast = per_second(lambda: sampler.sample(args.batch, generator=gen), args.batch, 5)
    slow = per_second(lambda: reference_sequences(sampler, args.ref_seqs, rng=rng), args.ref_seqs, 2)
    print(f"T={args.seq_len} K={args.triggers} {'fixed' if args.fixed else 'random'} triggers, batch {args.batch}")
    print(f"{'vectorised (torch)':<24}{fast:>12.0f} seq/s")
    print(f"{'per-token loop (numpy)':<24}{slow:>12.0f} seq/s")
    print(f"{'speed-up':<24}{fast / slow:>12.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
