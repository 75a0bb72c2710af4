"""Capacity of the challenge model: the largest fact count stored at acc = 1 and at acc >= 0.9, per mode.

An *evaluator* maps a fact count n to the best accuracy reached on `generate_facts(n, 2d, d)` by that mode's
best initialisation / hyperparameters (the challenge's "Any" criterion). `max_facts` brackets the capacity by
doubling from n_out, then bisects to `precision` facts, assuming success is monotone in n (it is only roughly
so; the report states the precision). Evaluations are memoised, so both thresholds share them.

Evaluators (d_mlp = n_out = d, n_in = 2d):
    trained            all weights learned from `n_inits` initialisations
    rand_emb           random frozen embeddings, U learned
    published_hand     the published construction, max over the S x top_fraction grid and `retries` tie-breaks
    published_hybrid   the published embeddings frozen, U learned, max over a smaller grid
    keyvalue_hand      our random-key value table, max over key sizes k and `retries` key draws
    keyvalue_hybrid    its embeddings frozen, U learned
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mechmem.papers.memorisation.constructions.keyvalue import keyvalue_construction
from mechmem.papers.memorisation.constructions.model import ChallengeConfig, ChallengeMLP
from mechmem.papers.memorisation.constructions.published import published_construction
from mechmem.papers.memorisation.constructions.training import (
    ChallengeTrainConfig,
    hidden_activations,
    random_embeddings,
    stacked_accuracy,
    train_full,
    train_unembedding,
)
from mechmem.papers.memorisation.data import generate_facts

Evaluator = Callable[[int], float]


@dataclass(frozen=True)
class SweepGrid:
    """Hyperparameter grids and repeat counts for the capacity search."""

    n_inits: int = 4
    """Initialisations per trained / rand-emb evaluation."""
    s_values: tuple[int, ...] = tuple(range(1, 11))
    """Neurons per label S for the published hand-coded sweep (clipped to d)."""
    top_fractions: tuple[float, ...] = tuple(round(0.02 * i, 2) for i in range(20))
    """top_fraction values 0.00..0.38 for the published hand-coded sweep."""
    hybrid_s_values: tuple[int, ...] = (2, 3, 4, 6)
    """S values for the published hybrid (each trains a U)."""
    hybrid_top_fractions: tuple[float, ...] = (0.1, 0.2, 0.3)
    """top_fraction values for the published hybrid."""
    key_fractions: tuple[float, ...] = (0.25, 0.35, 0.5)
    """Key sizes k = round(f * (d - 1)) for our key-value table."""
    retries: int = 2
    """Random tie-break draws per published hand-coded setting (the authors used 2)."""
    key_retries: int = 4
    """Random key draws per key size for our key-value table."""
    train: ChallengeTrainConfig = field(default_factory=ChallengeTrainConfig)
    """Training recipe for the learned modes."""


def _facts(n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    return generate_facts(n, 2 * d, d, seed=42)


def _hand_accuracy(E1: torch.Tensor, E2: torch.Tensor, U: torch.Tensor, inputs, labels) -> torch.Tensor:
    return stacked_accuracy(hidden_activations(E1, E2, inputs) @ U, labels)


def trained_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    def evaluate(n: int) -> float:
        inputs, labels = _facts(n, d)
        model = ChallengeMLP(
            ChallengeConfig(2 * d, d, d, n_models=grid.n_inits), generator=torch.Generator().manual_seed(seed)
        )
        best, _ = train_full(model.E1, model.E2, model.U, inputs, labels, grid.train)
        return float(best.max())

    return evaluate


def rand_emb_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    def evaluate(n: int) -> float:
        inputs, labels = _facts(n, d)
        g = torch.Generator().manual_seed(seed)
        E1, E2 = random_embeddings(grid.n_inits, 2 * d, d, generator=g)
        best, _ = train_unembedding(hidden_activations(E1, E2, inputs), labels, d, grid.train, generator=g)
        return float(best.max())

    return evaluate


def published_stack(n: int, d: int, settings: list[tuple[int, float]], seed: int) -> tuple[torch.Tensor, ...]:
    """Stacked (E1, E2, U) of the published construction for each (S, top_fraction) setting."""
    inputs, labels = _facts(n, d)
    g = torch.Generator().manual_seed(seed)
    built = [published_construction(inputs, labels, 2 * d, d, d, s, tf, generator=g) for s, tf in settings]
    return tuple(torch.stack(parts) for parts in zip(*built))


def published_hand_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    settings = [(s, tf) for s in grid.s_values if s <= d for tf in grid.top_fractions]

    def evaluate(n: int) -> float:
        inputs, labels = _facts(n, d)
        best = 0.0
        for retry in range(grid.retries):
            E1, E2, U = published_stack(n, d, settings, seed + retry)
            best = max(best, float(_hand_accuracy(E1, E2, U, inputs, labels).max()))
        return best

    return evaluate


def published_hybrid_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    settings = [(s, tf) for s in grid.hybrid_s_values if s <= d for tf in grid.hybrid_top_fractions]

    def evaluate(n: int) -> float:
        inputs, labels = _facts(n, d)
        E1, E2, _ = published_stack(n, d, settings, seed)
        g = torch.Generator().manual_seed(seed)
        best, _ = train_unembedding(hidden_activations(E1, E2, inputs), labels, d, grid.train, generator=g)
        return float(best.max())

    return evaluate


def key_sizes(d: int, grid: SweepGrid) -> list[int]:
    """Distinct key sizes k for d - 1 selector neurons."""
    return sorted({max(1, min(d - 1, round(f * (d - 1)))) for f in grid.key_fractions})


def keyvalue_stack(n: int, d: int, ks: list[int], seed: int) -> tuple[torch.Tensor, ...]:
    """Stacked (E1, E2, U) of our key-value table for each key size."""
    inputs, labels = _facts(n, d)
    g = torch.Generator().manual_seed(seed)
    built = [keyvalue_construction(inputs, labels, 2 * d, d, d, k, generator=g) for k in ks]
    return tuple(torch.stack(parts) for parts in zip(*built))


def keyvalue_hand_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    ks = key_sizes(d, grid)

    def evaluate(n: int) -> float:
        inputs, labels = _facts(n, d)
        best = 0.0
        for retry in range(grid.key_retries):
            E1, E2, U = keyvalue_stack(n, d, ks, seed + retry)
            best = max(best, float(_hand_accuracy(E1, E2, U, inputs, labels).max()))
        return best

    return evaluate


def keyvalue_hybrid_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    ks = key_sizes(d, grid)

    def evaluate(n: int) -> float:
        inputs, labels = _facts(n, d)
        E1, E2, _ = keyvalue_stack(n, d, ks, seed)
        hidden = hidden_activations(E1, E2, inputs)
        hidden = hidden / hidden.amax(dim=(1, 2), keepdim=True).clamp_min(1e-6)  # unit scale for Adam
        best, _ = train_unembedding(
            hidden, labels, d, grid.train, generator=torch.Generator().manual_seed(seed)
        )
        return float(best.max())

    return evaluate


EVALUATORS: dict[str, Callable[..., Evaluator]] = {
    "trained": trained_evaluator,
    "rand_emb": rand_emb_evaluator,
    "published_hand": published_hand_evaluator,
    "published_hybrid": published_hybrid_evaluator,
    "keyvalue_hand": keyvalue_hand_evaluator,
    "keyvalue_hybrid": keyvalue_hybrid_evaluator,
}


def max_facts(evaluate: Evaluator, threshold: float, *, start: int, limit: int, precision: int) -> int:
    """Largest n in [0, limit] with evaluate(n) >= threshold, to within `precision` (0 if `start` fails)."""
    lo, hi = 0, limit + 1
    n = start
    while n <= limit:
        if evaluate(n) >= threshold:
            lo, n = n, 2 * n
        else:
            hi = n
            break
    if lo == limit:
        return lo
    hi = min(hi, limit + 1)
    while hi - lo > precision:
        mid = (lo + hi) // 2
        if evaluate(mid) >= threshold:
            lo = mid
        else:
            hi = mid
    return lo


def memoised(evaluate: Evaluator) -> Evaluator:
    """Cache an evaluator's results by fact count."""
    cache: dict[int, float] = {}

    def cached(n: int) -> float:
        if n not in cache:
            cache[n] = evaluate(n)
        return cache[n]

    cached.cache = cache  # type: ignore[attr-defined]
    return cached


def fixed_exponent_fit(ds: list[int], capacities: list[float]) -> float:
    """a in capacity ~ a d^2 / ln d, fitted in log space (geometric mean of capacity / (d^2 / ln d))."""
    logs = [math.log(c / (d * d / math.log(d))) for d, c in zip(ds, capacities) if c > 0]
    return math.exp(sum(logs) / len(logs)) if logs else float("nan")


def free_exponent_fit(ds: list[int], capacities: list[float]) -> tuple[float, float]:
    """(a, b) in capacity ~ a d^b by least squares in log-log space (nan with fewer than two points)."""
    pts = [(math.log(d), math.log(c)) for d, c in zip(ds, capacities) if c > 0]
    if len(pts) < 2:
        return float("nan"), float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(my - b * mx), b
