"""How low a model that learns the training mappings can answer the held-out ones, per step, over splits.

    # CPU: about a second per split
    python -m mechmem_papers.permutation.scripts.split_prior --splits 100 \
        --out docs/reproductions/data/permutation_split_prior.json

The test mappings are the training mappings' complement, so a model that learns which permutations it was
trained on prefers, at steps 1 to V-1, answers the held-out mappings give less often than uniform. This script
computes, for the task's split with `split_seed` 0 .. splits-1, the per-step accuracy on every held-out
sequence (each test mapping in each x order, ties split evenly) of the predictor that knows the training
mappings exactly: it answers with the y most training mappings consistent with the prefix give the current x,
and where none is consistent, uniformly over the unused y. Between it and the Bayes accuracy lies every model
that has learnt part of that prior. The page sets the published steps' accuracy beside this range (the
authors' split is unknown). No training: nothing here is random beyond the splits.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import itertools
from pathlib import Path

from mechmem.cli import ArgumentParser, check_out_dir, positive_int, run_script, write_json


def train_prior_accuracy(train: list[tuple[int, ...]], test: list[tuple[int, ...]]) -> list[float]:
    """Per step, the accuracy on every (test mapping, x order) of the training-mapping predictor above."""
    v = len(train[0])
    hits = [0.0] * v
    orders = list(itertools.permutations(range(1, v + 1)))
    for mapping in test:
        for order in orders:
            for k, x in enumerate(order):
                seen = order[:k]
                consistent = [t for t in train if all(t[a - 1] == mapping[a - 1] for a in seen)]
                if consistent:
                    counts = {y: sum(t[x - 1] == y for t in consistent) for y in range(1, v + 1)}
                    best = [y for y, c in counts.items() if c == max(counts.values())]
                else:
                    used = {mapping[a - 1] for a in seen}
                    best = [y for y in range(1, v + 1) if y not in used]
                hits[k] += (mapping[x - 1] in best) / len(best)
    return [h / (len(test) * len(orders)) for h in hits]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--splits", type=positive_int, default=100, help="split seeds 0 .. N-1, >= 1")
    args = parser.parse_args(argv)
    check_out_dir(Path(args.out).parent, flag="--out")
    from mechmem.tasks.permutation import PermutationConfig, PermutationTask

    rows = []
    for seed in range(args.splits):
        maps = PermutationTask(PermutationConfig(split_seed=seed)).mappings
        train, test = ([tuple(p) for p in maps[k].tolist()] for k in ("train", "test"))
        rows.append([round(a, 5) for a in train_prior_accuracy(train, test)])
    write_json(
        args.out,
        {
            "vocab_size": PermutationConfig().vocab_size,
            "split_seeds": args.splits,
            "step_accuracy": rows,
            "ours": rows[0],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
