"""The statistics of every verdict the toolkit prints: per-unit moments, intervals, and the sequential
decision rule that judges them (docs/decisions.md).

Every measured quantity is a ratio of sums over units (sequences or prompts), sum(num) / sum(den): a mean
(den = 1), a score averaged over rows, a faithfulness. A verdict is judged on an interval, not the point
estimate: the normal (delta-method) interval from `RatioMoments`, whose sums add up over rounds and which the
sequential rule judges (trusted from `DecisionPolicy.min_units` units on), or the percentile bootstrap
(`bootstrap_ratio`). Both describe draws of the same size from one distribution, not variation over training
seeds; over repeated runs `mean_sd` gives the mean and the sample standard deviation (n - 1).

The rule: units are drawn in doubling rounds (`DecisionPolicy.looks`) and after each every test's
corrected interval is judged (`judge`) until every verdict is settled (the loop:
`mechmem.analysis.sequential`). The correction is a Bonferroni union bound: alpha is split over the
families of tests, each family's share over its tests and every planned look (`DecisionPolicy.z`), so
the final intervals cover their truths jointly with probability at least 1 - alpha whenever the
procedure stops (conservative for correlated tests).
"""

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.frames import concat, short_repr
from mechmem.analysis.options import ABLATION_BUDGET, CIRCUIT_BUDGET, HEAD_BUDGET, PATCH_BUDGET
from mechmem.config import ConfigMixin
from mechmem.io import strict_json

RESAMPLES = 200
"""Bootstrap resamples used unless a caller asks for more."""
LEVEL = 0.95
"""Coverage of the intervals."""


def _unit_values(num: Tensor, den: Tensor | None) -> tuple[Tensor, Tensor]:
    """(num, den) in float64, den expanded to num's shape from num's shape, [unit] or None (ones)."""
    den = torch.ones(num.shape[0], dtype=torch.float64) if den is None else den.double()
    if den.dim() == 1:
        den = den.reshape(num.shape[0], *([1] * (num.dim() - 1)))
    return num, den.expand_as(num)


def bootstrap_counts(
    n: int, *, generator: torch.Generator, resamples: int = RESAMPLES
) -> Float[Tensor, "resample unit"]:
    """How often each of `n` units is drawn in each bootstrap resample (n draws with replacement), float64;
    `counts @ values` sums any per-unit quantity over each resample (the resamples `bootstrap_ratio` uses
    for the same generator state).

    Example:
        >>> import torch
        >>> counts = bootstrap_counts(5, generator=torch.Generator().manual_seed(0), resamples=3)
        >>> tuple(counts.shape), counts.sum(1).tolist()
        ((3, 5), [5.0, 5.0, 5.0])
    """
    idx = torch.randint(n, (resamples, n), generator=generator)
    ones = torch.ones(resamples, n, dtype=torch.float64)
    return torch.zeros(resamples, n, dtype=torch.float64).scatter_add_(1, idx, ones)


def bootstrap_ratio(
    num: Float[Tensor, "unit ..."],
    den: Float[Tensor, "unit ..."] | None = None,
    *,
    generator: torch.Generator,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."]]:
    """(lower, upper): the percentile bootstrap interval of sum(num) / sum(den) over the units (dim 0).

    `den` has num's shape or shape [unit] (None: ones, a mean). Returns two tensors of num's trailing
    shape; NaN where a resample's denominator is zero throughout.
    """
    n = num.shape[0]
    num, den = _unit_values(num.double(), den)
    if n == 0:
        nan = torch.full(num.shape[1:], float("nan"))
        return nan, nan.clone()
    counts = bootstrap_counts(n, generator=generator, resamples=resamples)
    flat_num = num.reshape(n, -1)
    flat_den = den.reshape(n, -1)
    stats = (counts @ flat_num) / (counts @ flat_den)
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)
    lower, upper = torch.nanquantile(stats, q, dim=0)
    return lower.reshape(num.shape[1:]).float(), upper.reshape(num.shape[1:]).float()


Z_95 = 1.96
"""The standard normal's 0.975 quantile to two decimals."""


def standard_error(values: Float[Tensor, "..."], dim: int = 0) -> Float[Tensor, "..."]:
    """The standard error of the mean along `dim`: sample sd (n - 1) / sqrt(n); NaN below 2 values."""
    n = values.shape[dim]
    if n < 2:
        return torch.full_like(values.select(dim, 0), float("nan"), dtype=torch.float32)
    return values.std(dim) / n**0.5


def normal_interval(mean: Any, stderr: Any, *, z: float = Z_95) -> tuple[Any, Any]:
    """(lower, upper) = mean -+ z standard errors, elementwise (a NaN standard error gives NaN bounds)."""
    return mean - z * stderr, mean + z * stderr


def mean_interval(
    values: Float[Tensor, "unit ..."], dim: int = 0, *, z: float = Z_95
) -> tuple[Float[Tensor, "..."], Float[Tensor, "..."], Float[Tensor, "..."]]:
    """(mean, lower, upper) along `dim`: the mean and its normal 95% interval; NaN bounds below 2 units.

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
    """Whether each interval [lower, upper] contains `value`, elementwise (a NaN bound contains it)."""
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


def z_for(alpha: float) -> float:
    """The z of a two-sided normal interval at level 1 - alpha: Phi^-1(1 - alpha / 2) (1.95996... at 0.05).

    Example:
        >>> from mechmem.analysis.stats import z_for
        >>> round(z_for(0.05), 3), round(z_for(0.05 / 10), 3)
        (1.96, 2.807)
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return NormalDist().inv_cdf(1 - alpha / 2)


@dataclass(frozen=True)
class RatioMoments:
    """Sums over units of a ratio's per-unit numerator a and denominator b, for every test at once: enough
    for R = sum(a) / sum(b) and its delta-method standard error; two rounds' moments add (`+`). `n`
    counts every unit, `support` the units whose b is non-zero."""

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
            shapes = [tuple(t.shape) for t in self.sums()]
            raise ValueError(f"the moments' shapes must broadcast to the tests' shape, got {shapes}") from exc

    @property
    def shape(self) -> torch.Size:
        """The tests' shape, to which the moments broadcast."""
        return torch.broadcast_shapes(*(t.shape for t in self.sums()))

    def sums(self) -> tuple[Tensor, ...]:
        """(a, b, aa, bb, ab, support), in the constructor's order."""
        return self.a, self.b, self.aa, self.bb, self.ab, self.support

    @classmethod
    def stack(cls, parts: "list[RatioMoments]") -> "RatioMoments":
        """The moments of several test tensors, stacked on a new first axis (all over the same units)."""
        if len({p.n for p in parts}) != 1:
            raise ValueError("stacked moments must be sums over the same units")

        sums = [[t.expand(p.shape) for t in p.sums()] for p in parts]
        return cls(parts[0].n, *(torch.stack(ts) for ts in zip(*sums)))

    @classmethod
    def from_values(
        cls, num: Float[Tensor, "unit ..."], den: Float[Tensor, "unit ..."] | None = None
    ) -> "RatioMoments":
        """The moments of per-unit values: `num` [unit ...], `den` of its shape, [unit] or None (a mean).

        Example:
            >>> import torch
            >>> from mechmem.analysis.stats import RatioMoments
            >>> m = RatioMoments.from_values(torch.tensor([1.0, 2.0, 3.0]))
            >>> float(m.ratio()), round(float(m.stderr()), 4)
            (2.0, 0.5774)
        """
        num, den = _unit_values(num.detach().double().cpu(), None if den is None else den.detach().cpu())
        sums = (x.sum(0) for x in (num, den, num.square(), den.square(), num * den))
        return cls(num.shape[0], *sums, (den != 0).sum(0).double())

    def __add__(self, other: "RatioMoments") -> "RatioMoments":
        return RatioMoments(self.n + other.n, *(x + y for x, y in zip(self.sums(), other.sums())))

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


def mean_sd(values: Sequence[float | int]) -> tuple[float, float | None]:
    """(mean, sample sd) of `values`; the sd is None for a single value. Empty input is a ValueError."""
    if not values:
        raise ValueError("mean_sd of no values")
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else None


def format_mean_sd(values: Sequence[float | int], fmt: str = ".3f", sep: str = " ± ") -> str:
    """ "m ± s", both in `fmt` (sample sd, see the module docstring); one value alone; "-" for none."""
    if not values:
        return "-"
    mean, sd = mean_sd(values)
    if sd is None:
        return format(values[0], fmt)
    return f"{format(mean, fmt)}{sep}{format(sd, fmt)}"


MIN_GAP = 1.0
"""A behaviour is there when the corrected interval of its clean - corrupted gap lies outside (-1, 1)."""
PATCH_SHARE = 0.1
"""A patched cell matters when the corrected interval of its share of the gap lies outside (-0.1, 0.1)."""
EDGE_SHARE = 0.05
"""An edge is in the decided circuit when the corrected interval of its share lies outside (-0.05, 0.05)."""
ABLATION_DELTA = 0.05
"""A component matters when the corrected interval of its ablation's loss change is outside +-0.05 nats."""
ABLATION_THRESHOLDS = {"loss": ABLATION_DELTA, "accuracy": 0.05, "logit_diff": 0.1}
"""Per metric, the size of change that makes a component matter (docs/decisions.md, "Ablation")."""
HEAD_FIRST = 64
"""Sequences per probe of head naming's first look (docs/decisions.md)."""
PATCH_FIRST = 64
"""Pairs of activation patching's first look (docs/decisions.md)."""
ABLATION_FIRST = 64
"""Sequences of ablation's first look (docs/decisions.md)."""
CIRCUIT_PROMPTS = 64
"""Prompts of the circuit's pair: the first look of `CIRCUIT_POLICY`."""

YES, NO, UNDECIDED = 1, 0, -1
"""The codes of `FamilyDecision.code`."""
VERDICTS = {YES: "yes", NO: "no", UNDECIDED: "undecided"}
DECISION_COLUMNS = [
    "family", "test", "mean", "lower", "upper", "corrected_lower", "corrected_upper", "n", "verdict",
    "n_needed",
]  # fmt: skip
"""The columns of `Decision.to_dataframe` (plus one column per axis of a family)."""
INTERVAL_FIELDS = DECISION_COLUMNS[2:7]
"""A `FamilyDecision`'s mean and bounds, in column order."""


@dataclass(frozen=True)
class DecisionPolicy(ConfigMixin):
    """How prompts are drawn and when a verdict is decided (docs/decisions.md)."""

    alpha: float = 0.05
    """Chance, over the whole analysis, that some final corrected interval misses its truth."""
    first: int = 64
    """Units (sequences, prompts) of the first look; every later look doubles it."""
    budget: int = 1024
    """Units of the last look."""
    precision: float = 0.01
    """A test whose corrected half-width is at most this stops sampling (precise)."""
    min_units: int = 20
    """A test needs this many units with a non-zero denominator before its interval counts."""

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha must lie in (0, 1), got {self.alpha}")
        if not 1 <= self.first <= self.budget:
            raise ValueError(f"need 1 <= first <= budget, got first {self.first}, budget {self.budget}")
        if self.precision < 0 or self.min_units < 2:
            raise ValueError("precision must be >= 0 and min_units >= 2")

    def looks(self) -> tuple[int, ...]:
        """The planned look sizes: first, 2 x first, 4 x first, ... while below the budget, then it."""
        sizes, n = [], self.first
        while n < self.budget:
            sizes.append(n)
            n *= 2
        return (*sizes, self.budget)

    def z(self, tests: int, families: int = 1) -> float:
        """The corrected z of one test: two-sided level 1 - alpha / (families x tests x K), K looks."""
        return z_for(self.alpha / (families * max(tests, 1) * len(self.looks())))

    def rounded(self, n: float) -> float:
        """`n` rounded up to a look of the doubling schedule (first x 2^k, beyond the budget too)."""
        if not math.isfinite(n):
            return n
        look = self.first
        while look < n:
            look *= 2
        return float(look)

    def with_budget(self, budget: int) -> "DecisionPolicy":
        """The same policy with another budget (the first look shrinks to it when it is smaller)."""
        return DecisionPolicy(self.alpha, min(self.first, budget), budget, self.precision, self.min_units)


HEAD_POLICY = DecisionPolicy(first=HEAD_FIRST, budget=HEAD_BUDGET)
"""Head naming, in sequences per probe (`roles.measure_pattern_evidence`): the report's and mechmem heads'."""
CIRCUIT_POLICY = DecisionPolicy(first=CIRCUIT_PROMPTS, budget=CIRCUIT_BUDGET)
"""The circuit verdict, in prompts (`circuits.discovery.decided_circuit`)."""
ABLATION_POLICY = DecisionPolicy(first=ABLATION_FIRST, budget=ABLATION_BUDGET)
"""Ablation, in evaluation sequences (`ablation.decided_ablation`): the report's and mechmem ablate's."""
MLP_POLICY = DecisionPolicy(first=ABLATION_FIRST, budget=ABLATION_BUDGET)
"""The MLP's role, in evaluation sequences (`mlp_role.decided_mlp_role`): the report's MLP section."""
PATCH_POLICY = DecisionPolicy(first=PATCH_FIRST, budget=PATCH_BUDGET)
"""Activation patching, in clean/corrupted pairs (`patching.decided_patching`)."""


@dataclass(frozen=True)
class Band:
    """A two-sided threshold: a test is "yes" when its corrected interval lies inside [lower, upper] and "no"
    when it lies wholly below `lower` or wholly above `upper`."""

    lower: float
    upper: float

    def __post_init__(self) -> None:
        if not self.lower < self.upper:
            raise ValueError(f"a band needs lower < upper, got [{self.lower}, {self.upper}]")


@dataclass(frozen=True)
class FamilyDecision:
    """One family of tests after the last look: every tensor has the family's shape."""

    name: str
    threshold: Tensor
    absolute: bool
    """Judged on |value| (yes: the corrected interval lies outside (-threshold, threshold))."""
    z: float
    """The corrected z used at every look."""
    n: int
    mean: Tensor
    lower: Tensor
    """Marginal 95%: mean - 1.96 standard errors (for reading)."""
    upper: Tensor
    corrected_lower: Tensor
    """mean - z standard errors: what the verdict is judged on."""
    corrected_upper: Tensor
    testable: Tensor
    """At least `min_units` units with a non-zero denominator."""
    reachable: Tensor
    """Testable, or expected to become so by the budget (support x budget / n >= min_units)."""
    code: Tensor
    """YES, NO or UNDECIDED per test."""
    precise: Tensor
    """Corrected half-width <= the policy's precision."""
    n_needed: Tensor
    """Units that would decide an undecided test, rounded up to a look (inf: the mean sits on the
    threshold; NaN: untestable); n for a decided one."""
    axes: tuple[str, ...] = ()
    units: Tensor | None = None
    """Per test, the units it was judged on where tests differ (`decide(freeze=)`); None: `n` for all."""
    ceiling: float | None = None
    """The upper end of a `Band` threshold (`threshold` is its lower end); None for a one-sided test."""

    def __post_init__(self) -> None:
        shape = self.mean.shape
        names = ("lower", "upper", "corrected_lower", "corrected_upper", "code", "precise", "n_needed")
        for name in names:
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} must have the family's shape {tuple(shape)}")

    @property
    def open(self) -> Tensor:
        """Tests that would gain from more units: undecided, not precise, testable within the budget."""
        return (self.code == UNDECIDED) & self.reachable & ~self.precise

    def verdicts(self) -> list[str]:
        """Every test's verdict in words, in flat order."""
        return [VERDICTS[int(c)] for c in self.code.flatten().tolist()]

    def tally(self, tests: str, matter: str, units: str) -> str:
        """The verdicts counted in words: "k {tests} {matter}, m do not, u undecided", with the {units}
        suggested to decide the last undecided one (where finite)."""
        verdicts = self.verdicts()
        undecided = verdicts.count("undecided")
        text = (
            f"{verdicts.count('yes')} {tests} {matter}, {verdicts.count('no')} do not, {undecided} undecided"
        )
        needed = self.n_needed[self.code == UNDECIDED]
        finite = needed[needed.isfinite()]
        if undecided and len(finite):
            text += f" (about {int(finite.max())} {units} would decide the last of them)"
        return text

    def to_dataframe(self) -> Any:
        """One row per test (`DECISION_COLUMNS` plus one column per axis)."""
        import pandas as pd

        flat, n_axes = torch.arange(self.mean.numel()), self.mean.dim()
        index = torch.stack(torch.unravel_index(flat, self.mean.shape)) if n_axes else flat[None]
        axes = self.axes if len(self.axes) == n_axes else [f"axis{i}" for i in range(n_axes)]
        columns: dict[str, Any] = {"family": self.name, "test": flat.numpy()}
        columns |= {axis: index[i].numpy() for i, axis in enumerate(axes)}
        for key in INTERVAL_FIELDS:
            columns[key] = getattr(self, key).flatten().float().numpy()
        n = self.n if self.units is None else self.units.flatten().numpy()
        columns |= {"n": n, "verdict": self.verdicts(), "n_needed": self.n_needed.flatten().numpy()}
        return pd.DataFrame(columns)

    def to_dict(self) -> dict[str, Any]:
        def plain(t: Tensor) -> Any:
            return strict_json(t.double().tolist())

        return {
            "axes": list(self.axes),
            "threshold": plain(self.threshold),
            "absolute": self.absolute,
            "ceiling": self.ceiling,
            "z": self.z,
            "n": self.n,
            **{key: plain(getattr(self, key)) for key in INTERVAL_FIELDS},
            "verdict": self.verdicts(),
            "n_needed": plain(self.n_needed),
        } | ({} if self.units is None else {"units": plain(self.units)})


@dataclass(frozen=True)
class Decision:
    """What `decide` found: per family its tests' intervals and verdicts, the policy, the looks taken."""

    families: dict[str, FamilyDecision]
    policy: DecisionPolicy
    looks: tuple[int, ...]
    """The look sizes taken (a prefix of `policy.looks()`)."""
    stopped: str
    """Why sampling stopped: "settled" (every verdict settled) or "budget"."""
    info: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> FamilyDecision:
        return self.families[name]

    @property
    def n(self) -> int:
        return self.looks[-1] if self.looks else 0

    def to_dataframe(self) -> Any:
        """Every family's rows (`FamilyDecision.to_dataframe`), family after family."""
        frames = [f.to_dataframe() for f in self.families.values()]
        axes = [a for f in frames for a in f.columns if a not in DECISION_COLUMNS]
        columns = DECISION_COLUMNS[:2] + list(dict.fromkeys(axes)) + DECISION_COLUMNS[2:]
        frame = concat(frames, columns)
        return frame[columns] if len(frame) else frame

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.to_dict(),
            "looks": list(self.looks),
            "stopped": self.stopped,
            "families": {k: f.to_dict() for k, f in self.families.items()},
            "rule": "docs/decisions.md",
            **self.info,
        }

    def __repr__(self) -> str:
        counts = [
            f"{name}: "
            + ", ".join(f"{int((f.code == code).sum())} {word}" for code, word in VERDICTS.items())
            for name, f in self.families.items()
        ]
        return short_repr(
            "Decision",
            f"looks {', '.join(map(str, self.looks))} ({self.stopped})",
            "; ".join(counts),
            f"alpha {self.policy.alpha}",
        )


def judge(
    moments: RatioMoments,
    threshold: float | Tensor | Band,
    *,
    z: float,
    policy: DecisionPolicy,
    absolute: bool = False,
    name: str = "",
    axes: tuple[str, ...] = (),
) -> FamilyDecision:
    """One family's intervals, verdicts, precision and n_needed from its accumulated moments at level z."""
    mean, se = moments.ratio().expand(moments.shape), moments.stderr().expand(moments.shape)
    band = threshold if isinstance(threshold, Band) else None
    t = torch.as_tensor(threshold if band is None else band.lower, dtype=torch.float64).expand_as(mean)
    support = moments.support.expand(moments.shape)
    testable = support >= policy.min_units
    low, high = normal_interval(mean, se, z=z)
    if band is not None:
        yes, no = (low >= band.lower) & (high <= band.upper), (high < band.lower) | (low > band.upper)
        distance = torch.minimum((mean - band.lower).abs(), (mean - band.upper).abs())
    elif absolute:
        yes, no = (low >= t) | (high <= -t), (high < t) & (low > -t)
        distance = (mean.abs() - t).abs()
    else:
        yes, no = low >= t, high < t
        distance = (mean - t).abs()
    code = torch.full(mean.shape, UNDECIDED, dtype=torch.int8)
    code = code.masked_fill(no & testable, NO).masked_fill(yes & testable, YES)
    needed = (moments.n * (z * se / distance).square()).nan_to_num(float("inf"), posinf=float("inf"))
    needed = policy.first * torch.exp2(torch.log2(needed / policy.first).ceil().clamp_min(0))
    needed = needed.masked_fill(distance == 0, float("inf"))
    needed = needed.masked_fill(code != UNDECIDED, float(moments.n)).masked_fill(~testable, float("nan"))
    intervals = (mean, *normal_interval(mean, se), low, high)
    reachable = testable | (support * policy.budget / max(moments.n, 1) >= policy.min_units)
    tests = (testable, reachable, code, (z * se <= policy.precision) & testable, needed)
    ceiling = None if band is None else band.upper
    return FamilyDecision(name, t, absolute, z, moments.n, *intervals, *tests, axes, ceiling=ceiling)


def no_open_tests(families: Mapping[str, FamilyDecision]) -> bool:
    """The default stop: no test is open (every one is decided, precise or untestable)."""
    return not any(bool(f.open.any()) for f in families.values())
