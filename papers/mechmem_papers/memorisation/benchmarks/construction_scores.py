"""The hybrid search's score, the whole stack trained to the end versus `unembedding_score`, side by side.

    # the authors' hybrid grid at d = 32: a count it stores (acc = 1 reached) and one it does not
    python -m mechmem_papers.memorisation.benchmarks.construction_scores --d 32 --n-facts 320 600

Both sides train U on the published embeddings of every (S, top_fraction) setting of the authors' grid,
from the same draw. "whole stack" is `train_unembedding(...)[0].max()`: every model trains until the last
one stops. "score" is `unembedding_score`: stopped models leave the stack and the run ends at the first
perfect one. The two alternate for `--rounds` rounds and each keeps its fastest, so a machine shared with
other jobs slows both alike; the scores must be equal.
"""

import argparse
import time

import torch

from mechmem.cli import print_table, run_script
from mechmem.errors import MechmemError
from mechmem_papers.memorisation.constructions.evaluators import (
    SweepGrid,
    authors_hybrid_settings,
    challenge_facts,
    published_stack,
)
from mechmem_papers.memorisation.constructions.training import (
    hidden_activations,
    train_unembedding,
    unembedding_score,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d", type=int, default=32, help="d_mlp = n_out; n_in = 2d")
    parser.add_argument("--n-facts", type=int, nargs="+", default=[320, 600], help="fact counts")
    parser.add_argument(
        "--rounds", type=int, default=1, help="alternating rounds; each side keeps its fastest"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    grid = SweepGrid()
    settings = authors_hybrid_settings(args.d, grid)
    rows = []
    for n in args.n_facts:
        inputs, labels = challenge_facts(n, args.d)
        E1, E2, _ = published_stack(n, args.d, settings, 0)
        hidden = hidden_activations(E1, E2, inputs)
        times: dict[str, list[float]] = {"whole": [], "score": []}
        scores = {}
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            best, _ = train_unembedding(
                hidden, labels, args.d, grid.train, generator=torch.Generator().manual_seed(0)
            )
            times["whole"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            scores["score"] = unembedding_score(
                hidden, labels, args.d, grid.train, generator=torch.Generator().manual_seed(0)
            )
            times["score"].append(time.perf_counter() - t0)
            scores["whole"] = float(best.max())
        if scores["whole"] != scores["score"]:
            raise MechmemError(f"the scores differ at n = {n}: {scores}")
        whole, fast = min(times["whole"]), min(times["score"])
        rows.append(
            [n, len(settings), f"{scores['score']:.4f}", f"{whole:.1f}", f"{fast:.1f}", f"{whole / fast:.2f}"]
        )
    print_table(rows, ["facts", "settings", "best accuracy", "whole stack s", "score s", "ratio"])
    return 0


if __name__ == "__main__":
    run_script(main)
