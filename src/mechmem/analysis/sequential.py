"""Sequential decisions: draw prompts in rounds until every verdict is decided (docs/decisions.md).

A verdict on a measured quantity ("this head attends to the previous token", "this circuit is faithful") is
judged on an interval, and an interval has a width that depends on how many prompts were drawn. A fixed sample
size is too many for a clear verdict and too few for a borderline one. Here prompts are drawn in doubling
rounds (`DecisionPolicy.looks`: first, 2 x first, ... up to a budget); after each round every test's corrected
interval is computed, and the procedure stops as soon as every verdict is settled.

Peeking after every round and stopping when an interval first clears its threshold would make a 95% interval
miss far more often than 5% of the time, and so would judging many tests (every head, pattern and token) each
at 95%. The correction here is a union bound over both: alpha is split equally over the families of tests, and
each family's share over its tests and over every planned look (`DecisionPolicy.z`), so the final corrected
intervals cover their truths jointly with probability at least 1 - alpha whenever the procedure stops.

Every quantity is a ratio of sums over units (`intervals.RatioMoments`: a mean, a head's score, a
faithfulness); intervals are normal, with the delta method's standard error, so they are trusted from
`min_units` units on. Caveats: Bonferroni is conservative when tests are correlated (the heads of one model
are); the normal interval of a bounded score near 0 or 1 with few units is too narrow.

    from mechmem.analysis.sequential import DecisionPolicy, decide
    result = decide(draw, {"score": 0.5}, policy=DecisionPolicy(), generator=torch.Generator().manual_seed(0))

Long because the policy, the judgement of a family at a look, the frozen tests and the loop over looks are one
rule, which docs/decisions.md states in one place and which must be read against it in one piece.
"""

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from mechmem.analysis.frames import concat, short_repr
from mechmem.analysis.intervals import Z_95, RatioMoments, z_for
from mechmem.analysis.options import (
    ABLATION_BUDGET,
    ABLATION_FIRST,
    CIRCUIT_BUDGET,
    CIRCUIT_PROMPTS,
    HEAD_BUDGET,
    HEAD_FIRST,
    PATCH_BUDGET,
    PATCH_FIRST,
)
from mechmem.config import ConfigMixin

YES, NO, UNDECIDED = 1, 0, -1
"""The codes of `FamilyDecision.code`."""
VERDICTS = {YES: "yes", NO: "no", UNDECIDED: "undecided"}
DECISION_COLUMNS = [
    "family",
    "test",
    "mean",
    "lower",
    "upper",
    "corrected_lower",
    "corrected_upper",
    "n",
    "verdict",
    "n_needed",
]
"""The columns of `Decision.to_dataframe` (plus one column per axis of a family)."""

Draw = Callable[..., Mapping[str, RatioMoments]]
"""(how many new units, generator) -> per family, the moments of those units' values. With
`decide(freeze=)` a third argument: per freezing family, the [tests] mask of those still measured (a family
absent from it: every test); the moments of the others are ignored, so a draw may skip measuring them."""


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
        """The planned look sizes: first, 2 x first, 4 x first, ... while below the budget, then the budget
        itself."""
        sizes, n = [], self.first
        while n < self.budget:
            sizes.append(n)
            n *= 2
        return (*sizes, self.budget)

    def z(self, tests: int, families: int = 1) -> float:
        """The corrected z of one test of a family of `tests` among `families`: two-sided level
        1 - alpha / (families x tests x K) at each of the K looks."""
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
"""The circuit verdict, in prompts (`circuits.discovery.decided_circuit`): the report's and mechmem
circuit's."""
ABLATION_POLICY = DecisionPolicy(first=ABLATION_FIRST, budget=ABLATION_BUDGET)
"""Ablation, in evaluation sequences (`ablation.decided_ablation`): the report's and mechmem ablate's."""
MLP_POLICY = DecisionPolicy(first=ABLATION_FIRST, budget=ABLATION_BUDGET)
"""The MLP's role, in evaluation sequences (`mlp_role.decided_mlp_role`): the report's MLP section."""
PATCH_POLICY = DecisionPolicy(first=PATCH_FIRST, budget=PATCH_BUDGET)
"""Activation patching, in clean/corrupted pairs (`patching.decided_patching`): the report's and mechmem
patch's."""


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
    """Units the estimate and spread suggest would decide an undecided test, rounded up to a look (inf: the
    mean sits on the threshold; NaN: untestable); n for a decided one."""
    axes: tuple[str, ...] = ()
    units: Tensor | None = None
    """Per test, the units it was judged on where that differs between tests (frozen tests,
    `decide(freeze=)`); None: `n` for every test."""
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
        """Tests that would still gain from more units: undecided, not precise, and testable or expected to
        become so within the budget (a token seen too rarely to ever count does not hold the others up)."""
        return (self.code == UNDECIDED) & self.reachable & ~self.precise

    def verdicts(self) -> list[str]:
        """Every test's verdict in words, in flat order."""
        return [VERDICTS[int(c)] for c in self.code.flatten().tolist()]

    def tally(self, tests: str, matter: str, units: str) -> str:
        """The verdicts counted in words: "k {tests} {matter}, m do not, u undecided", with the {units} the
        estimates suggest would decide the last undecided one (where finite)."""
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

        flat = torch.arange(self.mean.numel())
        index = torch.stack(torch.unravel_index(flat, self.mean.shape)) if self.mean.dim() else flat[None]
        axes = (
            self.axes
            if len(self.axes) == self.mean.dim()
            else tuple(f"axis{i}" for i in range(self.mean.dim()))
        )
        columns: dict[str, Any] = {"family": self.name, "test": flat.numpy()}
        columns |= {axis: index[i].numpy() for i, axis in enumerate(axes)}
        for key in ("mean", "lower", "upper", "corrected_lower", "corrected_upper"):
            columns[key] = getattr(self, key).flatten().float().numpy()
        n = self.n if self.units is None else self.units.flatten().numpy()
        columns |= {"n": n, "verdict": self.verdicts(), "n_needed": self.n_needed.flatten().numpy()}
        return pd.DataFrame(columns)

    def to_dict(self) -> dict[str, Any]:
        def plain(t: Tensor) -> Any:
            if t.dim() == 0:
                x = float(t)
                return x if math.isfinite(x) else None
            return [plain(row) for row in t]

        return {
            "axes": list(self.axes),
            "threshold": plain(self.threshold.double()),
            "absolute": self.absolute,
            "ceiling": self.ceiling,
            "z": self.z,
            "n": self.n,
            "mean": plain(self.mean),
            "lower": plain(self.lower),
            "upper": plain(self.upper),
            "corrected_lower": plain(self.corrected_lower),
            "corrected_upper": plain(self.corrected_upper),
            "verdict": [VERDICTS[int(c)] for c in self.code.flatten().tolist()],
            "n_needed": plain(self.n_needed.double()),
        } | ({} if self.units is None else {"units": plain(self.units.double())})


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
        counts = []
        for name, f in self.families.items():
            c = f.code
            counts.append(
                f"{name}: {int((c == YES).sum())} yes, {int((c == NO).sum())} no, "
                f"{int((c == UNDECIDED).sum())} undecided"
            )
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
    low, high = mean - z * se, mean + z * se
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
    return FamilyDecision(
        name,
        t,
        absolute,
        z,
        moments.n,
        mean,
        mean - Z_95 * se,
        mean + Z_95 * se,
        low,
        high,
        testable,
        testable | (support * policy.budget / max(moments.n, 1) >= policy.min_units),
        code,
        (z * se <= policy.precision) & testable,
        needed,
        axes,
        ceiling=None if band is None else band.upper,
    )


_FROZEN_FIELDS = (
    "threshold", "mean", "lower", "upper", "corrected_lower", "corrected_upper", "testable", "reachable",
    "code", "precise", "n_needed",
)  # fmt: skip
"""The per-test fields of a `FamilyDecision` that a frozen test keeps from the look that froze it."""


def _frozen_tests(family: FamilyDecision) -> Tensor:
    """Tests that stop being measured under `decide(freeze=)`: decided (yes or no) or precise."""
    return (family.code != UNDECIDED) | family.precise


def _keep_frozen(before: FamilyDecision, now: FamilyDecision, frozen: Tensor) -> FamilyDecision:
    """`now`, except that the `frozen` tests keep every per-test value of `before` (their look's)."""
    kept = {
        name: torch.where(frozen, *(getattr(d, name).expand_as(frozen) for d in (before, now)))
        for name in _FROZEN_FIELDS
    }
    units_before = before.units if before.units is not None else torch.full(frozen.shape, before.n)
    units = torch.where(frozen, units_before, torch.full(frozen.shape, now.n))
    return replace(now, **kept, units=units)


def no_open_tests(families: Mapping[str, FamilyDecision]) -> bool:
    """The default stop: no test is open (every one is decided, precise or untestable)."""
    return not any(bool(f.open.any()) for f in families.values())


def decide(
    draw: Draw,
    thresholds: Mapping[str, float | Tensor | Band],
    *,
    policy: DecisionPolicy,
    generator: torch.Generator,
    absolute: Collection[str] = (),
    settled: Callable[[Mapping[str, FamilyDecision]], bool] = no_open_tests,
    axes: Mapping[str, tuple[str, ...]] | None = None,
    freeze: Collection[str] = (),
    stale: Callable[[Mapping[str, FamilyDecision]], Mapping[str, Tensor]] | None = None,
) -> Decision:
    """Draw units in rounds until every verdict is settled or the budget is reached (docs/decisions.md).

    Args:
        draw: (new units, generator) -> per family, `RatioMoments` of the new units' values, each of the
            family's fixed shape of tests.
        thresholds: per family, its threshold (a float, a tensor broadcasting to the family's shape, or a
            `Band` for a two-sided test).
        policy: the looks, the level and the precision target.
        generator: handed to every `draw`, so a decision is a function of its seed.
        absolute: families judged on |value| (e.g. a gap whose sign is not known in advance).
        settled: after each look, True when the analysis's verdicts no longer depend on more units (default:
            no open test).
        axes: per family, the names of its axes (for the data frame).
        freeze: families whose tests are frozen at the look that decides them or makes them precise: their
            intervals, verdicts and units stay that look's (`FamilyDecision.units`), and `draw` gets a third
            argument, per such family the mask of tests still measured. Valid under the same union bound: a
            frozen test's final interval is one of the intervals it already covers.
        stale: with `freeze`, after each look: per freezing family, a mask of further tests to freeze, open
            or not, whose verdicts can no longer change the analysis's (e.g. the tests of a settled head). The
            same union bound covers them.

    Example:
        >>> import torch
        >>> from mechmem.analysis.intervals import RatioMoments
        >>> from mechmem.analysis.sequential import DecisionPolicy, decide
        >>> def draw(n, generator):      # two tests: true means 0.9 and 0.1
        ...     values = torch.tensor([0.9, 0.1]) + 0.1 * torch.randn(n, 2, generator=generator)
        ...     return {"score": RatioMoments.from_values(values)}
        >>> result = decide(draw, {"score": 0.5}, policy=DecisionPolicy(first=32, budget=256),
        ...                 generator=torch.Generator().manual_seed(0))
        >>> result.looks, result["score"].verdicts()
        ((32,), ['yes', 'no'])
    """
    planned = policy.looks()
    total: dict[str, RatioMoments] | None = None
    taken: list[int] = []
    families: dict[str, FamilyDecision] = {}
    stopped: dict[str, Tensor] = {}  # per freezing family, after a look: its frozen tests
    for size in planned:
        k = size - (taken[-1] if taken else 0)
        new = draw(k, generator, {f: ~m for f, m in stopped.items()}) if freeze else draw(k, generator)
        total = dict(new) if total is None else {k: total[k] + new[k] for k in total}
        if set(total) != set(thresholds):
            raise ValueError(f"draw gave families {sorted(total)}, thresholds name {sorted(thresholds)}")
        taken.append(size)
        before, families = (
            families,
            {
                name: judge(
                    m,
                    thresholds[name],
                    z=policy.z(math.prod(m.shape), len(total)),
                    policy=policy,
                    absolute=name in absolute,
                    name=name,
                    axes=tuple((axes or {}).get(name, ())),
                )
                for name, m in total.items()
            },
        )
        for name in freeze:
            if name in stopped:
                families[name] = _keep_frozen(before[name], families[name], stopped[name])
            stopped[name] = stopped.get(name, False) | _frozen_tests(families[name])
        if stale is not None:
            for name, mask in stale(families).items():
                stopped[name] = stopped[name] | mask.expand_as(stopped[name])
        if settled(families):
            return Decision(families, policy, tuple(taken), "settled")
    return Decision(families, policy, tuple(taken), "budget")


Measure = Callable[..., tuple[Any, Mapping[str, RatioMoments]]]
"""(how many new units, generator[, mask of the tests still measured]) -> (the round's record, per family the
moments of the new units): a `Draw` that also hands back what it measured, for pooling."""


@dataclass(frozen=True)
class Rounds:
    """What `run_rounds` found: the decision and every round's record, in order."""

    decision: Decision
    records: list[Any]


def run_rounds(
    measure: Measure,
    thresholds: Mapping[str, float | Tensor | Band],
    *,
    policy: DecisionPolicy,
    generator: torch.Generator,
    absent: Callable[[Mapping[str, FamilyDecision]], bool] | None = None,
    settled: Callable[[Mapping[str, FamilyDecision]], bool] = no_open_tests,
    **options: Any,
) -> Rounds:
    """The one sequential runner: `decide` over rounds of `measure`, keeping each round's record.

    `absent`, judged after each look before `settled`, is True once the behaviour the tests share out is
    shown absent: sampling stops there and the decision's `stopped` reads "no behaviour". `options` go to
    `decide` (absolute, axes, freeze, stale)."""
    records: list[Any] = []

    def draw(k: int, gen: torch.Generator, *measured: Any) -> Mapping[str, RatioMoments]:
        record, moments = measure(k, gen, *measured)
        records.append(record)
        return moments

    gone = False

    def stop(families: Mapping[str, FamilyDecision]) -> bool:
        nonlocal gone
        gone = absent is not None and absent(families)
        return gone or settled(families)

    decision = decide(draw, thresholds, policy=policy, generator=generator, settled=stop, **options)
    return Rounds(replace(decision, stopped="no behaviour") if gone else decision, records)


class FirstRoundCheck:
    """Estimate, check, fall back: on the first round each part (a sweep, an ablation) is estimated with its
    check against exact measurement; a part that fails is measured exactly on that round and every later one,
    and one that passes is estimated unchecked from then on, from what its check kept."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}
        """Per part that passed: what its check kept (handed to every later estimate)."""
        self.failed: set[str] = set()
        self.checks: dict[str, Any] = {}
        """Per part: its first round's check."""

    def measure(
        self,
        part: str,
        estimate: Callable[[Any], Any],
        exact: Callable[[Any], Any],
        check: Callable[[Any], tuple[bool, Any, Any]],
    ) -> Any:
        """The part's measurement this round. `estimate(kept)`: the estimate, checked where `kept` is None
        (the first round); `check(result)` -> (passed, kept, record); `exact(failed)`: the exact measurement,
        given the first round's failed estimate on that round (None later)."""
        if part in self.failed:
            return exact(None)
        if part in self.kept:
            return estimate(self.kept[part])
        result = estimate(None)
        passed, kept, self.checks[part] = check(result)
        if passed:
            self.kept[part] = kept
            return result
        self.failed.add(part)
        return exact(result)


__all__ = [
    "ABLATION_POLICY",
    "CIRCUIT_POLICY",
    "DECISION_COLUMNS",
    "HEAD_POLICY",
    "MLP_POLICY",
    "NO",
    "PATCH_POLICY",
    "UNDECIDED",
    "VERDICTS",
    "YES",
    "Band",
    "Decision",
    "DecisionPolicy",
    "Draw",
    "FamilyDecision",
    "FirstRoundCheck",
    "Measure",
    "Rounds",
    "decide",
    "judge",
    "no_open_tests",
    "run_rounds",
]
