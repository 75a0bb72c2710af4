"""Sequential decisions: draw units in rounds until every verdict is decided (docs/decisions.md).

`decide` draws the doubling looks of a `DecisionPolicy`, judges every family of tests after each
(`judge`, at the corrected z) and stops once the verdicts no longer depend on more units; tests decided
or precise at a look can be frozen there. `run_rounds` hands each round's measurement to `decide` and
keeps the rounds; `FirstRoundCheck` is the estimate, check and fallback step of the analyses that
estimate.
"""

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from mechmem.analysis.stats import (
    UNDECIDED,
    Band,
    Decision,
    DecisionPolicy,
    FamilyDecision,
    RatioMoments,
    judge,
    no_open_tests,
)
from mechmem.errors import BadArgument
from mechmem.models.checks import check_callable, check_generator, check_instance, check_number

Draw = Callable[..., Mapping[str, RatioMoments]]
"""(how many new units, generator) -> per family, the moments of those units' values. With
`decide(freeze=)` a third argument: per freezing family, the [tests] mask of those still measured."""


_FROZEN_FIELDS = (
    "threshold", "mean", "lower", "upper", "corrected_lower", "corrected_upper", "testable", "reachable",
    "code", "precise", "n_needed",
)  # fmt: skip
"""The per-test fields of a `FamilyDecision` that a frozen test keeps from the look that froze it."""


def _keep_frozen(before: FamilyDecision, now: FamilyDecision, frozen: Tensor) -> FamilyDecision:
    """`now`, except that the `frozen` tests keep every per-test value of `before` (their look's)."""
    kept = {
        name: torch.where(frozen, *(getattr(d, name).expand_as(frozen) for d in (before, now)))
        for name in _FROZEN_FIELDS
    }
    units_before = before.units if before.units is not None else torch.full(frozen.shape, before.n)
    units = torch.where(frozen, units_before, torch.full(frozen.shape, now.n))
    return replace(now, **kept, units=units)


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
    cumulative: bool = False,
) -> Decision:
    """Draw units in rounds until every verdict is settled or the budget is reached (docs/decisions.md).

    Args:
        draw: (new units, generator) -> per family, `RatioMoments` of the new units' values.
        thresholds: per family, a float, a tensor broadcasting to the family's shape, or a `Band`.
        policy: the looks, the level and the precision target.
        generator: handed to every `draw`, so a decision is a function of its seed.
        absolute: families judged on |value|.
        settled: after each look, True when the verdicts no longer depend on more units (default: none open).
        axes: per family, the names of its axes (for the data frame).
        freeze: families whose tests are frozen at the look that decides them or makes them precise;
            `draw` then gets a third argument, per such family the mask of tests still measured.
        stale: with `freeze`, after each look, per freezing family a mask of further tests to freeze.
        cumulative: `draw` returns the moments of every unit drawn so far, not of the new ones only (for a
            family that is not a sum over units, e.g. a share whose scoring heads are read off pooled means).

    Example:
        >>> import torch
        >>> from mechmem.analysis.sequential import decide
        >>> from mechmem.analysis.stats import DecisionPolicy, RatioMoments
        >>> def draw(n, generator):      # two tests: true means 0.9 and 0.1
        ...     values = torch.tensor([0.9, 0.1]) + 0.1 * torch.randn(n, 2, generator=generator)
        ...     return {"score": RatioMoments.from_values(values)}
        >>> result = decide(draw, {"score": 0.5}, policy=DecisionPolicy(first=32, budget=256),
        ...                 generator=torch.Generator().manual_seed(0))
        >>> result.looks, result["score"].verdicts()
        ((32,), ['yes', 'no'])
    """
    check_callable("draw", draw)
    check_instance("policy", policy, DecisionPolicy)
    check_generator(generator, none=False)
    for family, threshold in thresholds.items():
        if isinstance(threshold, Tensor):
            if threshold.is_floating_point() and not bool(torch.isfinite(threshold).all()):
                raise BadArgument(f"thresholds[{family!r}] holds NaN or inf")
        elif not isinstance(threshold, Band):
            check_number(f"thresholds[{family!r}]", threshold)
    planned = policy.looks()
    total: dict[str, RatioMoments] | None = None
    taken: list[int] = []
    families: dict[str, FamilyDecision] = {}
    stopped: dict[str, Tensor] = {}  # per freezing family, after a look: its frozen tests
    for size in planned:
        k = size - (taken[-1] if taken else 0)
        new = draw(k, generator, {f: ~m for f, m in stopped.items()}) if freeze else draw(k, generator)
        total = dict(new) if total is None or cumulative else {k: total[k] + new[k] for k in total}
        if set(total) != set(thresholds):
            raise ValueError(f"draw gave families {sorted(total)}, thresholds name {sorted(thresholds)}")
        taken.append(size)
        before, families = families, {}
        for name, m in total.items():
            z, named_axes = policy.z(math.prod(m.shape), len(total)), tuple((axes or {}).get(name, ()))
            options = {"absolute": name in absolute, "name": name, "axes": named_axes}
            families[name] = judge(m, thresholds[name], z=z, policy=policy, **options)
        for name in freeze:
            if name in stopped:
                families[name] = _keep_frozen(before[name], families[name], stopped[name])
            decided = (families[name].code != UNDECIDED) | families[name].precise
            stopped[name] = stopped.get(name, False) | decided
        if stale is not None:
            for name, mask in stale(families).items():
                stopped[name] = stopped[name] | mask.expand_as(stopped[name])
        if settled(families):
            return Decision(families, policy, tuple(taken), "settled")
    return Decision(families, policy, tuple(taken), "budget")


Measure = Callable[..., tuple[Any, Mapping[str, RatioMoments]]]
"""(new units, generator[, mask]) -> (the round's record, per family the moments of the new units)."""


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
    """`decide` over rounds of `measure`, keeping each round's record. Sampling stops once `absent` (judged
    after each look) says the behaviour is absent (`stopped`: "no behaviour"); `options` go to `decide`."""
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
    """Estimate, check, fall back: on the first round each part is estimated and checked against exact
    measurement; a failing part is measured exactly from then on, a passing one estimated unchecked."""

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
        """The part's measurement this round. `estimate(kept)`: the estimate, checked where `kept` is None;
        `check(result)` -> (passed, kept, record); `exact(failed)`: the exact measurement."""
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
