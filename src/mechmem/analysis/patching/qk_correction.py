"""The exact part of AtP*'s query/key fix: how much one layer's attention pattern moves the metric when the
attention input of one position is replaced, for every position at once.

Replacing the normalised attention input h at position p moves row p (the query) and column p (the key)
of the scores S = q k^T / scale. Scored by the gradient G of the metric with respect to the pattern, the
effect of position p, summed over batch and heads, is

    sum_j G[p, j] (P'[p, j] - P[p, j])  +  sum_{r != p} sum_j G[r, j] (P'[r, j] - P[r, j])

Row p is a fresh softmax; any other row r sees one changed score c = q_r . k'_p / scale, so with
rest = log sum_{j != p} exp(S[r, j]), lse' = log(exp(rest) + exp(c)) and B the average of G[r, j] over
j != p under the pattern without key p,

    sum_j G[r, j] P'[r, j] = B exp(rest - lse') + G[r, p] exp(c - lse').

Computed in float64; `tests/test_qk_correction.py` checks it against recomputing the attention.
"""

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.interventions.replay import Replay


def swap_effects(
    replay: Replay,
    layer: int,
    h: Float[Tensor, "batch pos d_model"],
    h_new: Float[Tensor, "batch pos d_model"],
    grad_pattern: Float[Tensor, "batch head_index query_pos key_pos"],
    memory_bytes: float = 256.0 * 2**20,
) -> Float[Tensor, " pos"]:
    """Per position p: sum(grad_pattern x (pattern with h[:, p] replaced by h_new[:, p] - pattern)), summed
    over batch, heads, queries and keys."""
    return prompt_swap_effects(replay, layer, h, h_new, grad_pattern, memory_bytes).sum(0).to(h.dtype)


def prompt_swap_effects(
    replay: Replay,
    layer: int,
    h: Float[Tensor, "batch pos d_model"],
    h_new: Float[Tensor, "batch pos d_model"],
    grad_pattern: Float[Tensor, "batch head_index query_pos key_pos"],
    memory_bytes: float = 256.0 * 2**20,
) -> Float[Tensor, "batch pos"]:
    """`swap_effects` per prompt, in float64, in chunks of rows whose scores fit `memory_bytes`."""
    n_batch, n_pos = h.shape[:2]
    per_row = 8 * 16 * grad_pattern.shape[1] * n_pos * n_pos  # about 16 live [head q k] float64 tensors
    chunk = max(1, int(memory_bytes // per_row))
    parts = [
        _chunk_effects(replay, layer, h[rows], h_new[rows], grad_pattern[rows])
        for rows in (slice(first, first + chunk) for first in range(0, n_batch, chunk))
    ]
    return torch.cat(parts)


def _chunk_effects(
    replay: Replay, layer: int, h: Tensor, h_new: Tensor, grad: Tensor
) -> Float[Tensor, "batch pos"]:
    positions = torch.arange(h.shape[1], device=h.device)
    mask = replay.attention_mask(layer, positions, positions)  # [q k]
    q, q_new = (replay.queries(layer, x, positions).double() for x in (h, h_new))
    k, k_new = (replay.keys_values(layer, x)[0].double() for x in (h, h_new))
    grad = grad.double()
    scores = replay.scores(layer, q, k).masked_fill(~mask, -torch.inf)  # [batch head q k]
    before = (grad * scores.softmax(-1)).sum(-1, keepdim=True)  # sum_j G P of every row

    # column p of every other row r (the module docstring's formula), in log-sums over the row's other keys:
    # no cancellation when p held nearly all the weight
    changed = replay.scores(layer, q, k_new)
    rest = _without_each(scores)
    lse_new = torch.logaddexp(rest, changed)
    positive, negative = (_without_each(scores + x.log()) for x in (grad.clamp(min=0), (-grad).clamp(min=0)))
    average = (positive - rest).exp() - (negative - rest).exp()
    after = average * (rest - lse_new).exp() + grad * (changed - lse_new).exp()
    others = mask & ~torch.eye(len(positions), dtype=torch.bool, device=h.device)
    columns = torch.where(others, after - before, 0.0).sum((1, 2))

    # row p: the query and its own key both moved
    own = (q_new * k_new).sum(-1).transpose(-1, -2) / replay.scales[layer]  # q'_p . k'_p, [batch head p]
    row_scores = replay.scores(layer, q_new, k).diagonal_scatter(own, dim1=-2, dim2=-1)
    row_pattern = row_scores.masked_fill(~mask, -torch.inf).softmax(-1)
    rows = ((grad * row_pattern).sum(-1) - before.squeeze(-1)).sum(1)
    return columns + rows


def _without_each(x: Float[Tensor, "... k"]) -> Float[Tensor, "... k"]:
    """Entry j: log sum over i != j of exp(x_i), from prefix and suffix log-cumulative sums."""
    none = torch.full_like(x[..., :1], -torch.inf)
    prefix = torch.cat([none, x.logcumsumexp(-1)[..., :-1]], -1)
    suffix = torch.cat([x.flip(-1).logcumsumexp(-1).flip(-1)[..., 1:], none], -1)
    return torch.logaddexp(prefix, suffix)
