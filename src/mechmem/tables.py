"""Plain-text tables with right-aligned numbers, for scripts and for the analyses' printed summaries."""

from collections.abc import Sequence
from typing import Any


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> str:
    """A plain-text table with right-aligned numbers."""
    body = [[format(v, floatfmt) if isinstance(v, float) else str(v) for v in row] for row in rows]
    widths = [
        max(len(str(h)), *(len(r[i]) for r in body)) if body else len(str(h)) for i, h in enumerate(headers)
    ]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line, sep, *("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body)])


def print_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> None:
    print(format_table(rows, headers, floatfmt=floatfmt))
