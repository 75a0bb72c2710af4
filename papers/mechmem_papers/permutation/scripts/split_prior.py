"""How a model that learns the training mappings answers the held-out ones, per step, over splits.

    # CPU: about a second per split
    python -m mechmem_papers.permutation.scripts.split_prior --splits 100 \
        --out docs/reproductions/data/permutation_split_prior.json

The test mappings are the training mappings' complement, so a model that learns which permutations it was
trained on prefers, at steps 1 to V-1, answers the held-out mappings give less often than uniform. This script
takes, for the task's split with `split_seed` 0 .. splits-1, the posterior that knows the training mappings
exactly (the optimum of a model trained on them: each y weighted by the training mappings consistent with the
prefix that give it to the current x; where none is consistent, uniform over the unused y) and measures it on
every held-out sequence (each test mapping in each x order) against the Bayes posterior, per step: accuracy
(its argmax, ties split evenly), MAE over the V + 1 output entries and the largest entry error. Between it and
the Bayes posterior lies every model that has learnt part of that prior. The page sets the published steps
beside these ranges (the authors' split is unknown). No training: nothing here is random beyond the splits.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import itertools
from dataclasses import dataclass
from pathlib import Path

from mechmem.cli import ArgumentParser, check_out_dir, positive_int, run_script, write_json


@dataclass(frozen=True)
class PriorSteps:
    """Per answer step, the training-mapping posterior on every held-out (mapping, x order)."""

    accuracy: list[float]
    """Its argmax (ties split evenly) against the held-out answer."""
    mae: list[float]
    """Mean |posterior - Bayes posterior| over sequences and the V + 1 output entries (token 0 included)."""
    max_err: list[float]
    """The largest such entry error over every held-out sequence."""


def train_prior_steps(train: list[tuple[int, ...]], test: list[tuple[int, ...]]) -> PriorSteps:
    """Per step, the training-mapping posterior above against the held-out answers and the Bayes posterior."""
    v = len(train[0])
    hits, err_sum, err_max = [0.0] * v, [0.0] * v, [0.0] * v
    orders = list(itertools.permutations(range(1, v + 1)))
    for mapping in test:
        for order in orders:
            for k, x in enumerate(order):
                seen = order[:k]
                used = {mapping[a - 1] for a in seen}
                bayes = {y: (y not in used) / (v - k) for y in range(1, v + 1)}
                consistent = [t for t in train if all(t[a - 1] == mapping[a - 1] for a in seen)]
                if consistent:
                    post = {y: sum(t[x - 1] == y for t in consistent) / len(consistent) for y in bayes}
                else:
                    post = bayes
                best = [y for y, p in post.items() if p == max(post.values())]
                hits[k] += (mapping[x - 1] in best) / len(best)
                errors = [abs(post[y] - bayes[y]) for y in bayes]
                err_sum[k] += sum(errors)
                err_max[k] = max(err_max[k], *errors)
    n = len(test) * len(orders)
    return PriorSteps(
        accuracy=[h / n for h in hits], mae=[e / (n * (v + 1)) for e in err_sum], max_err=err_max
    )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--splits", type=positive_int, default=100, help="split seeds 0 .. N-1, >= 1")
    args = parser.parse_args(argv)
    check_out_dir(Path(args.out).parent, flag="--out")
    from mechmem.tasks.permutation import PermutationConfig, PermutationTask

    steps = []
    for seed in range(args.splits):
        maps = PermutationTask(PermutationConfig(split_seed=seed)).mappings
        train, test = ([tuple(p) for p in maps[k].tolist()] for k in ("train", "test"))
        steps.append(train_prior_steps(train, test))

    def column(name: str) -> list[list[float]]:
        return [[round(a, 5) for a in getattr(s, name)] for s in steps]

    write_json(
        args.out,
        {
            "vocab_size": PermutationConfig().vocab_size,
            "split_seeds": args.splits,
            **{f"step_{name}": column(name) for name in ("accuracy", "mae", "max_err")},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
