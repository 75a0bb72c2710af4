"""The published binary search on synthetic monotone oracles, and a tiny end-to-end capacity search."""

import pytest

from mechmem.errors import MechmemError
from mechmem.papers.memorisation.batched import Schedule
from mechmem.papers.memorisation.capacity import CRITERIA, binary_search_max, find_capacity
from mechmem.papers.memorisation.models import FactsModelConfig


@pytest.mark.parametrize("precision", [1, 8])
def test_search_on_monotone_oracle(precision):
    for threshold in range(1025):
        calls = []

        def oracle(n, threshold=threshold, calls=calls):
            calls.append(n)
            return n <= threshold

        result = binary_search_max(oracle, 1024, precision=precision)
        # The published loop stops when hi - lo < precision without testing the last candidate.
        assert threshold - precision <= result.best <= threshold
        assert len(calls) == len(set(calls)) <= 12
        assert all(ok == (n <= threshold) for n, ok in result.trace)


def test_search_trace_is_the_published_one():
    result = binary_search_max(lambda n: n <= 208, 1024, precision=8)
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
    assert binary_search_max(lambda n: True, 1024).trace[-1] == (1024, True)


def test_search_rejects_bad_precision():
    with pytest.raises(MechmemError):
        binary_search_max(lambda n: True, 10, precision=0)


def test_find_capacity_tiny():
    cfg = FactsModelConfig(n_in=5, n_out=3, d_model=2, d_mlp=2, mixing="2emb", mlp=False, norms=False)
    schedule = Schedule(max_epochs=120, patience=30)
    result = find_capacity(cfg, schedule=schedule, seeds=[0, 1, 2], precision=2)
    row = result.to_dict()
    assert 0 < row["all"] <= row["most"] <= row["any"] <= 25
    # Every step of every search agrees with the shared per-n success counts.
    for criterion, search in result.results.items():
        for n, ok in search.trace:
            assert ok == CRITERIA[criterion](result.successes[n], 3)
    assert len(result.successes) <= sum(len(s.trace) for s in result.results.values())
