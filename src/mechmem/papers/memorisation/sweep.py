"""Sweeps of capacity searches: resumable JSONL records, the 54-variant table, and d-scaling fits.

A sweep is a list of cells (variant, sizes, repeat, schedule). `run_cells` appends one JSON line per finished
cell and skips cells whose key is already in the file, so an interrupted sweep resumes where it stopped. Repeat r
uses init seeds 11r .. 11r + 10 (the published repeats drew fresh random inits).

Scaling follows the authors: n_in = 2d, d_model = d_mlp = n_out = d, search precision 8 (d/16)^2. Two fits are
reported: the fixed-exponent law S = a d^2 / ln d and a free power law S = b d^k (both least squares in log space).
"""

import json
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from mechmem.papers.memorisation.batched import Schedule
from mechmem.papers.memorisation.capacity import N_INITS, find_capacity
from mechmem.papers.memorisation.models import FactsModelConfig
from mechmem.plotting import plt

SCALING_VARIANTS = {
    "full": FactsModelConfig(
        mixing="attn", mlp=True, norms=True, bias=True, mlp_residual=True, act_fn="gelu"
    ),
    "reduced": FactsModelConfig(
        mixing="2emb", mlp=True, norms=False, bias=True, mlp_residual=False, act_fn="relu"
    ),
    "nb": FactsModelConfig(
        mixing="2emb", mlp=True, norms=False, bias=False, mlp_residual=False, act_fn="relu"
    ),
}


@dataclass(frozen=True)
class Cell:
    """One capacity search: a variant at one size, one repeat, one schedule."""

    config: FactsModelConfig
    repeat: int
    schedule: Schedule
    precision: int = 8

    @property
    def key(self) -> str:
        c, s = self.config, self.schedule
        return (
            f"{c.name}|d={c.d_model}|n_in={c.n_in}|rep={self.repeat}|acc={s.target_acc}|"
            f"epochs={s.max_epochs}|patience={s.patience}|prec={self.precision}"
        )

    @property
    def seeds(self) -> list[int]:
        return [N_INITS * self.repeat + i for i in range(N_INITS)]


def scaled(cfg: FactsModelConfig, d: int) -> FactsModelConfig:
    """The variant at size d: n_in = 2d, d_model = d_mlp = n_out = d."""
    return cfg.replace(n_in=2 * d, n_out=d, d_model=d, d_mlp=d)


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """All records of a sweep file (missing file: none)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_cells(
    cells: Iterable[Cell], path: str | Path, *, device: str | torch.device = "cpu", progress: bool = True
) -> list[dict[str, Any]]:
    """Run every cell not yet in `path`, appending one JSON line each; returns the new records."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {r["key"] for r in load_records(path)}
    todo = [c for c in cells if c.key not in done]
    new: list[dict[str, Any]] = []
    bar = tqdm(todo, desc="capacity cells", unit="cell", disable=not progress)
    for cell in bar:
        bar.set_postfix_str(cell.config.name)
        result = find_capacity(
            cell.config, schedule=cell.schedule, seeds=cell.seeds, precision=cell.precision, device=device
        )
        record = {
            "key": cell.key,
            "repeat": cell.repeat,
            "d": cell.config.d_model,
            **result.to_dict(),
            "precision": cell.precision,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        with open(path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        new.append(record)
    return new


def _mean_sd(values: list[int] | list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.mean(values):.0f} +- {statistics.stdev(values):.0f}"


def table_rows(
    records: list[dict[str, Any]], criteria: tuple[str, ...] = ("any", "most", "all")
) -> list[list[str]]:
    """One row per variant (in first-seen order): name, repeats, mean +- sd per criterion, mean seconds."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(f"{r['variant']} (d={r['d']})", []).append(r)
    rows = []
    for name, rs in groups.items():
        rows.append(
            [
                name,
                str(len(rs)),
                *(_mean_sd([r[c] for r in rs if c in r]) for c in criteria),
                f"{statistics.mean(r['seconds'] for r in rs):.0f}",
            ]
        )
    return rows


@dataclass
class ScalingFit:
    """Fits of capacity S against d: S = a d^2 / ln d, and S = b d^k."""

    d: list[int]
    capacity: list[float]
    a: float
    b: float
    k: float

    def __post_init__(self) -> None:
        if len(self.d) != len(self.capacity) or len(self.d) < 2:
            raise ValueError("need at least two (d, capacity) points of equal length")

    def to_dict(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "capacity": self.capacity,
            "a_d2_over_lnd": self.a,
            "power_b": self.b,
            "power_k": self.k,
        }


def fit_scaling(d: list[int], capacity: list[float]) -> ScalingFit:
    """Least-squares fits in log space (points with capacity 0 are dropped)."""
    pts = [(x, y) for x, y in zip(d, capacity) if y > 0]
    xs = np.array([p[0] for p in pts], dtype=float)
    ys = np.array([p[1] for p in pts], dtype=float)
    a = float(np.exp(np.mean(np.log(ys) - np.log(xs**2 / np.log(xs)))))
    k, log_b = np.polyfit(np.log(xs), np.log(ys), 1) if len(pts) >= 2 else (math.nan, math.nan)
    return ScalingFit([int(x) for x in xs], [float(y) for y in ys], a, float(np.exp(log_b)), float(k))


def plot_scaling(fits: dict[str, ScalingFit]) -> "plt.Figure":
    """Capacity against d (log-log) with both fits, one colour per label (e.g. variant or criterion)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, (label, fit) in enumerate(fits.items()):
        colour = f"C{i % 10}"
        grid = np.geomspace(min(fit.d), max(fit.d) * 2, 50)
        ax.plot(fit.d, fit.capacity, "o", color=colour, label=f"{label}")
        ax.plot(
            grid, fit.a * grid**2 / np.log(grid), "-", color=colour, alpha=0.6, label=f"{fit.a:.2f} d^2/ln d"
        )
        ax.plot(grid, fit.b * grid**fit.k, ":", color=colour, alpha=0.6, label=f"{fit.b:.2f} d^{fit.k:.2f}")
    all_d = sorted({x for fit in fits.values() for x in fit.d})
    grid = np.geomspace(all_d[0], all_d[-1] * 2, 50)
    ax.plot(grid, 4 * grid**2, "k--", lw=0.8, label="ceiling n_in^2 = 4 d^2")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("d (n_in = 2d, d_model = d_mlp = n_out = d)")
    ax.set_ylabel("facts stored")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
