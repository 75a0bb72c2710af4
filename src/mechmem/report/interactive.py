"""The data of the report's interactive views: JSON-able dicts a section keeps in `Section.interactive`.

The page's script (`assets/report.js`) draws them: `attention_view` (patterns on a few examples, with token
names and head roles), `sweep_map` / `ablation_map` (grids with each cell's value and 95% interval where there
is one); the circuit graph is `circuit_graph.graph_view`.
"""

from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.frames import token_labels as named_tokens
from mechmem.analysis.patching import PatchingResult
from mechmem.analysis.patching.result import POSITION_AXES

EXAMPLES = 3
"""Example sequences in the attention explorer."""
WEIGHT_DECIMALS = 3
"""Decimals kept of each attention weight (the page shows three)."""


def token_labels(tokens: Int[Tensor, " pos"], names: list[str] | None) -> list[str]:
    """Each position's token as its name (`frames.token_labels`; the id where there are no names)."""
    return named_tokens([int(t) for t in tokens], names)


def attention_view(
    patterns: Float[Tensor, "layer batch head query_pos key_pos"],
    tokens: Int[Tensor, "batch pos"],
    names: list[str] | None,
    roles: dict[str, str],
    *,
    source: str,
) -> dict[str, Any]:
    """The attention explorer's data: per example its token names (`names`, None: ids) and
    patterns[layer][head][query][key] (`heads.attention_patterns` of the examples `tokens`), with each head's
    role ("L0H1" -> role) and where the examples come from (`source`, in words)."""
    n_layers, batch, n_heads = patterns.shape[:3]
    examples = [
        {
            "label": f"example {b + 1}",
            "tokens": token_labels(tokens[b], names),
            "patterns": patterns[:, b].detach().float().cpu().round(decimals=WEIGHT_DECIMALS).tolist(),
        }
        for b in range(batch)
    ]
    note = f"Examples: {source}." + (
        "" if names is not None else " Tokens shown as ids (the task names none)."
    )
    return {"layers": n_layers, "heads": n_heads, "examples": examples, "roles": roles, "note": note}


def grid_labels(
    axes: tuple[str, ...], shape: tuple[int, ...], positions: list[str] | None = None
) -> tuple[list[str], list[str]]:
    """Row and column labels of a 2-D grid: the last axis across, the others down ("L0 H0"; "pos0", or a
    position axis's entry of `positions`, e.g. "3 (pos0)")."""
    short = {"layer": "L", "head": "H", "pos": "pos", "dest_pos": "dest"}

    def label(axis: str, i: int) -> str:
        if positions is not None and axis in POSITION_AXES:
            return positions[i]
        return f"{short.get(axis, axis)}{i}"

    rows = [""]
    for axis, n in zip(axes[:-1], shape[:-1]):
        rows = [f"{r} {label(axis, i)}".strip() for r in rows for i in range(n)]
    return rows, [label(axes[-1], i) for i in range(shape[-1])]


def as_grid(values: Tensor) -> list[list[float]]:
    """`values` with every axis but the last flattened into rows (1-D values: one row)."""
    v = values.detach().float().cpu()
    return v.reshape(-1, v.shape[-1]).tolist() if v.ndim > 1 else [v.tolist()]


def sweep_map(result: PatchingResult, positions: list[str] | None = None) -> dict[str, Any]:
    """One patching sweep as a heatmap: metric after each patch with its 95% interval, restored fraction;
    a position axis is drawn across, labelled by `positions` (a prompt's tokens) where given."""
    axes = list(result.axes)
    across = next((axes.index(a) for a in POSITION_AXES if a in axes), len(axes) - 1)
    order = [i for i in range(len(axes)) if i != across] + [across]
    values, restored = result.values.permute(order), result.normalised().permute(order)
    axes = [axes[i] for i in order]
    rows, cols = grid_labels(tuple(axes), tuple(values.shape), positions)
    iv = result.intervals
    spread = "no interval" if iv is None else f"95% intervals over {iv.n_prompts} prompts"
    colour = "restored fraction"
    if result.normalised_refused:
        colour = "metric (no restored fraction: the clean - corrupted gap's interval includes 0)"
    return {
        "name": result.sweep,
        "axes": axes,
        "rows": rows,
        "cols": cols,
        "values": as_grid(values),
        "normalised": None if result.normalised_refused else as_grid(restored),
        "lower": None if iv is None else as_grid(iv.lower.permute(order)),
        "upper": None if iv is None else as_grid(iv.upper.permute(order)),
        "value_label": result.metric,
        "note": (
            f"{result.method}; clean {result.clean:.3f}, corrupted {result.corrupted:.3f}; colour: {colour}; "
            f"{spread}."
        ),
    }


def ablation_map(result: Any, method: str = "mean") -> dict[str, Any]:
    """Ablation deltas as a heatmap: one row per layer; a column per head, the attention layer and the MLP."""
    i, iv = list(result.methods).index(method), result.intervals
    has_mlp = result.mlp_layers is not None

    def grid(heads: Tensor, attn: Tensor, mlp: Tensor | None) -> Tensor:
        return torch.cat([heads[i], attn[i][:, None], *([mlp[i][:, None]] if has_mlp else [])], dim=1)

    values = grid(result.heads, result.attn_layers, result.mlp_layers).detach().float().cpu()
    return {
        "name": f"{method} ablation",
        "axes": ["layer", "component"],
        "rows": [f"L{l}" for l in range(values.shape[0])],
        "cols": [f"H{h}" for h in range(result.heads.shape[2])] + ["attn"] + (["MLP"] if has_mlp else []),
        "values": values.tolist(),
        "normalised": None,
        "lower": None if iv is None else grid(iv.heads_lower, iv.attn_lower, iv.mlp_lower).tolist(),
        "upper": None if iv is None else grid(iv.heads_upper, iv.attn_upper, iv.mlp_upper).tolist(),
        "value_label": f"delta {result.metric_name}",
        "note": (
            f"change in {result.metric_name} (baseline {result.baseline:.4f}); "
            + ("no interval." if iv is None else f"95% intervals over {iv.n_sequences} sequences.")
        ),
    }
