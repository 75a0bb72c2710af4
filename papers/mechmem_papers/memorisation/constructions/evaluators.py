"""Evaluators of the challenge model: fact count n -> the best accuracy one mode reaches on n facts.

An *evaluator* maps n to the best accuracy reached on `generate_facts(n, 2d, d)` by that mode's best
initialisation / hyperparameters (the challenge's "Any" criterion). The capacity search over n is the shared
one (`memorisation.capacity.measure_capacity`, doubling bracket from n = d, criteria acc = 1 and acc >= 0.9).

Evaluators (d_mlp = n_out = d, n_in = 2d):
    trained            all weights learned from `n_inits` initialisations
    trained_authors    the same from `authors_attempts` initialisations (the authors' n_attempts)
    rand_emb           random frozen embeddings, U learned
    published_hand     the published construction, max over the S x top_fraction grid and `retries` tie-breaks
    published_hybrid   the published embeddings frozen, U learned, max over a smaller grid
    published_hybrid_authors   the same on the authors' grid: their S values per d x the hand-coded
                       top_fraction grid, `authors_attempts` draws per setting (their n_attempts)
    keyvalue_hand      our random-key value table, max over key sizes k and `retries` key draws
    keyvalue_hybrid    its embeddings frozen, U learned
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from mechmem.tasks.facts import generate_facts
from mechmem_papers.memorisation.constructions.keyvalue import keyvalue_construction
from mechmem_papers.memorisation.constructions.model import ChallengeConfig, ChallengeMLP
from mechmem_papers.memorisation.constructions.published import published_construction
from mechmem_papers.memorisation.constructions.training import (
    ChallengeTrainConfig,
    full_score,
    hidden_activations,
    random_embeddings,
    stacked_accuracy,
    unembedding_score,
)

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
    authors_attempts: int = 11
    """The authors' n_attempts (11): draws per setting of the hybrid on their grid, initialisations of
    `trained_authors`."""
    retries: int = 2
    """Random tie-break draws per published hand-coded setting (the authors used 2)."""
    key_retries: int = 4
    """Random key draws per key size for our key-value table."""
    train: ChallengeTrainConfig = field(default_factory=ChallengeTrainConfig)
    """Training recipe for the learned modes."""


def challenge_facts(n: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first n facts of the capacity searches at size d (n_in = 2d, n_out = d, seed 42)."""
    return generate_facts(n, 2 * d, d, seed=42)


def hand_accuracy(E1: torch.Tensor, E2: torch.Tensor, U: torch.Tensor, inputs, labels) -> torch.Tensor:
    """Argmax accuracy of stacked (E1, E2, U) on the facts."""
    return stacked_accuracy(hidden_activations(E1, E2, inputs) @ U, labels)


def hand_settings(d: int, grid: SweepGrid) -> list[tuple[int, float]]:
    """The published hand-coded construction's (S, top_fraction) settings at size d."""
    return [(s, tf) for s in grid.s_values if s <= d for tf in grid.top_fractions]


def hybrid_settings(d: int, grid: SweepGrid) -> list[tuple[int, float]]:
    """The published hybrid's (S, top_fraction) settings at size d (our grid)."""
    return [(s, tf) for s in grid.hybrid_s_values if s <= d for tf in grid.hybrid_top_fractions]


def trained_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    def evaluate(n: int) -> float:
        inputs, labels = challenge_facts(n, d)
        model = ChallengeMLP(
            ChallengeConfig(2 * d, d, d, n_models=grid.n_inits), generator=torch.Generator().manual_seed(seed)
        )
        return full_score(model.E1, model.E2, model.U, inputs, labels, grid.train)

    return evaluate


def trained_authors_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    return trained_evaluator(d, replace(grid, n_inits=grid.authors_attempts), seed)


def rand_emb_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    def evaluate(n: int) -> float:
        inputs, labels = challenge_facts(n, d)
        g = torch.Generator().manual_seed(seed)
        E1, E2 = random_embeddings(grid.n_inits, 2 * d, d, generator=g)
        return unembedding_score(hidden_activations(E1, E2, inputs), labels, d, grid.train, generator=g)

    return evaluate


def published_stack(
    n: int, d: int, settings: list[tuple[int, float]], seed: int, columns: torch.Tensor | None = None
) -> tuple[torch.Tensor, ...]:
    """Stacked (E1, E2, U) of the published construction for each (S, top_fraction) setting, the
    neuron-label code's label columns permuted by `columns` if given."""
    inputs, labels = challenge_facts(n, d)
    g = torch.Generator().manual_seed(seed)
    built = [
        published_construction(inputs, labels, 2 * d, d, d, s, tf, generator=g, columns=columns)
        for s, tf in settings
    ]
    return tuple(torch.stack(parts) for parts in zip(*built))


def _hand_evaluator(d: int, retries: int, seed: int, stack: Callable[[int, int], tuple]) -> Evaluator:
    """Best accuracy over `retries` constructions `stack(n, seed + retry)`, no training.

    The constructions are stacked (E1, E2, U).
    """

    def evaluate(n: int) -> float:
        inputs, labels = challenge_facts(n, d)
        best = 0.0
        for retry in range(retries):
            E1, E2, U = stack(n, seed + retry)
            best = max(best, float(hand_accuracy(E1, E2, U, inputs, labels).max()))
        return best

    return evaluate


def published_hand_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    settings = hand_settings(d, grid)
    return _hand_evaluator(d, grid.retries, seed, lambda n, sd: published_stack(n, d, settings, sd))


def authors_s_values(d: int) -> tuple[int, ...]:
    """The S values the authors' hybrid search sweeps at size d (their `S_sweep_for`), clipped to d."""
    top = next(hi for limit, hi in ((16, 10), (32, 13), (64, 16), (128, 20), (10**9, 24)) if d <= limit)
    values = (*range(1, 12), 13) if top == 13 else tuple(range(1, top + 1))
    return tuple(s for s in values if s <= d)


def authors_hybrid_settings(d: int, grid: SweepGrid) -> list[tuple[int, float]]:
    """The (S, top_fraction) settings of the hybrid on the authors' grid at size d."""
    return [(s, tf) for s in authors_s_values(d) for tf in grid.top_fractions]


def _hybrid_evaluator(
    d: int, grid: SweepGrid, seed: int, settings: list[tuple[int, float]], attempts: int
) -> Evaluator:
    """Published embeddings frozen, U trained for every setting: the best accuracy over `attempts` draws.

    Draw a > 0 draws the tie-breaks and U's initialisation from seed + a and permutes the neuron-label
    code's label columns (as the authors' attempts do); draw 0 keeps the code as built. Draws stop once
    one reaches accuracy 1, which no later draw can beat.
    """

    def evaluate(n: int) -> float:
        inputs, labels = challenge_facts(n, d)
        best = 0.0
        for attempt in range(attempts):
            g = torch.Generator().manual_seed(seed + attempt)
            columns = torch.randperm(d, generator=g) if attempt else None
            E1, E2, _ = published_stack(n, d, settings, seed + attempt, columns)
            reached = unembedding_score(
                hidden_activations(E1, E2, inputs), labels, d, grid.train, generator=g
            )
            best = max(best, reached)
            if best >= 1.0:
                break
        return best

    return evaluate


def published_hybrid_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    return _hybrid_evaluator(d, grid, seed, hybrid_settings(d, grid), 1)


def published_hybrid_authors_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    return _hybrid_evaluator(d, grid, seed, authors_hybrid_settings(d, grid), grid.authors_attempts)


def key_sizes(d: int, grid: SweepGrid) -> list[int]:
    """Distinct key sizes k for d - 1 selector neurons."""
    return sorted({max(1, min(d - 1, round(f * (d - 1)))) for f in grid.key_fractions})


def keyvalue_stack(n: int, d: int, ks: list[int], seed: int) -> tuple[torch.Tensor, ...]:
    """Stacked (E1, E2, U) of our key-value table for each key size."""
    inputs, labels = challenge_facts(n, d)
    g = torch.Generator().manual_seed(seed)
    built = [keyvalue_construction(inputs, labels, 2 * d, d, d, k, generator=g) for k in ks]
    return tuple(torch.stack(parts) for parts in zip(*built))


def keyvalue_hand_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    ks = key_sizes(d, grid)
    return _hand_evaluator(d, grid.key_retries, seed, lambda n, sd: keyvalue_stack(n, d, ks, sd))


def keyvalue_hybrid_evaluator(d: int, grid: SweepGrid, seed: int = 0) -> Evaluator:
    ks = key_sizes(d, grid)

    def evaluate(n: int) -> float:
        inputs, labels = challenge_facts(n, d)
        E1, E2, _ = keyvalue_stack(n, d, ks, seed)
        hidden = hidden_activations(E1, E2, inputs)
        hidden = hidden / hidden.amax(dim=(1, 2), keepdim=True).clamp_min(1e-6)  # unit scale for Adam
        return unembedding_score(hidden, labels, d, grid.train, generator=torch.Generator().manual_seed(seed))

    return evaluate


EVALUATORS: dict[str, Callable[..., Evaluator]] = {
    "trained": trained_evaluator,
    "trained_authors": trained_authors_evaluator,
    "rand_emb": rand_emb_evaluator,
    "published_hand": published_hand_evaluator,
    "published_hybrid": published_hybrid_evaluator,
    "published_hybrid_authors": published_hybrid_authors_evaluator,
    "keyvalue_hand": keyvalue_hand_evaluator,
    "keyvalue_hybrid": keyvalue_hybrid_evaluator,
}
