"""Epochs and wall time of single batched trainings under a schedule:
the inputs of docs/distributed.md's cost.

    # the published schedule
    python -m mechmem_papers.memorisation.benchmarks.facts_schedule --n-facts 192 512 --mixing 2emb attn
    # a capped one, seconds
    python -m mechmem_papers.memorisation.benchmarks.facts_schedule --max-epochs 150 --patience 50 \
        --n-facts 256

One row per (variant, fact count): 11 inits trained as one stack (`train_batched`, d = 16, n_in = 32, MLP and
norms on), the epochs the longest init ran (all phases), the mean over inits, the inits that stored every
fact, the wall time, and ms per epoch of the stack (wall time over the longest init's epochs: an upper bound
per epoch, since finished inits leave the stack). A capacity search trains once per fact count it tries (13-17
per cell in the committed table), so a cell costs about that many such rows.
"""

import argparse
import time

import torch

from mechmem.cli import print_table, run_script
from mechmem.models.facts import FactsModelConfig
from mechmem.tasks.facts import generate_facts
from mechmem_papers.memorisation.batched import Schedule, train_batched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d", type=int, default=16, help="d_model = d_mlp = n_out; n_in = 2d")
    parser.add_argument("--n-facts", type=int, nargs="+", default=[192, 512], help="fact counts to train on")
    parser.add_argument("--mixing", nargs="+", default=["2emb", "attn"], help="variants (MLP + norms on)")
    parser.add_argument(
        "--max-epochs", type=int, default=50_000, help="epoch cap per lr phase (published 50,000)"
    )
    parser.add_argument(
        "--patience", type=int, default=5_000, help="epochs without improvement (published 5,000)"
    )
    parser.add_argument("--inits", type=int, default=11, help="initialisations")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    schedule = Schedule(max_epochs=args.max_epochs, patience=args.patience)
    rows = []
    for mixing in args.mixing:
        cfg = FactsModelConfig(n_in=2 * args.d, n_out=args.d, d_model=args.d, d_mlp=args.d, mixing=mixing)
        for n in args.n_facts:
            inputs, labels = generate_facts(n, 2 * args.d, args.d)
            t0 = time.perf_counter()
            out = train_batched(cfg, inputs, labels, list(range(args.inits)), schedule, device=args.device)
            seconds, longest = time.perf_counter() - t0, int(out.epochs.max())
            rows.append(
                [
                    cfg.name,
                    str(n),
                    str(longest),
                    f"{out.epochs.float().mean():.0f}",
                    str(out.n_success),
                    f"{seconds:.1f}",
                    f"{seconds * 1e3 / max(longest, 1):.2f}",
                ]
            )
            print_table(
                rows[-1:], ["variant", "facts", "epochs max", "epochs mean", "stored", "s", "ms/epoch"]
            )
    print(f"\n{args.inits} inits, d={args.d}, {args.max_epochs} epochs/phase, patience {args.patience}:")
    print_table(rows, ["variant", "facts", "epochs max", "epochs mean", "stored", "s", "ms/epoch"])
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
