"""The one capacity search: both brackets against a brute-force scan, the published trace, replays of the
committed sweeps (the merged search retraces every recorded search exactly), and a tiny end-to-end search."""

import json
import random
from contextlib import contextmanager

import pytest
import torch
from helpers import ROOT

from mechmem.errors import MechmemError
from mechmem.models.facts import FactsModelConfig
from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.capacity import (
    CRITERIA,
    THRESHOLDS,
    CapacityResult,
    find_capacity,
    measure_capacity,
)
from mechmem_papers.memorisation.search import Memo, authors_counts, search_capacity

DATA = ROOT / "docs" / "reproductions" / "data"


@contextmanager
def torch_default_dtype(dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def brute_force(passes, limit: int) -> int:
    """The true answer for a monotone oracle: the largest n in [1, limit] that passes (0 if none)."""
    return max((n for n in range(1, limit + 1) if passes(n)), default=0)


@pytest.mark.parametrize("bracket", ["authors", "doubling"])
@pytest.mark.parametrize("precision", [1, 8])
def test_search_against_brute_force(bracket, precision):
    limit = 300
    for threshold in range(limit + 1):
        calls = []

        def passes(n, threshold=threshold, calls=calls):
            calls.append(n)
            return n <= threshold

        result = search_capacity(passes, limit, precision=precision, bracket=bracket, start=16)
        truth = brute_force(lambda n, threshold=threshold: n <= threshold, limit)
        assert truth - precision <= result.best <= truth
        if precision == 1:
            # At precision 1 the doubling bracket is exact; the authors' loop can stop one short (their rule).
            assert result.best == truth if bracket == "doubling" else truth - 1 <= result.best
        assert len(calls) == len(set(calls)) == len(result.trace)
        assert all(ok == (n <= threshold) for n, ok in result.trace)


def test_authors_trace_is_the_published_one():
    result = search_capacity(lambda n: n <= 208, 1024, precision=8)
    assert result.best == 208
    assert result.trace == [
        (512, False),
        (256, False),
        (128, True),
        (192, True),
        (224, False),
        (208, True),
        (216, False),
    ]
    assert search_capacity(lambda n: True, 1024).trace[-1] == (1024, True)


def test_doubling_edges():
    assert search_capacity(lambda n: False, 1024, bracket="doubling", start=16).best == 0
    assert search_capacity(lambda n: True, 100, bracket="doubling", start=16, precision=1).best == 100


def test_search_rejects_bad_input():
    with pytest.raises(MechmemError):
        search_capacity(lambda n: True, 10, precision=0)
    with pytest.raises(MechmemError):
        search_capacity(lambda n: True, 10, bracket="ternary")


def test_memo_shares_evaluations_across_criteria():
    calls = []
    result = measure_capacity(
        lambda n: calls.append(n) or (1.0 if n <= 203 else 0.95 if n <= 400 else 0.5),
        {c: (lambda acc, t=t: acc >= t) for c, t in THRESHOLDS.items()},
        1024,
        name="x",
        d=16,
        bracket="doubling",
        start=16,
        score="accuracy",
    )
    assert 195 < result["1"] <= 203 and 392 < result["0.9"] <= 400
    assert len(calls) == len(set(calls)) == len(result.scores)
    assert CapacityResult.from_dict(json.loads(json.dumps(result.to_dict()))).to_dict() == result.to_dict()
    memo = Memo(lambda n: n * 2)
    assert memo(3) == memo(3) == 6 and memo.cache == {3: 6}


def test_committed_facts_searches_replay():
    """Every search in the committed sweep files is what the merged search does on the recorded successes."""
    lines = (DATA / "facts_table.jsonl").read_text().splitlines() + (
        DATA / "facts_scaling.jsonl"
    ).read_text().splitlines()
    for line in lines:
        result = CapacityResult.from_dict(json.loads(line))
        seeds = len(result.info["seeds"])
        for crit, search in result.searches.items():

            def passes(n, rule=CRITERIA[crit], scores=result.scores, seeds=seeds):
                return rule(scores[n], seeds)

            again = search_capacity(
                passes,
                result.info["config"]["n_in"] ** 2,
                precision=result.info["precision"],
            )
            assert again == search


def test_committed_constructions_searches_replay():
    data = json.loads((DATA / "constructions_capacity_full.json").read_text())
    for row in data["results"]:
        result = CapacityResult.from_dict(row)
        for crit, search in result.searches.items():

            def passes(n, scores=result.scores, threshold=THRESHOLDS[crit]):
                return scores[n] >= threshold

            again = search_capacity(
                passes,
                4 * result.d**2,
                precision=result.info["precision"],
                bracket="doubling",
                start=result.d,
            )
            assert again == search


@pytest.mark.parametrize(("limit", "precision"), [(1024, 8), (4096, 32), (300, 1), (64, 3), (9, 8)])
def test_authors_counts_hold_every_count_a_search_tries(limit, precision):
    counts = set(authors_counts(limit, precision))
    assert len(counts) == len(authors_counts(limit, precision)) and counts <= set(range(1, limit + 1))
    rng, seen = random.Random(0), set()
    for trial in range(400):  # monotone and noisy oracles reach every branch
        threshold = rng.randint(0, limit + 1)
        noise = 0.0 if trial % 2 else 0.3
        result = search_capacity(
            lambda n, t=threshold, q=noise: rng.random() < 0.5 if rng.random() < q else n <= t,
            limit,
            precision=precision,
        )
        seen |= {n for n, _ in result.trace}
    assert seen <= counts
    assert len(counts) - len(seen) <= len(counts) // 8  # the tree is not padded with counts never tried
    for trial in range(100):  # with some answers known: the counts a search agreeing with them still tries
        threshold = rng.randint(0, limit + 1)
        first = search_capacity(lambda n, t=threshold: n <= t, limit, precision=precision)
        answered = dict(rng.sample(first.trace, rng.randint(0, len(first.trace))))
        left = set(authors_counts(limit, precision, answered))
        assert left <= counts and not left & set(answered)
        asked = {n for n, _ in first.trace} - set(answered)
        assert asked <= left
    assert authors_counts(limit, precision, {}) == authors_counts(limit, precision)


def test_all_at_once_is_the_same_search():
    cfg = FactsModelConfig(n_in=8, n_out=4, d_model=4, d_mlp=4, mixing="attn")
    schedule = Schedule(max_epochs=80, patience=20)
    with torch_default_dtype(torch.float64):  # float sums in another order must not flip an outcome
        one_by_one = find_capacity(cfg, schedule=schedule, seeds=[0, 1, 2], precision=4)
        at_once = find_capacity(cfg, schedule=schedule, seeds=[0, 1, 2], precision=4, all_at_once=True)
    assert at_once.searches == one_by_one.searches and at_once.scores == one_by_one.scores
    assert at_once.info["trained_counts"] == len(authors_counts(64, 4))
    assert "trained_counts" not in one_by_one.info
    # Resumed with some counts trained before: only the counts the searches can still try are trained.
    known = {n: one_by_one.scores[n] for n, _ in one_by_one.searches["any"].trace[:3]}
    with torch_default_dtype(torch.float64):
        resumed = find_capacity(
            cfg, schedule=schedule, seeds=[0, 1, 2], precision=4, all_at_once=True, known=known
        )
    assert resumed.searches == one_by_one.searches
    assert resumed.info["trained_counts"] < len(authors_counts(64, 4))


def test_find_capacity_tiny():
    cfg = FactsModelConfig(n_in=5, n_out=3, d_model=2, d_mlp=2, mixing="2emb", mlp=False, norms=False)
    result = find_capacity(cfg, schedule=Schedule(max_epochs=120, patience=30), seeds=[0, 1, 2], precision=2)
    row = result.to_dict()
    assert 0 < row["all"] <= row["most"] <= row["any"] <= 25
    for criterion, search in result.searches.items():
        for n, ok in search.trace:
            assert ok == CRITERIA[criterion](result.scores[n], 3)
    assert set(row["successes"]) == {str(n) for s in result.searches.values() for n, _ in s.trace}
    with pytest.raises(MechmemError):
        find_capacity(cfg, criteria=("some",))
