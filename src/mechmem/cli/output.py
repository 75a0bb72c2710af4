"""Writing a script's outputs: figures as PNG, every file of a run staged and renamed together, and the
record of an analysis that does not apply."""

import os
from pathlib import Path
from typing import Any

from mechmem.io import OutputSet, atomic_write, dumps


def figure_png(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes (and closed)."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG atomically and close it."""
    return atomic_write(path, figure_png(fig))


def write_outputs(out: str | os.PathLike, files: dict[str, Any]) -> list[Path]:
    """Write a script's outputs into `out` together (`mechmem.io.OutputSet`): a value whose name ends in .png
    is a matplotlib figure, any other is written as strict JSON. Every file is staged first and all are
    renamed into place at the end, so a failure leaves the previous outputs as they were."""
    with OutputSet(out) as staged:
        for name, value in files.items():
            staged.add(name, figure_png(value) if name.endswith(".png") else dumps(value, indent=2) + "\n")
    return [Path(out) / name for name in files]


def skipped(reason: str, name: str, record: dict[str, Any] | None = None) -> dict[str, Any]:
    """An analysis that does not apply: print `skipped: REASON` and return its one output file, `name`, as
    `{"skipped": REASON, ...record}` (the script writes it like any other output; exit status 0)."""
    print(f"skipped: {reason}")
    return {name: {"skipped": reason, **(record or {})}}
