"""Matplotlib for the toolkit's figures: pyplot as it is, with no backend forced on import.

A notebook keeps its inline backend and a desktop session its window backend; a machine without a display
gets matplotlib's own non-interactive fallback. The scripts select the non-interactive Agg backend
themselves (`mechmem.cli.run_script`), since they only ever write figures to files.
"""

import math
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt

__all__ = ["cell_ticks", "figure_png", "plt"]


def figure_png(fig: Any, *, dpi: int = 110) -> bytes:
    """The one place a figure is saved: PNG bytes with the bounding box grown to every label and title
    (`bbox_inches="tight"`), and the figure closed. Figures are drawn with constrained layout, so panels do
    not overlap either."""
    import io

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", pad_inches=0.1)
    finally:
        plt.close(fig)
    return buf.getvalue()


def cell_ticks(
    ax: Any,
    shape: tuple[int, int],
    *,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    most: int = 32,
) -> None:
    """Ticks at the cells of an `imshow` grid of `shape` (rows, columns): one per row and column (every k-th
    beyond `most`), labelled by the index or by the given labels (columns then turned upright), never at
    the half-integer edges between cells."""
    for axis, n, labels in ((ax.yaxis, shape[0], row_labels), (ax.xaxis, shape[1], col_labels)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{len(labels)} tick labels for an axis of {n} cells")
        ticks = list(range(0, n, max(1, math.ceil(n / most))))
        axis.set_ticks(ticks, [str(i) if labels is None else labels[i] for i in ticks])
    if col_labels is not None:
        ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    if row_labels is not None:
        ax.tick_params(axis="y", labelsize=7)
