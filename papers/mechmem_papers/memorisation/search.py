"""The one capacity search: the largest fact count n whose evaluation passes a criterion.

Success is assumed monotone in n (it is only roughly so for trained models), so the search brackets a
threshold and bisects it. Two brackets are offered; both return the largest success seen and every (n,
passed?) tried.

- ``bracket="authors"`` (Linsefors & Bushnaq's code, used for the 54 variants and the d-scaling): lo = 1,
  hi = limit; while hi - lo >= precision try mid = (lo + hi) // 2 and move lo = mid + 1 on success or
  hi = mid - 1 on failure; if hi never moved, try `limit` itself. The answer lies within `precision` below the
  threshold of a monotone oracle.
- ``bracket="doubling"`` (the constructions' capacity table): double n from `start` while it passes (up to
  `limit`), then bisect the half-open bracket [last success, first failure) until it is at most `precision`
  wide. Fewer trials far below the threshold when the capacity is small compared with the ceiling.

`Memo` caches evaluations by n, so searches under several criteria share one training run per fact count.
"""

from collections.abc import Callable
from dataclasses import dataclass, field

from mechmem.errors import MechmemError

Bracket = str  # "authors" or "doubling" (checked at run time, so bad input gets a one-line error)
BRACKETS: tuple[str, ...] = ("authors", "doubling")


@dataclass
class SearchResult:
    """A search's answer (0 if nothing passed) and every (n, passed?) it tried, in order."""

    best: int
    trace: list[tuple[int, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.best < 0:
            raise ValueError("best must be >= 0")

    def to_dict(self) -> dict:
        return {"best": self.best, "trace": [[n, ok] for n, ok in self.trace]}

    @classmethod
    def from_dict(cls, data: dict) -> "SearchResult":
        return cls(int(data["best"]), [(int(n), bool(ok)) for n, ok in data["trace"]])


class Memo:
    """`evaluate(n)` cached by n; `cache` holds every value computed, in the order first asked."""

    def __init__(self, evaluate: Callable[[int], float | int]) -> None:
        self.evaluate = evaluate
        self.cache: dict[int, float | int] = {}

    def __call__(self, n: int) -> float | int:
        if n not in self.cache:
            self.cache[n] = self.evaluate(n)
        return self.cache[n]


def search_capacity(
    passes: Callable[[int], bool],
    limit: int,
    *,
    precision: int = 8,
    bracket: Bracket = "authors",
    start: int = 1,
) -> SearchResult:
    """The largest n in [1, limit] with `passes(n)` True, to within `precision` (see the module docstring).

    Args:
        passes: the oracle, n -> stored?
        limit: the largest fact count that exists (n_in^2).
        precision: the search stops when the bracket is narrower than this (authors) or at most this
        (doubling). bracket: "authors" (their published loop) or "doubling" (double from `start`, then
        bisect). start: first n tried by the doubling bracket.
    """
    if precision < 1 or limit < 1 or start < 1:
        raise MechmemError(f"need precision, limit, start >= 1, got {precision}, {limit}, {start}")
    trace: list[tuple[int, bool]] = []

    def test(n: int) -> bool:
        ok = bool(passes(n))
        trace.append((n, ok))
        return ok

    if bracket == "authors":
        return SearchResult(_authors(test, limit, precision), trace)
    if bracket == "doubling":
        return SearchResult(_doubling(test, limit, precision, start), trace)
    raise MechmemError(f"unknown bracket {bracket!r} (use {' or '.join(BRACKETS)})")


def authors_counts(limit: int, precision: int, answered: dict[int, bool] | None = None) -> list[int]:
    """Every n the authors' bracket can try for some oracle (the bisection tree and `limit` itself), found by
    running that bracket on every sequence of answers: training all of them at once answers any search in one
    round (`find_capacity`). With `answered` (n -> passed?, e.g. trainings finished earlier), only the counts
    a search agreeing with those answers can still try, those answers left out."""
    if precision < 1 or limit < 1:
        raise MechmemError(f"need precision, limit >= 1, got {precision}, {limit}")
    answered = answered or {}
    out: dict[int, None] = {}
    pending: list[tuple[bool, ...]] = [()]
    while pending:
        answers, asked = pending.pop(), []

        def test(n: int, answers: tuple[bool, ...] = answers, asked: list[int] = asked) -> bool:
            if n in answered:
                return answered[n]
            if len(asked) == len(answers):
                out[n] = None
                pending.extend([(*answers, True), (*answers, False)])
                raise _Unanswered
            asked.append(n)
            return answers[len(asked) - 1]

        try:
            _authors(test, limit, precision)
        except _Unanswered:
            pass
    return sorted(out)


class _Unanswered(Exception):
    """Raised by `authors_counts`' oracle at the first question it has no answer for."""


def _authors(test: Callable[[int], bool], limit: int, precision: int) -> int:
    lo, hi, best = 1, limit, 0
    while hi - lo >= precision:
        mid = (lo + hi) // 2
        if test(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if hi == limit and test(limit):
        best = limit
    return best


def _doubling(test: Callable[[int], bool], limit: int, precision: int, start: int) -> int:
    lo, hi, n = 0, limit + 1, start
    while n <= limit:
        if not test(n):
            hi = n
            break
        lo, n = n, 2 * n
    if lo == limit:
        return lo
    while hi - lo > precision:
        mid = (lo + hi) // 2
        if test(mid):
            lo = mid
        else:
            hi = mid
    return lo
