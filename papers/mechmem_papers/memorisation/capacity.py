"""Capacity: the largest number of facts a model stores, and the one result type both experiments share.

A capacity measurement evaluates a model family at fact counts n (the first n published facts,
`generate_facts`, seed 42) and searches (`search.search_capacity`) for the largest n that passes each
criterion. Every evaluation is cached, so the criteria share them.

- The 54 variants and the d-scaling (`find_capacity`): the score of n is how many of 11 initialisations store
  every fact; criteria "any" (>= 1), "most" (>= 6 of 11) and "all"; the authors' bracket, precision 8.
- The constructions (`measure_capacity` with an evaluator from `constructions.evaluators`): the score is the
  best accuracy over initialisations or hyperparameters; criteria "1" (acc = 1) and "0.9" (acc >= 0.9); the
  doubling bracket from n = d.

Caveat: capacity is a property of the optimiser as much as of the architecture; a capped epoch budget gives a
lower bound on the published numbers.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from mechmem.errors import MechmemError
from mechmem.models.facts import FactsModelConfig
from mechmem.tasks.facts import fact_sequence, generate_facts
from mechmem_papers.memorisation.batched import Schedule, TrainOutcome, train_batched, train_counts
from mechmem_papers.memorisation.search import (
    Bracket,
    Memo,
    SearchResult,
    authors_counts,
    search_capacity,
)
from mechmem_papers.memorisation.snapshots import Snapshots

N_INITS = 11
CRITERIA: dict[str, Callable[[int, int], bool]] = {
    "any": lambda k, n: k >= 1,
    "most": lambda k, n: k > n // 2,
    "all": lambda k, n: k == n,
}
THRESHOLDS: dict[str, float] = {"1": 1.0, "0.9": 0.9}
"""Accuracy criteria of the constructions: name -> the best accuracy that counts as stored."""
SCORE_KEYS = ("successes", "accuracy")


@dataclass
class CapacityResult:
    """Capacity of one model (a variant or a construction mode) at one size d under each criterion.

    `scores` maps each fact count tried to its score (`score` names it: "successes" = initialisations out of
    len(seeds) that stored every fact, or "accuracy" = best accuracy); `searches` holds each criterion's
    search. `info` carries what rebuilds the run (config, schedule, seeds, precision, bracket, sweep key ...).
    """

    name: str
    d: int
    searches: dict[str, SearchResult]
    scores: dict[int, float | int]
    seconds: float
    score: str = "successes"
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.score not in SCORE_KEYS:
            raise ValueError(f"score must be one of {SCORE_KEYS}, got {self.score!r}")
        tried = {n for s in self.searches.values() for n, _ in s.trace}
        if not tried <= set(self.scores):
            raise ValueError(f"searched fact counts without a score: {sorted(tried - set(self.scores))}")

    def __getitem__(self, criterion: str) -> int:
        return self.searches[criterion].best

    def to_dict(self) -> dict[str, Any]:
        """JSON: the sweep files' layout (criteria as top-level keys, scores under `score`'s name)."""
        return {
            "variant": self.name,
            "d": self.d,
            **self.info,
            **{c: s.best for c, s in self.searches.items()},
            "searches": {c: s.to_dict() for c, s in self.searches.items()},
            self.score: {str(n): v for n, v in sorted(self.scores.items())},
            "seconds": round(self.seconds, 2),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CapacityResult":
        score = next(k for k in SCORE_KEYS if k in data)
        searches = {c: SearchResult.from_dict(s) for c, s in data["searches"].items()}
        known = {"variant", "d", "searches", score, "seconds", *searches}
        info = {k: v for k, v in data.items() if k not in known}
        scores = {int(n): v for n, v in data[score].items()}
        return cls(data["variant"], int(data["d"]), searches, scores, float(data["seconds"]), score, info)


def measure_capacity(
    evaluate: Callable[[int], float | int],
    criteria: dict[str, Callable[[float | int], bool]],
    limit: int,
    *,
    name: str,
    d: int,
    precision: int = 8,
    bracket: Bracket = "authors",
    start: int = 1,
    score: str = "successes",
    info: dict[str, Any] | None = None,
) -> CapacityResult:
    """Search the capacity under each criterion (in order), every n evaluated once; see `search_capacity`."""
    memo, t0 = Memo(evaluate), time.perf_counter()
    searches = {
        c: search_capacity(
            lambda n, ok=ok: ok(memo(n)), limit, precision=precision, bracket=bracket, start=start
        )
        for c, ok in criteria.items()
    }
    info = {**(info or {}), "precision": precision, "bracket": bracket}
    return CapacityResult(name, d, searches, memo.cache, time.perf_counter() - t0, score, info)


def accuracy_criteria(names: tuple[str, ...] = tuple(THRESHOLDS)) -> dict[str, Callable[[float], bool]]:
    """The constructions' criteria: best accuracy >= threshold."""
    return {c: (lambda acc, t=THRESHOLDS[c]: acc >= t) for c in names}


def find_capacity(
    cfg: FactsModelConfig,
    *,
    schedule: Schedule | None = None,
    seeds: list[int] | None = None,
    criteria: tuple[str, ...] = ("any", "most", "all"),
    precision: int = 8,
    data_seed: int = 42,
    data_device: str = "cpu",
    device: str | torch.device = "cpu",
    on_trial: Callable[[int, TrainOutcome], None] | None = None,
    all_at_once: bool = False,
    known: dict[int, int] | None = None,
    recorded: Callable[[int], int | None] | None = None,
    snapshots: Callable[[int], Snapshots] | None = None,
) -> CapacityResult:
    """Capacity of one facts variant under Any / Most / All, by the authors' search; inits trained batched.

    With `all_at_once`, every fact count the search could try (`search.authors_counts`, 128 at the published
    sizes; with `known`, only those the searches can still try) is trained in one stack first
    (`batched.train_counts`) and the search reads its answers: the same search, one round of training instead
    of 13-17 in a row. Worth it where one step of a large stack costs
    about what a small one does (a GPU); on a CPU it does about 8 times the work.

    Args:
        cfg: the variant and sizes.
        schedule: training schedule (None: the published one).
        seeds: init seeds (default 0..10, the published 11 inits).
        criteria: any of "any", "most", "all".
        precision: the search stops when hi - lo < precision.
        data_seed: seed of `generate_facts`.
        data_device: device of `generate_facts`' permutation ("cpu"; the published runs drew it on "cuda").
        device: torch device for training.
        on_trial: called with (n, outcome) after each new training run (progress reporting, or recording it
            so that an interrupted search resumes).
        known: successes of fact counts trained by an earlier, interrupted run of the same search (same
            variant, schedule, seeds, facts): read instead of trained again. The search retraces its path.
        recorded: n -> successes of a training of n that another worker on the same search finished after
            this one started (None: none has): asked before each training, so two workers can share a
            search (`sweep.help_cells`).
        snapshots: n -> where the training of n facts saves its state while it runs and resumes from
            (`batched.Snapshots`); not used with `all_at_once`.
    """
    unknown = [c for c in criteria if c not in CRITERIA]
    if unknown:
        raise MechmemError(f"unknown criterion {unknown[0]!r} (use any, most or all)")
    schedule = Schedule() if schedule is None else schedule
    seeds = list(range(N_INITS)) if seeds is None else list(seeds)

    limit, trained, known = cfg.n_in**2, {}, dict(known or {})
    left = lambda: counts_left(limit, precision, known, criteria, len(seeds))

    def successes(n: int) -> int:
        if n in known:
            return known[n]
        if recorded is not None and (found := recorded(n)) is not None:
            known[n] = found
            return found
        if all_at_once:
            if not trained:
                inputs, labels = fact_sequence(limit, cfg.n_in, cfg.n_out, seed=data_seed, device=data_device)
                trained.update(train_counts(cfg, inputs, labels, left(), seeds, schedule, device=device))
                for m, outcome in trained.items():
                    if on_trial is not None:
                        on_trial(m, outcome)
            return trained[n].n_success
        saves = None if snapshots is None else snapshots(n)
        outcome = train_count(cfg, n, seeds, schedule, data_seed, data_device, device, saves)
        if on_trial is not None:
            on_trial(n, outcome)
        return outcome.n_success

    rules = {c: (lambda k, c=c: CRITERIA[c](k, len(seeds))) for c in criteria}
    info = {
        "config": cfg.to_dict(),
        "schedule": schedule.to_dict(),
        "seeds": seeds,
        "facts_device": data_device,
        "device": str(device),
    }
    if all_at_once:
        info["trained_counts"] = len(left())
    result = measure_capacity(
        successes, rules, limit, name=cfg.name, d=cfg.d_model, precision=precision, info=info
    )
    reused = len(set(result.scores) & set(known))
    if reused:
        result.info["counts_from_earlier_runs"] = reused
    return result


def train_count(
    cfg: FactsModelConfig,
    n: int,
    seeds: list[int],
    schedule: Schedule,
    data_seed: int = 42,
    data_device: str = "cpu",
    device: str | torch.device = "cpu",
    snapshots: Snapshots | None = None,
) -> TrainOutcome:
    """One training of a capacity search: the inits `seeds` on the first n facts of `generate_facts`."""
    inputs, labels = generate_facts(n, cfg.n_in, cfg.n_out, seed=data_seed, device=data_device)
    return train_batched(cfg, inputs, labels, seeds, schedule, device=device, snapshots=snapshots)


def counts_left(
    limit: int, precision: int, known: dict[int, int], criteria: tuple[str, ...], n_seeds: int
) -> list[int]:
    """Every fact count some criterion's search (the authors' bracket) can still try, given the successes
    `known` of counts trained before (those left out): what an all-at-once search still trains."""
    counts: set[int] = set()
    for c in criteria:
        answered = {n: CRITERIA[c](k, n_seeds) for n, k in known.items()}
        counts |= set(authors_counts(limit, precision, answered))
    return sorted(counts)


class _NotTrained(Exception):
    """Raised by a retraced search's oracle at a fact count no training has answered yet (`n`)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.n = n


def _retrace(known: dict[int, int], n_seeds: int, limit: int, precision: int, criterion: str) -> int:
    """The capacity `find_capacity`'s search under `criterion` finds on the trainings `known` (fact count ->
    successes of `n_seeds` inits); raises `_NotTrained` at the first count it asks that none answered."""
    rule = CRITERIA[criterion]

    def passes(n: int) -> bool:
        if n not in known:
            raise _NotTrained(n)
        return rule(known[n], n_seeds)

    return search_capacity(passes, limit, precision=precision).best


def next_count(
    known: dict[int, int],
    n_seeds: int,
    limit: int,
    precision: int,
    criteria: tuple[str, ...] = tuple(CRITERIA),
) -> int | None:
    """The fact count `find_capacity`'s searches (criteria in this order) ask next, given the successes
    `known` of the counts trained so far; None when every search has ended on them."""
    for c in criteria:
        try:
            _retrace(known, n_seeds, limit, precision, c)
        except _NotTrained as missing:
            return missing.n
    return None


def finished_searches(
    known: dict[int, int],
    n_seeds: int,
    limit: int,
    precision: int,
    criteria: tuple[str, ...] = tuple(CRITERIA),
) -> dict[str, int | None]:
    """Each criterion's answer from the trainings finished so far (`known`: fact count -> successes of
    `n_seeds` inits), retracing `find_capacity`'s search: the capacity where that search has ended, None where
    it still needs a fact count no training has answered (the search is running)."""
    out: dict[str, int | None] = {}
    for c in criteria:
        try:
            out[c] = _retrace(known, n_seeds, limit, precision, c)
        except _NotTrained:
            out[c] = None
    return out
