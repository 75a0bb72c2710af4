"""The published hand-coded construction (Linsefors & Bushnaq, "Our attempt"): facts stored as silent neurons.

Idea: give every label a set of S "guard" neurons (`assignment.assign_neurons`). The embeddings are chosen so
that every guard neuron of label y is silent (pre-activation <= 0) on every fact labelled y, while firing on
as many other facts as possible. The unembedding subtracts 2 per firing guard neuron from its label's logit,
so the true label's logit is exactly 0 and any label with a firing guard drops below it; a wrong label wins or
ties only if *all* its guards happen to be silent too.

Embedding rule per neuron, over the facts whose label it guards: start every token's weight at +1 (the neuron
fires at 2 on an unguarded pair); set the k = max(1, int(n_unique * top_fraction)) most frequent
first-position tokens, and likewise second-position tokens, to -1 (any pair containing one is silenced, as -1
+ 1 = 0); for guarded facts covered by neither list set both of their tokens to 0. Ties in the frequency
ranking are broken by a random permutation from `generator`, as in the authors' code.
"""

from functools import lru_cache

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem_papers.memorisation.constructions.assignment import assign_neurons


def _top_tokens(tokens: Int[Tensor, " n"], fraction: float, generator: torch.Generator) -> Int[Tensor, " k"]:
    unique, counts = torch.unique(tokens, return_counts=True)
    perm = torch.randperm(unique.numel(), generator=generator)
    unique, counts = unique[perm], counts[perm]
    k = max(1, int(unique.numel() * fraction))
    return unique[torch.argsort(counts, descending=True, stable=True)[:k]]


def published_embeddings(
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    conn: Int[Tensor, "d_mlp n_out"],
    n_in: int,
    top_fraction: float,
    *,
    generator: torch.Generator,
) -> tuple[Float[Tensor, "n_in d_mlp"], Float[Tensor, "n_in d_mlp"]]:
    """(E1, E2) with values in {+1, 0, -1} that silence each neuron on the facts of the labels it guards."""
    d_mlp = conn.shape[0]
    E1 = torch.ones(n_in, d_mlp)
    E2 = torch.ones(n_in, d_mlp)
    for neuron in range(d_mlp):
        guarded = conn[neuron].bool()[labels]
        if not guarded.any():
            continue
        first, second = inputs[guarded, 0], inputs[guarded, 1]
        top1 = _top_tokens(first, top_fraction, generator)
        top2 = _top_tokens(second, top_fraction, generator)
        E1[top1, neuron] = -1.0
        E2[top2, neuron] = -1.0
        uncovered = ~torch.isin(first, top1) & ~torch.isin(second, top2)
        E1[first[uncovered], neuron] = 0.0
        E2[second[uncovered], neuron] = 0.0
    return E1, E2


@lru_cache(maxsize=256)
def cached_assignment(d_mlp: int, n_out: int, s: int, seed: int = 0) -> Int[Tensor, "d_mlp n_out"]:
    """`assign_neurons` for a fixed seed, computed once per shape."""
    return assign_neurons(d_mlp, n_out, s, generator=torch.Generator().manual_seed(seed))


def published_unembedding(conn: Int[Tensor, "d_mlp n_out"]) -> Float[Tensor, "d_mlp n_out"]:
    """-2 from each label's guard neurons to its logit, 0 elsewhere."""
    return -2.0 * conn.float()


def published_construction(
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    n_in: int,
    d_mlp: int,
    n_out: int,
    s: int,
    top_fraction: float,
    *,
    generator: torch.Generator,
    seed: int = 0,
    columns: Int[Tensor, " n_out"] | None = None,
) -> tuple[Float[Tensor, "n_in d_mlp"], Float[Tensor, "n_in d_mlp"], Float[Tensor, "d_mlp n_out"]]:
    """(E1, E2, U) of the published construction for S neurons per label and the given top_fraction.

    The neuron-label code depends only on (d_mlp, n_out, S, seed) and is cached, as in the authors' code
    (`columns`, if given, permutes its label columns, as their repeated attempts do); the tie-breaks of the
    embedding rule are drawn from `generator`.
    """
    conn = cached_assignment(d_mlp, n_out, s, seed)
    conn = conn if columns is None else conn[:, columns]
    E1, E2 = published_embeddings(inputs, labels, conn, n_in, top_fraction, generator=generator)
    return E1, E2, published_unembedding(conn)


def published_stack_best(
    inputs: Int[Tensor, "n_facts 2"], labels: Int[Tensor, " n_facts"], d: int, grid, seed: int = 0
) -> tuple[Float[Tensor, "n_in d_mlp"], Float[Tensor, "n_in d_mlp"], Float[Tensor, "d_mlp n_out"]]:
    """The published construction at the grid's best (S, top_fraction) for these facts (d_mlp = n_out = d)."""
    best, best_acc = None, -1.0
    for s in [s for s in grid.s_values if s <= d]:
        for tf in grid.top_fractions:
            E1, E2, U = published_construction(
                inputs, labels, 2 * d, d, d, s, tf, generator=torch.Generator().manual_seed(seed), seed=seed
            )
            acc = float(
                ((torch.relu(E1[inputs[:, 0]] + E2[inputs[:, 1]]) @ U).argmax(-1) == labels).float().mean()
            )
            if acc > best_acc:
                best, best_acc = (E1, E2, U), acc
    return best  # type: ignore[return-value]
