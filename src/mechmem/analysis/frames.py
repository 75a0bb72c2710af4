"""Results as tables: the long-form pandas DataFrames and the short reprs of the analysis results.

Every result's `to_dataframe()` has one row per measured cell, one column per axis (`layer`, `head`, `pos`,
`stage`, `method`, ...), the measurement in `value`, and `lower` / `upper` where the result stores an
interval. Rows with a token axis carry `token_id` and `token` (`Task.token_names`, else the id as a string).

    frame = result.to_dataframe()
    frame.pivot_table(index="layer", columns="head", values="value")      # back to a grid
"""

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jaxtyping import Int
from torch import Tensor


def grid_frame(
    values: Tensor,
    axes: Sequence[str],
    *,
    lower: Tensor | None = None,
    upper: Tensor | None = None,
    labels: Mapping[str, Sequence[Any]] | None = None,
    leading: Mapping[str, Any] | None = None,
) -> Any:
    """One row per cell of `values`, in row-major order: a column per axis, then `value` (and `lower`,
    `upper` when given). An axis named in `labels` holds `labels[axis][index]` instead of the index;
    `leading` columns are placed first."""
    import pandas as pd

    array = values.detach().cpu().numpy()
    if array.ndim != len(axes):
        raise ValueError(f"values have {array.ndim} axes but {len(axes)} axis names {tuple(axes)}")
    index = np.indices(array.shape).reshape(len(axes), -1)
    columns: dict[str, Any] = {}
    for name, value in (leading or {}).items():
        columns[name] = np.full(array.size, value, dtype=object if isinstance(value, str) else None)
    for name, position in zip(axes, index):
        named = (labels or {}).get(name)
        columns[name] = position if named is None else np.asarray(list(named), dtype=object)[position]
    columns["value"] = array.reshape(-1)
    for name, bound in (("lower", lower), ("upper", upper)):
        if bound is not None:
            columns[name] = bound.detach().cpu().numpy().reshape(-1)
    return pd.DataFrame(columns)


def token_labels(ids: Sequence[int] | np.ndarray, token_names: Sequence[str] | None) -> list[str]:
    """The `token` column of token ids: each id's name in `token_names`, or the id itself as a string."""
    ids = np.asarray(ids, dtype=np.int64)
    if token_names is None:
        return [str(i) for i in ids.tolist()]
    if ids.size and not 0 <= ids.min() <= ids.max() < len(token_names):
        raise ValueError(f"token ids reach {ids.max()} but there are {len(token_names)} token names")
    return np.asarray(list(token_names), dtype=object)[ids].tolist()


def position_labels(
    ids: Int[Tensor, " pos"] | Sequence[int] | np.ndarray, token_names: Sequence[str] | None
) -> list[str]:
    """Labels of a prompt's positions for a figure or table axis: each token's name (`token_labels`) with
    its position, so repeated tokens stay apart.

    Example:
        >>> position_labels([2, 0, 2], ["a", "b", "c"])
        ['c (pos0)', 'a (pos1)', 'c (pos2)']
    """
    names = token_labels([int(i) for i in ids], token_names)
    return [f"{name} (pos{i})" for i, name in enumerate(names)]


def with_tokens(frame: Any, token_names: Sequence[str] | None, column: str = "token_id") -> Any:
    """`frame` with a `token` column naming the ids in `column` (`token_labels`), placed right after it."""
    names = token_labels(frame[column].to_numpy(), token_names)
    frame.insert(frame.columns.get_loc(column) + 1, "token", names)
    return frame


def concat(frames: Sequence[Any], columns: Sequence[str]) -> Any:
    """The frames one after another with a fresh index; an empty frame with `columns` when there are none."""
    import pandas as pd

    kept = [f for f in frames if len(f)]
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=list(columns))


def short_repr(name: str, *parts: str) -> str:
    """`name(part, part, ...)`: a result's repr, what it measured and its headline numbers, no tensors."""
    return f"{name}({', '.join(p for p in parts if p)})"


def shape_text(axes: Sequence[str], shape: Sequence[int]) -> str:
    """Axes with their sizes, e.g. "layer 2 x head 3"."""
    return " x ".join(f"{a} {n}" for a, n in zip(axes, shape))
