"""Confidence intervals over prompt draws: the percentile bootstrap of a ratio of sums, the normal interval of
a mean from its moments, the normal (delta-method) interval of a ratio of sums accumulated over rounds
(`RatioMoments`), the z of any level (`z_for`), and the three-valued verdict. Every interval the toolkit
prints is computed here.

Every verdict the toolkit prints about a measured quantity (a head's detection score, a circuit's faithfulness
or completeness) is judged on an interval rather than on the point estimate, so that two draws of the same
size from the same checkpoint do not give opposite answers when the quantity sits near a threshold.

The interval is a percentile bootstrap over *units* (sequences or prompts): resample the units with
replacement, recompute the statistic, take the (1 - level) / 2 and (1 + level) / 2 quantiles. Every statistic
here is a ratio of sums, sum(num[units]) / sum(den[units]), which covers a mean (den = 1), a score averaged
over rows (num = mass per sequence, den = rows per sequence) and a faithfulness ((m(circuit) - m(empty)) /
(m(full) - m(empty)) per prompt, summed). The resamples come from an explicit generator, so the same inputs
give the same interval.

Caveats: the bootstrap describes the spread over draws of the same size from the same distribution, not a
model's variation over training seeds; with few units (< 20) percentile intervals are too narrow.
"""

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

RESAMPLES = 200
"""Bootstrap resamples used unless a caller asks for more."""
LEVEL = 0.95
"""Coverage of the intervals."""


def bootstrap_ratio(
    num: Float[Tensor, "unit ..."],
    den: Float[Tensor, "unit ..."] | None = None,
    *,
    generator: torch.Generator,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."]]:
    """(lower, upper): the percentile bootstrap interval of sum(num) / sum(den) over the units (dim 0).

    Args:
        num: per-unit numerators.
        den: per-unit denominators with num's shape or shape [unit] (None: ones, so the statistic is a mean).
        generator: draws the resampled unit indices.
    Returns:
        Two tensors of num's trailing shape; NaN where a resample's denominator is zero throughout.
    """
    n = num.shape[0]
    num = num.double()
    den = torch.ones(n, dtype=torch.float64) if den is None else den.double()
    if den.dim() == 1:
        den = den.reshape(n, *([1] * (num.dim() - 1)))
    if n == 0:
        nan = torch.full(num.shape[1:], float("nan"))
        return nan, nan.clone()
    idx = torch.randint(n, (resamples, n), generator=generator)
    counts = torch.zeros(resamples, n, dtype=torch.float64).scatter_add_(
        1, idx, torch.ones(resamples, n, dtype=torch.float64)
    )  # how often each unit is drawn in each resample
    flat_num = num.reshape(n, -1)
    flat_den = den.expand_as(num).reshape(n, -1)
    stats = (counts @ flat_num) / (counts @ flat_den)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    lower, upper = torch.nanquantile(stats, q, dim=0)
    return lower.reshape(num.shape[1:]).float(), upper.reshape(num.shape[1:]).float()


Z_95 = 1.96
"""The standard normal's 0.975 quantile to two decimals (1.95996...): a normal 95% interval is mean +- Z_95
standard errors."""


def standard_error(values: Float[Tensor, "..."], dim: int = 0) -> Float[Tensor, "..."]:
    """The standard error of the mean along `dim`: sample sd (n - 1) / sqrt(n); NaN below 2 values."""
    n = values.shape[dim]
    if n < 2:
        return torch.full_like(values.select(dim, 0), float("nan"), dtype=torch.float32)
    return values.std(dim) / n**0.5


def normal_interval(mean: Any, stderr: Any, *, z: float = Z_95) -> tuple[Any, Any]:
    """(lower, upper) = mean -+ z standard errors: the normal 95% interval of an estimate whose standard error
    is known (floats or tensors, elementwise; a NaN standard error gives a NaN interval)."""
    return mean - z * stderr, mean + z * stderr


def mean_interval(
    values: Float[Tensor, "unit ..."], dim: int = 0, *, z: float = Z_95
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."], Float[Tensor, "..."]]:
    """(mean, lower, upper) along `dim`: the mean of the units and its normal 95% interval, mean -+ z
    standard errors (`standard_error`, `normal_interval`); NaN bounds below 2 units.

    Example:
        >>> import torch
        >>> mean, lower, upper = mean_interval(torch.tensor([1.0, 2.0, 3.0]))
        >>> round(float(mean), 3), round(float(lower), 3), round(float(upper), 3)
        (2.0, 0.868, 3.132)
    """
    values = values.float()
    lower, upper = normal_interval(values.mean(dim), standard_error(values, dim), z=z)
    return values.mean(dim), lower, upper


def covers(lower: Any, upper: Any, value: float = 0.0) -> Any:
    """Whether each interval [lower, upper] contains `value` (floats or tensors, elementwise). A NaN bound (an
    interval too few units to estimate) counts as containing it: nothing is ruled out."""
    if isinstance(lower, Tensor) or isinstance(upper, Tensor):
        lower, upper = torch.as_tensor(lower), torch.as_tensor(upper)
        return ~((lower > value) | (upper < value))
    return not (lower > value or upper < value)


def format_interval(lower: Any, upper: Any, fmt: str = ".3f") -> str:
    """ "[lower, upper]" in `fmt`; "[-]" when either bound is unknown (None or NaN)."""
    bounds = [None if b is None else float(b) for b in (lower, upper)]
    if any(b is None or math.isnan(b) for b in bounds):
        return "[-]"
    return f"[{format(bounds[0], fmt)}, {format(bounds[1], fmt)}]"


def normal_interval_from_moments(
    total: Tensor, total_sq: Tensor, n: Tensor, *, z: float = Z_95
) -> tuple[Tensor, Tensor, Tensor]:
    """(mean, lower, upper) of means accumulated as sums: `total` = sum x, `total_sq` = sum x^2 over `n` rows
    (elementwise; the variance uses n - 1). Where n < 2 the interval has no width to estimate and is NaN."""
    mean = total / n
    var = (total_sq / n - mean.square()).clamp_min(0) * n / (n - 1).clamp_min(1)
    half = z * (var / n).sqrt()
    half = half.masked_fill(n < 2, float("nan"))
    return mean, mean - half, mean + half


def z_for(alpha: float) -> float:
    """The z of a two-sided normal interval at level 1 - alpha: Phi^-1(1 - alpha / 2) (1.95996... at 0.05).

    Example:
        >>> from mechmem.analysis.intervals import z_for
        >>> round(z_for(0.05), 3), round(z_for(0.05 / 10), 3)
        (1.96, 2.807)
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return NormalDist().inv_cdf(1 - alpha / 2)


@dataclass(frozen=True)
class RatioMoments:
    """Sums over units (sequences, prompts) of a ratio's per-unit numerator a and denominator b, every test at
    once: enough for R = sum(a) / sum(b) and its delta-method standard error, and adding two rounds' moments
    gives the moments of both (`+`). The tensors broadcast to the tests' shape (`shape`); `n` counts every
    unit, `support` the units whose b is non-zero (per test)."""

    n: int
    """Units summed over."""
    a: Tensor
    """sum a."""
    b: Tensor
    """sum b."""
    aa: Tensor
    """sum a^2."""
    bb: Tensor
    """sum b^2."""
    ab: Tensor
    """sum a b."""
    support: Tensor
    """Units with b != 0."""

    def __post_init__(self) -> None:
        try:
            self.shape  # noqa: B018 (the check)
        except RuntimeError as exc:
            shapes = [tuple(t.shape) for t in (self.a, self.b, self.aa, self.bb, self.ab, self.support)]
            raise ValueError(f"the moments' shapes must broadcast to the tests' shape, got {shapes}") from exc

    @property
    def shape(self) -> torch.Size:
        """The tests' shape: the moments broadcast to it (b, b^2 and the support may be shared, e.g. per token
        for every head)."""
        return torch.broadcast_shapes(
            *(t.shape for t in (self.a, self.b, self.aa, self.bb, self.ab, self.support))
        )

    @classmethod
    def stack(cls, parts: "list[RatioMoments]") -> "RatioMoments":
        """The moments of several test tensors, stacked on a new first axis (all over the same units)."""
        if len({p.n for p in parts}) != 1:
            raise ValueError("stacked moments must be sums over the same units")

        def both(name: str) -> Tensor:
            return torch.stack([getattr(p, name).expand(p.shape) for p in parts])

        return cls(parts[0].n, *(both(k) for k in ("a", "b", "aa", "bb", "ab", "support")))

    @classmethod
    def from_values(
        cls, num: Float[Tensor, "unit ..."], den: Float[Tensor, "unit ..."] | None = None
    ) -> "RatioMoments":
        """The moments of per-unit values: `num` [unit ...], `den` of its shape, [unit] or None (a mean).

        Example:
            >>> import torch
            >>> from mechmem.analysis.intervals import RatioMoments
            >>> m = RatioMoments.from_values(torch.tensor([1.0, 2.0, 3.0]))
            >>> float(m.ratio()), round(float(m.stderr()), 4)
            (2.0, 0.5774)
        """
        num = num.detach().double().cpu()
        den = torch.ones(num.shape[0], dtype=torch.float64) if den is None else den.detach().double().cpu()
        if den.dim() == 1:
            den = den.reshape(num.shape[0], *([1] * (num.dim() - 1)))
        den = den.expand_as(num)
        return cls(
            num.shape[0],
            num.sum(0),
            den.sum(0),
            num.square().sum(0),
            den.square().sum(0),
            (num * den).sum(0),
            (den != 0).sum(0).double(),
        )

    def __add__(self, other: "RatioMoments") -> "RatioMoments":
        return RatioMoments(
            self.n + other.n,
            self.a + other.a,
            self.b + other.b,
            self.aa + other.aa,
            self.bb + other.bb,
            self.ab + other.ab,
            self.support + other.support,
        )

    def ratio(self) -> Tensor:
        """R = sum(a) / sum(b) (NaN where sum(b) = 0)."""
        return self.a / self.b.masked_fill(self.b == 0, float("nan"))

    def stderr(self) -> Tensor:
        """The delta method's standard error of R over units: sqrt(sum_i (a_i - R b_i)^2 / (n (n - 1)
        mean(b)^2)); NaN below 2 units or where sum(b) = 0."""
        r = self.ratio()
        spread = (self.aa - 2 * r * self.ab + r.square() * self.bb).clamp_min(0)
        n = self.n
        if n < 2:
            return torch.full_like(r, float("nan"))
        return (spread * n / (n - 1)).sqrt() / self.b.abs().masked_fill(self.b == 0, float("nan"))


def verdict(lower: float, upper: float, threshold: float) -> str:
    """ "yes" when the whole interval is at or above `threshold`, "no" when it is below, else "undecided"."""
    if lower >= threshold:
        return "yes"
    if upper < threshold:
        return "no"
    return "undecided"


def combine(verdicts: list[str]) -> str:
    """All "yes" -> "yes"; any "no" -> "no"; otherwise "undecided"."""
    if "no" in verdicts:
        return "no"
    return "yes" if all(v == "yes" for v in verdicts) else "undecided"


__all__ = [
    "LEVEL",
    "RESAMPLES",
    "Z_95",
    "RatioMoments",
    "bootstrap_ratio",
    "combine",
    "covers",
    "format_interval",
    "mean_interval",
    "normal_interval",
    "normal_interval_from_moments",
    "standard_error",
    "verdict",
    "z_for",
]
