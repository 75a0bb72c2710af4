"""Triggered-bigram generation: the vectorised sampler
vs a per-token loop written like the authors' generator.

    python -m mechmem_papers.birth.benchmarks.data --batch 512 --seq-len 256

Prints sequences per second for both and their ratio (goal: >= 50x).
"""

import argparse

import torch

from mechmem.cli import run_script
from mechmem.tasks.birth.corpus import load_stats
from mechmem.tasks.birth.data import TriggerSampler, generation_speed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512, help="sequences per batch")
    parser.add_argument("--seq-len", type=int, default=256, help="sequence length T")
    parser.add_argument("--triggers", type=int, default=5, help="number of triggers K")
    parser.add_argument("--fixed", action="store_true", help="fixed instead of random triggers")
    parser.add_argument(
        "--ref-seqs", type=int, default=64, help="sequences the reference loop generates per repeat"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--corpus", default=None, help="text corpus or statistics JSON (default: tiny Shakespeare)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sampler = TriggerSampler(
        load_stats(args.corpus), seq_len=args.seq_len, n_triggers=args.triggers, fixed_triggers=args.fixed
    )
    fast, slow = generation_speed(sampler, batch=args.batch, ref_seqs=args.ref_seqs)
    triggers = "fixed" if args.fixed else "random"
    print(f"T={args.seq_len} K={args.triggers} {triggers} triggers, batch {args.batch}")
    print(f"{'vectorised':<24}{fast:>12.0f} seq/s")
    print(f"{'per-token loop (numpy)':<24}{slow:>12.0f} seq/s")
    print(f"{'speed-up':<24}{fast / slow:>12.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
