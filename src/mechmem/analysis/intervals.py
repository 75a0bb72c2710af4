"""Confidence intervals over prompt draws: the percentile bootstrap of a ratio of sums, and the three-valued
verdict.

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


__all__ = ["LEVEL", "RESAMPLES", "bootstrap_ratio", "combine", "verdict"]
