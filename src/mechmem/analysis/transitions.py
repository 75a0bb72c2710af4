"""Transitions on training curves: when does a quantity cross a stated level, or change fastest?

A curve is a quantity measured at a run's saved steps s_0 < s_1 < ... (values v_i; NaN where not
measured). Two kinds of event, each under a rule stated before looking at the curve:

    level     the first save where the curve reaches the level (v_i >= level going up, <= going down) after a
              save where it had not, interpolated linearly between the two saves:
                  step = s_{i-1} + (level - v_{i-1}) / (v_i - v_{i-1}) * (s_i - s_{i-1})
              A curve at the level at its first save is reported there, marked "at start"; one that never
              reaches it is "not reached".
    steepest  the midpoint of the interval between consecutive saves with the largest rise (or fall) per
              step; none for a curve that never rises (falls).

The event's `interval` is the pair of saves that brackets it. Events are read on the point values, not
on their 95% intervals. Caveat: a first crossing can be a noisy blip; compare with the steepest rise.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from mechmem.errors import MechmemError

DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class Rule:
    """How an event is read from a curve: a `level` crossing, or the `steepest` change, in a direction."""

    kind: str
    """"level" or "steepest"."""
    direction: str = "up"
    """"up" (rising to the level / fastest rise) or "down" (falling / fastest fall)."""
    level: float | None = None
    """The level to reach (kind "level" only)."""

    def __post_init__(self) -> None:
        if self.kind not in ("level", "steepest") or self.direction not in DIRECTIONS:
            raise ValueError(
                f"bad rule {self.kind!r}/{self.direction!r} (kind level|steepest, direction up|down)"
            )
        if (self.kind == "level") != (self.level is not None):
            raise ValueError("a level rule needs a level; a steepest rule takes none")

    def describe(self) -> str:
        if self.kind == "level":
            return f"{'reaches' if self.direction == 'up' else 'falls to'} {self.level:g}"
        return f"steepest {'rise' if self.direction == 'up' else 'fall'}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "direction": self.direction, "level": self.level, "text": self.describe()}


def level(value: float, direction: str = "up") -> Rule:
    """A level-crossing rule."""
    return Rule("level", direction, float(value))


def steepest(direction: str = "up") -> Rule:
    """A steepest-change rule."""
    return Rule("steepest", direction)


@dataclass
class Event:
    """When curve `curve` met its rule: `step` (None: not reached) between the saves of `interval`."""

    curve: str
    rule: Rule
    step: float | None
    interval: tuple[int, int] | None = None
    at_start: bool = False
    """True when the curve already met its level at the first save (it formed at or before that step)."""

    @property
    def reached(self) -> bool:
        return self.step is not None

    @property
    def first_save(self) -> int | None:
        """The first save at which the curve meets its level (the later end of `interval`); None if never."""
        return None if self.interval is None else self.interval[1]

    def describe(self) -> str:
        """'L1H0.induction reaches 0.5 at step 240' (or '... not reached')."""
        if self.step is None:
            return f"{self.curve} {self.rule.describe()}: not reached"
        where = (
            f"at or before step {self.step:.0f} (first save)" if self.at_start else f"at step {self.step:.0f}"
        )
        return f"{self.curve} {self.rule.describe()} {where}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "curve": self.curve,
            "rule": self.rule.to_dict(),
            "step": self.step,
            "reached": self.reached,
            "interval": list(self.interval) if self.interval else None,
            "at_start": self.at_start,
        }


def _finite(steps: Sequence[int], values: Sequence[float | None]) -> list[tuple[int, float]]:
    if len(steps) != len(values):
        raise ValueError(f"{len(steps)} steps but {len(values)} values")
    points = [(int(s), float(v)) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if any(b[0] <= a[0] for a, b in pairwise(points)):
        raise ValueError("steps must increase")
    return points


def level_crossing(
    steps: Sequence[int], values: Sequence[float | None], rule: Rule, curve: str = ""
) -> Event:
    """The first crossing of `rule.level` (see the module docstring); NaN values are skipped."""
    if rule.kind != "level":
        raise ValueError("level_crossing needs a level rule")
    sign = 1.0 if rule.direction == "up" else -1.0
    points = _finite(steps, values)
    i = next((i for i, (_, v) in enumerate(points) if sign * (v - rule.level) >= 0), None)
    if i is None:
        return Event(curve, rule, None)
    if i == 0:
        return Event(curve, rule, float(points[0][0]), (points[0][0], points[0][0]), at_start=True)
    (s0, v0), (s1, v1) = points[i - 1], points[i]
    return Event(curve, rule, s0 + (rule.level - v0) / (v1 - v0) * (s1 - s0), (s0, s1))


def steepest_change(
    steps: Sequence[int], values: Sequence[float | None], rule: Rule, curve: str = ""
) -> Event:
    """The midpoint of the interval of fastest rise (fall); None when the curve never rises (falls)."""
    sign = 1.0 if rule.direction == "up" else -1.0
    points = _finite(steps, values)
    best, where = 0.0, None
    for (s0, v0), (s1, v1) in pairwise(points):
        slope = sign * (v1 - v0) / (s1 - s0)
        if slope > best:
            best, where = slope, (s0, s1)
    if where is None:
        return Event(curve, rule, None)
    return Event(curve, rule, (where[0] + where[1]) / 2, where)


def find_event(steps: Sequence[int], values: Sequence[float | None], rule: Rule, curve: str = "") -> Event:
    """The event `rule` picks on one curve."""
    fn = level_crossing if rule.kind == "level" else steepest_change
    return fn(steps, values, rule, curve)


def find_events(
    steps: Sequence[int], curves: Mapping[str, Sequence[float | None]], rules: Mapping[str, Rule]
) -> list[Event]:
    """One event per curve that has a rule, in the order of `curves`."""
    return [find_event(steps, values, rules[name], name) for name, values in curves.items() if name in rules]


def event_order(events: Sequence[Event]) -> list[Event]:
    """The reached events, earliest first (ties keep their given order)."""
    return sorted((e for e in events if e.reached), key=lambda e: e.step)


def format_order(events: Sequence[Event]) -> str:
    """'L0H0.previous_token at 150, wk2_recall at 210, ...' over the reached events, earliest first."""
    parts = [
        f"{e.curve} at {e.step:.0f}" + (" (or before)" if e.at_start else "") for e in event_order(events)
    ]
    return ", ".join(parts) if parts else "no event reached"


def parse_pairs(texts: Sequence[str], flag: str, *, last: bool = False) -> dict[str, str]:
    """['A=B', ...] -> {A: B}, split at the first '=' (`last`: the last); a malformed pair is a
    one-line error naming `flag`."""
    out = {}
    for text in texts:
        left, sep, right = text.rpartition("=") if last else text.partition("=")
        if not sep or not left or not right:
            raise MechmemError(f"{flag} {text!r}: expected NAME=VALUE")
        out[left] = right
    return out


def parse_levels(texts: Sequence[str]) -> dict[str, float]:
    """['*.induction=0.4', ...] -> {'*.induction': 0.4} (the --level flags)."""
    out = {}
    for glob, value in parse_pairs(texts, "--level", last=True).items():
        try:
            out[glob] = float(value)
        except ValueError:
            raise MechmemError(
                f"--level {glob}={value}: expected CURVE_GLOB=NUMBER, e.g. '*.induction=0.5'"
            ) from None
    return out
