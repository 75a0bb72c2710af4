"""The one scaling fit of capacity against width d: S = a d^2 / ln d (the paper's law) and S = b d^k (free).

Both are least squares in log space over the points with capacity > 0: a is the geometric mean of
S / (d^2 / ln d), (k, log b) the slope and intercept of log S against log d. With one point only a is defined
(b and k are nan); two points determine the power law exactly, so its exponent is only indicative.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def d2_over_ln(d: float) -> float:
    """d^2 / ln d, the capacity scale of the fixed-exponent law."""
    return d * d / math.log(d)


@dataclass
class ScalingFit:
    """Fits of capacity S against d over the points used: S = a d^2 / ln d, and S = b d^k."""

    d: list[int]
    capacity: list[float | int]
    a: float
    b: float
    k: float

    def __post_init__(self) -> None:
        if len(self.d) != len(self.capacity):
            raise ValueError("d and capacity must have equal length")

    def to_dict(self) -> dict[str, Any]:
        return {
            "d": self.d,
            "capacity": self.capacity,
            "a_d2_over_lnd": self.a,
            "power_b": self.b,
            "power_k": self.k,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ScalingFit":
        return cls(data["d"], data["capacity"], data["a_d2_over_lnd"], data["power_b"], data["power_k"])


def fit_scaling(d: Sequence[int], capacity: Sequence[float | int]) -> ScalingFit:
    """Both fits over the points with capacity > 0 (a, b, k are nan where too few points remain)."""
    pts = [(int(x), float(y)) for x, y in zip(d, capacity) if y and y > 0]
    xs = np.array([p[0] for p in pts], dtype=float)
    ys = np.array([p[1] for p in pts], dtype=float)
    a = float(np.exp(np.mean(np.log(ys) - np.log(xs**2 / np.log(xs))))) if pts else math.nan
    k, log_b = np.polyfit(np.log(xs), np.log(ys), 1) if len(pts) >= 2 else (math.nan, math.nan)
    return ScalingFit([p[0] for p in pts], [p[1] for p in pts], a, float(np.exp(log_b)), float(k))


def log_power_exponent(d: Sequence[int], capacity: Sequence[float | int]) -> float:
    """k of the authors' challenge fit S = c d^k / ln d: the slope of log S + log ln d against log d.

    The authors fit their construction capacities this way (`hc2_sweep_plot.py`), so their exponents are about
    0.3 above the plain power-law slope over d = 16..32. nan with fewer than two points of capacity > 0.

    >>> round(log_power_exponent([16, 32, 64], [d * d / math.log(d) for d in (16, 32, 64)]), 6)
    2.0
    """
    pts = [(float(x), float(y)) for x, y in zip(d, capacity) if y and y > 0]
    if len({x for x, _ in pts}) < 2:
        return math.nan
    xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    return float(np.polyfit(np.log(xs), np.log(ys) + np.log(np.log(xs)), 1)[0])
