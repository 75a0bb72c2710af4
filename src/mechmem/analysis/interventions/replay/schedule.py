"""Scheduling the replay's patched passes: each cell's pass resumes at its first changed position, and
cells whose starts are close share one pass."""

import torch
from jaxtyping import Int
from torch import Tensor


def first_position(hit: Tensor, pos_dim: int) -> Int[Tensor, " cell"]:
    """For each cell (leading axis), the first position along `pos_dim` where the patch changes anything."""
    dims = [d for d in range(1, hit.ndim) if d != hit.ndim + pos_dim]
    along = hit.any(dim=dims) if dims else hit
    return along.float().argmax(-1).cpu()


def start_groups(starts: Int[Tensor, " cell"], batch: int, overhead: int = 256) -> list[Tensor]:
    """Group cells into passes that each resume at their earliest start position: a group joins the
    previous pass when its extra positions (about `batch` token-layers each) cost less than `overhead`."""
    order = torch.argsort(starts, stable=True)
    groups: list[list[int]] = []
    first_start = 0
    for i in order.tolist():
        if groups:
            same_start = int(starts[i]) == first_start
            if same_start or batch * (int(starts[i]) - first_start) < overhead:
                groups[-1].append(i)
                continue
        groups.append([i])
        first_start = int(starts[i])
    return [torch.tensor(g) for g in groups]


__all__ = ["first_position", "start_groups"]
