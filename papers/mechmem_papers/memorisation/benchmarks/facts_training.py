"""Per-init training time: 11 inits as one batched model versus the per-init loop, side by side in one run.

    # d=16, 1,024 facts, 30 epochs, attn and 2Emb
    python -m mechmem_papers.memorisation.benchmarks.facts_training
    python -m mechmem_papers.memorisation.benchmarks.facts_training --epochs 20 --mixing 2emb
    # the page's numbers
    python -m mechmem_papers.memorisation.benchmarks.facts_training --out \
        docs/reproductions/data/facts_benchmark.json

Both sides run the same fixed number of epochs (one lr phase, no early stop) from the same seeds. "sequential"
is `train_reference` (a hooked model and torch.optim.Adam per init); "batched" is `train_batched` on all
inits. The two alternate for `--rounds` rounds and each keeps its fastest round, so a machine shared with
other jobs slows both sides alike. The ratio is sequential per-init time over batched per-init time.
"""

import argparse
import sys
import time

import torch

from mechmem.cli import print_table, run_script, write_json
from mechmem.models.facts import FactsModelConfig
from mechmem.tasks.facts import generate_facts
from mechmem_papers.memorisation.batched import Schedule, train_batched, train_reference


def _time(train, *args) -> float:
    t0 = time.perf_counter()
    train(*args)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d", type=int, default=16, help="d_model = d_mlp = n_out; n_in = 2d")
    parser.add_argument("--n-facts", type=int, default=1024, help="facts to train on")
    parser.add_argument("--epochs", type=int, default=30, help="epochs per run (fixed, no early stop)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds; each side keeps its fastest"
    )
    parser.add_argument("--inits", type=int, default=11, help="initialisations")
    parser.add_argument(
        "--mixing", nargs="+", default=["attn", "2emb"], help="variants to time (MLP + norms on)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--out", default=None, help="write the timings as JSON (the page reads facts_benchmark.json)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    inputs, labels = generate_facts(args.n_facts, 2 * args.d, args.d)
    schedule = Schedule(lrs=(1e-2,), max_epochs=args.epochs, patience=args.epochs + 1, target_acc=1.0)
    seeds, per = list(range(args.inits)), 1e3 / (args.inits * args.epochs)  # seconds -> ms per init-epoch
    rows, record = [], []
    for mixing in args.mixing:
        cfg = FactsModelConfig(n_in=2 * args.d, n_out=args.d, d_model=args.d, d_mlp=args.d, mixing=mixing)
        seq, bat = float("inf"), float("inf")
        for _ in range(args.rounds):
            seq = min(seq, _time(train_reference, cfg, inputs, labels, seeds, schedule) * per)
            bat = min(bat, _time(train_batched, cfg, inputs, labels, seeds, schedule) * per)
        record.append(
            {
                "variant": cfg.name,
                "sequential_ms": round(seq, 3),
                "batched_ms": round(bat, 3),
                "speed_up": round(seq / bat, 2),
            }
        )
        rows.append([cfg.name, f"{seq:.3f}", f"{bat:.3f}", f"{seq / bat:.1f}x"])
    print(
        f"{args.inits} inits, d={args.d}, {args.n_facts} facts, {args.epochs} epochs,"
        f" {args.threads} thread(s), best of {args.rounds} alternating rounds; ms per init-epoch:"
    )
    print_table(rows, ["variant", "sequential", "batched", "speed-up"])
    if args.out:
        source = "python -m mechmem_papers.memorisation.benchmarks.facts_training " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        meta = {
            "epochs": args.epochs,
            "inits": args.inits,
            "d": args.d,
            "n_facts": args.n_facts,
            "threads": args.threads,
            "rounds": args.rounds,
        }
        write_json(args.out, {"source": source.strip(), **meta, "rows": record})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
