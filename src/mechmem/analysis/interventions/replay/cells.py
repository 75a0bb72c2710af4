"""Patching cells kept as one activation, a source and each cell's index, built only where a pass reads them.

`CellPatches` keeps the base activation, the source and the cells' indices instead of a full copy per
variant; one comparison of source and base finds which cells change anything and from which position.
The rows equal the stacked copies' bit for bit (`Replay.patched_metric` takes either form).
"""

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Int
from torch import Tensor


@dataclass(frozen=True)
class CellPatches:
    """Variants of one activation: variant i equals `source` inside cell `cells[i]` and `act` elsewhere.
    `act` and `source` are [batch or 1, *axes]; `cells` [cell, len(axes)] holds one index per axis after
    the batch (-1: the whole axis); `pos_dim` (negative) is the position axis."""

    act: Tensor
    source: Tensor
    cells: Int[Tensor, "cell axis"]
    pos_dim: int

    def __len__(self) -> int:
        return len(self.cells)

    @property
    def _pos_axis(self) -> int:
        """The position axis among the axes after the batch (0-based)."""
        return self.act.ndim + self.pos_dim - 1

    def _pair(
        self, readout: Tensor | None, prompts: Tensor | None = None, start: int = 0
    ) -> tuple[Tensor, Tensor]:
        """(act, source) broadcast together, from position `start` on or at `readout`, of `prompts` only."""
        size = self.act.shape[self.pos_dim] - start
        pair = torch.broadcast_tensors(
            *(x.narrow(self.pos_dim, start, size) for x in (self.act, self.source))
        )
        if prompts is not None:
            pair = [x.index_select(0, prompts) for x in pair]
            readout = None if readout is None else readout[prompts]
        if readout is not None:
            pair = [take_pos(x, readout, -x.ndim, self.pos_dim) for x in pair]
        return pair[0], pair[1]

    def changes(
        self, readout: Int[Tensor, "batch read"] | None = None
    ) -> tuple[Bool[Tensor, "cell batch"], Int[Tensor, " cell"]]:
        """(whether cell i changes anything in prompt b, cell i's first changed position) for every cell;
        with `readout`, only the read-out positions count and every first position is 0."""
        act, source = self._pair(readout)
        diff = act != source  # [batch, *axes]
        pos = self._pos_axis
        indexed = {a for a in range(diff.ndim - 1) if bool((self.cells[:, a] >= 0).any())} | {pos}
        dropped = [a + 1 for a in range(diff.ndim - 1) if a not in indexed]
        along = diff.any(dim=dropped) if dropped else diff  # [batch, *indexed axes in order]
        order = sorted(indexed)
        along = along.movedim(order.index(pos) + 1, 1).cpu()  # [batch, pos or read, *others]
        others = [a for a in order if a != pos]
        where = torch.arange(along.shape[1]) if readout is None else readout.cpu()
        changed = torch.zeros(len(self), diff.shape[0], dtype=torch.bool)
        first = torch.zeros(len(self), dtype=torch.long)
        for i, cell in enumerate(self.cells.tolist()):
            view = along[
                (slice(None), slice(None), *(cell[a] if cell[a] >= 0 else slice(None) for a in others))
            ]
            hits = view.reshape(*view.shape[:2], -1).any(-1)  # [batch, pos or read]
            if cell[pos] >= 0:
                hits = hits & (where == cell[pos])
            changed[i] = hits.any(1)
            if readout is None and bool(changed[i].any()):
                first[i] = int(hits.any(0).float().argmax())
        return changed, first

    def mask(self, idx: Tensor, start: int = 0, readout: Tensor | None = None) -> Tensor:
        """Masks of cells `idx`, broadcastable against [len(idx), batch, *axes] cut to positions `start` on
        (or gathered at `readout`)."""
        device = self.act.device
        cells = self.cells[idx.cpu()].to(device)
        ndim = self.act.ndim  # batch + axes; the mask adds the cell axis in front
        out = torch.ones(len(cells), *[1] * ndim, dtype=torch.bool, device=device)
        for a in range(ndim - 1):
            at = cells[:, a]
            if not bool((at >= 0).any()):
                continue
            shape = [len(cells)] + [1] * ndim
            if a == self._pos_axis and readout is not None:
                hit = (at[:, None, None] == readout) | (at[:, None, None] < 0)
                shape[1], shape[a + 2] = readout.shape
            else:
                offset = start if a == self._pos_axis else 0
                size = self.act.shape[a + 1] - offset
                hit = (at[:, None] == torch.arange(offset, offset + size, device=device)) | (at[:, None] < 0)
                shape[a + 2] = size
            out = out & hit.reshape(shape)
        return out

    def rows(
        self, idx: Tensor, start: int = 0, readout: Tensor | None = None, prompts: Tensor | None = None
    ) -> Tensor:
        """[len(idx), batch, *axes]: the variants `idx` from position `start` on, or at `readout`; of
        `prompts` only, if given."""
        act, source = self._pair(readout, prompts, start if readout is None else 0)
        readout = readout if readout is None or prompts is None else readout[prompts]
        return torch.where(self.mask(idx, start, readout), source, act)


def take_pos(x: Tensor, readout: Int[Tensor, "batch read"], batch_dim: int, pos_dim: int) -> Tensor:
    """Select, for each prompt b, the positions `readout[b]` along `pos_dim` (prompts along `batch_dim`)."""
    if x.shape[pos_dim] == 1:
        return x
    shape = [1] * x.ndim
    shape[batch_dim], shape[pos_dim] = readout.shape
    if x.shape[batch_dim] == 1:
        x = x.expand(*[readout.shape[0] if d == x.ndim + batch_dim else -1 for d in range(x.ndim)])
    size = list(x.shape)
    size[pos_dim] = readout.shape[1]
    return x.gather(pos_dim, readout.reshape(shape).expand(size))


__all__ = ["CellPatches", "take_pos"]
