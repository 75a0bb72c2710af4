"""Capacity: the largest number of facts a variant stores, by the authors' binary search.

For a fact count n, the 11 initialisations of a variant are trained on the first n published facts
(`generate_facts`, seed 42) and n counts as stored under a criterion: "any" (at least one init reaches the
target accuracy), "most" (more than half, i.e. >= 6 of 11) or "all". The search is the published one: lo = 1,
hi = n_in^2; while hi - lo >= precision, try mid = (lo + hi) // 2 and move lo = mid + 1 on success or
hi = mid - 1 on failure; if hi never moved, try n_in^2 itself. The answer is the largest success, so it lies
within `precision` below the true threshold of a monotone oracle. The three criteria share one cache of training
outcomes, so a fact count trained for "any" is not retrained for "all".

Caveat: capacity is a property of the optimiser as much as of the architecture; a capped epoch budget gives a
lower bound on the published numbers.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mechmem.errors import MechmemError
from mechmem.papers.memorisation.batched import Schedule, TrainOutcome, train_batched
from mechmem.papers.memorisation.data import generate_facts
from mechmem.papers.memorisation.models import FactsModelConfig

N_INITS = 11
CRITERIA: dict[str, Callable[[int, int], bool]] = {
    "any": lambda k, n: k >= 1,
    "most": lambda k, n: k > n // 2,
    "all": lambda k, n: k == n,
}


@dataclass
class SearchResult:
    """A binary search's answer and every (n, stored?) it tried, in order."""

    best: int
    trace: list[tuple[int, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.best < 0:
            raise ValueError("best must be >= 0")

    def to_dict(self) -> dict:
        return {"best": self.best, "trace": [[n, ok] for n, ok in self.trace]}


def binary_search_max(
    oracle: Callable[[int], bool], hi: int, *, precision: int = 8, lo: int = 1
) -> SearchResult:
    """The published search for the largest n in [lo, hi] with oracle(n) True (0 if none was found)."""
    if precision < 1 or hi < lo:
        raise MechmemError(f"need precision >= 1 and hi >= lo, got precision={precision}, lo={lo}, hi={hi}")
    top, best, trace = hi, 0, []
    while hi - lo >= precision:
        mid = (lo + hi) // 2
        ok = bool(oracle(mid))
        trace.append((mid, ok))
        if ok:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if hi == top:
        ok = bool(oracle(top))
        trace.append((top, ok))
        if ok:
            best = top
    return SearchResult(best, trace)


@dataclass
class CapacityResult:
    """Capacity of one variant under each criterion, with the per-n success counts that decided it."""

    config: FactsModelConfig
    schedule: Schedule
    seeds: list[int]
    results: dict[str, SearchResult]
    successes: dict[int, int]
    seconds: float

    def __post_init__(self) -> None:
        unknown = set(self.results) - set(CRITERIA)
        if unknown:
            raise ValueError(f"unknown criteria {sorted(unknown)}")

    def to_dict(self) -> dict:
        return {
            "variant": self.config.name,
            "config": self.config.to_dict(),
            "schedule": self.schedule.to_dict(),
            "seeds": self.seeds,
            **{c: r.best for c, r in self.results.items()},
            "searches": {c: r.to_dict() for c, r in self.results.items()},
            "successes": {str(n): k for n, k in sorted(self.successes.items())},
            "seconds": round(self.seconds, 2),
        }


def find_capacity(
    cfg: FactsModelConfig,
    *,
    schedule: Schedule | None = None,
    seeds: list[int] | None = None,
    criteria: tuple[str, ...] = ("any", "most", "all"),
    precision: int = 8,
    data_seed: int = 42,
    device: str | torch.device = "cpu",
    on_trial: Callable[[int, TrainOutcome], None] | None = None,
) -> CapacityResult:
    """Binary-search the capacity of `cfg` under each criterion; every n is trained once (all inits batched).

    Args:
        cfg: the variant and sizes.
        schedule: training schedule (None: the published one).
        seeds: init seeds (default 0..10, the published 11 inits).
        criteria: any of "any", "most", "all".
        precision: the search stops when hi - lo < precision.
        data_seed: seed of `generate_facts`.
        device: torch device for training.
        on_trial: called with (n, outcome) after each new training run (progress reporting).
    """
    for c in criteria:
        if c not in CRITERIA:
            raise MechmemError(f"unknown criterion {c!r} (use any, most or all)")
    schedule = Schedule() if schedule is None else schedule
    seeds = list(range(N_INITS)) if seeds is None else list(seeds)
    top = cfg.n_in**2
    successes: dict[int, int] = {}
    t0 = time.perf_counter()

    def count(n: int) -> int:
        if n not in successes:
            inputs, labels = generate_facts(n, cfg.n_in, cfg.n_out, seed=data_seed)
            outcome = train_batched(cfg, inputs, labels, seeds, schedule, device=device)
            successes[n] = outcome.n_success
            if on_trial is not None:
                on_trial(n, outcome)
        return successes[n]

    results = {
        c: binary_search_max(lambda n, c=c: CRITERIA[c](count(n), len(seeds)), top, precision=precision)
        for c in criteria
    }
    return CapacityResult(cfg, schedule, seeds, results, successes, time.perf_counter() - t0)
