"""Neuron-to-label assignment for the published construction: a binary code with S neurons per label.

Each label gets exactly S of the d_mlp neurons. Good codes keep every neuron's load (labels using it) within one
of the mean and keep any two labels' neuron sets overlapping in at most one neuron. The latter is a packing
problem: it is feasible only while n_out * S(S-1) <= d_mlp(d_mlp-1) (every neuron pair is used by at most one
label); past that bound the code minimises the total excess overlap instead.

Algorithm (ours; the authors used a different greedy + annealing script, and note the exact method should not
matter): greedy label by label, choosing the least-loaded neurons that create no repeated neuron pair, then a
deterministic-budget local search that swaps one neuron of one label at a time when the swap lowers
(excess overlap, load imbalance) lexicographically, allowing sideways moves to leave plateaus.
"""

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.errors import MechmemError


def overlap_feasible(d_mlp: int, n_out: int, s: int) -> bool:
    """Whether pairwise overlap <= 1 is possible by the pair-packing bound."""
    return s <= 1 or n_out * s * (s - 1) <= d_mlp * (d_mlp - 1)


def _score(conn: np.ndarray) -> tuple[int, int]:
    ov = conn.T @ conn
    np.fill_diagonal(ov, 0)
    loads = conn.sum(axis=1)
    return int(np.maximum(ov - 1, 0).sum()) // 2, int(loads.max() - loads.min())


def assign_neurons(d_mlp: int, n_out: int, s: int, *, generator: torch.Generator, steps: int = 4000) -> Int[Tensor, "d_mlp n_out"]:
    """A 0/1 matrix conn[neuron, label] with exactly `s` ones per label, balanced loads, small overlaps.

    Args:
        d_mlp: number of neurons (rows).
        n_out: number of labels (columns).
        s: neurons per label, 1 <= s <= d_mlp.
        generator: source of the random tie-breaks (the result is a function of its state).
        steps: local-search proposals after the greedy pass.
    """
    if not 1 <= s <= d_mlp:
        raise MechmemError(f"need 1 <= S <= d_mlp, got S={s}, d_mlp={d_mlp}")
    rng = np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=generator)))
    conn = np.zeros((d_mlp, n_out), dtype=np.int64)
    pair_used = np.zeros((d_mlp, d_mlp), dtype=np.int64)
    for label in range(n_out):
        chosen: list[int] = []
        for _ in range(s):
            cost = conn.sum(axis=1).astype(float) + rng.uniform(0, 0.1, d_mlp)
            for c in chosen:
                cost += 1000.0 * pair_used[c]
            cost[chosen] = np.inf
            chosen.append(int(np.argmin(cost)))
        conn[chosen, label] = 1
        for i in chosen:
            for j in chosen:
                if i != j:
                    pair_used[i, j] += 1
    best = _score(conn)
    for _ in range(steps):
        if best == (0, 0) or s == d_mlp:
            break
        label = int(rng.integers(n_out))
        out_n = int(rng.choice(np.flatnonzero(conn[:, label])))
        in_n = int(rng.choice(np.flatnonzero(conn[:, label] == 0)))
        conn[out_n, label], conn[in_n, label] = 0, 1
        new = _score(conn)
        if new <= best:
            best = new
        else:
            conn[out_n, label], conn[in_n, label] = 1, 0
    return torch.from_numpy(conn)


def max_overlap(conn: Int[Tensor, "d_mlp n_out"]) -> int:
    """Largest number of neurons shared by two different labels."""
    ov = conn.T.long() @ conn.long()
    ov.fill_diagonal_(0)
    return int(ov.max()) if ov.numel() else 0
