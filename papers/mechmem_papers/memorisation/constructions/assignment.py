"""Neuron-to-label assignment for the published construction: a binary code with S neurons per label.

Each label gets exactly S of the d_mlp neurons. Good codes keep every neuron's load (labels using it) within
one of the mean and keep any two labels' neuron sets overlapping in at most one neuron. The latter is a
packing problem: it is feasible only while n_out * S(S-1) <= d_mlp(d_mlp-1) (every neuron pair is used by at
most one label); past that bound the code minimises the total excess overlap instead.

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
    """(excess pairwise overlap, sum of squared loads): both minimal for a balanced, overlap-<=1 code."""
    ov = conn.T @ conn
    np.fill_diagonal(ov, 0)
    loads = conn.sum(axis=1)
    return int(np.maximum(ov - 1, 0).sum()) // 2, int((loads**2).sum())


def assign_neurons(
    d_mlp: int, n_out: int, s: int, *, generator: torch.Generator, steps: int = 8000
) -> Int[Tensor, "d_mlp n_out"]:
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
    loads = conn.sum(axis=1)
    ov = conn.T @ conn
    np.fill_diagonal(ov, 0)
    for _ in range(steps if s < d_mlp else 0):
        if loads.max() - loads.min() <= 1 and (
            ov.max(initial=0) <= 1 or not overlap_feasible(d_mlp, n_out, s)
        ):
            break
        label = int(rng.integers(n_out))
        ones, zeros = np.flatnonzero(conn[:, label]), np.flatnonzero(conn[:, label] == 0)
        if rng.random() < 0.5:  # targeted: move the label off its busiest neuron onto a least-busy one
            out_n = int(ones[np.argmax(loads[ones] + rng.uniform(0, 0.5, ones.size))])
            in_n = int(zeros[np.argmin(loads[zeros] + rng.uniform(0, 0.5, zeros.size))])
        else:
            out_n, in_n = int(rng.choice(ones)), int(rng.choice(zeros))
        new_row = ov[label] + conn[in_n] - conn[out_n]
        new_row[label] = 0
        d_viol = int(np.maximum(new_row - 1, 0).sum() - np.maximum(ov[label] - 1, 0).sum())
        d_load = 2 * (int(loads[in_n]) - int(loads[out_n]) + 1)
        if d_viol < 0 or (d_viol == 0 and (d_load <= 0 or rng.random() < 0.05)):  # rare uphill load moves
            conn[out_n, label], conn[in_n, label] = 0, 1
            loads[out_n] -= 1
            loads[in_n] += 1
            ov[label], ov[:, label] = new_row, new_row
    return torch.from_numpy(conn)


def max_overlap(conn: Int[Tensor, "d_mlp n_out"]) -> int:
    """Largest number of neurons shared by two different labels."""
    ov = conn.T.long() @ conn.long()
    ov.fill_diagonal_(0)
    return int(ov.max()) if ov.numel() else 0
