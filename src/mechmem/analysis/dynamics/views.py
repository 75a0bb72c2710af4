"""Reading a `Dynamics` result: its events beside the trainer's log (metrics.jsonl), the table `mechmem
dynamics` prints, and the figure of one quantity's curves with their intervals as shaded bands."""

from itertools import pairwise
from pathlib import Path
from typing import Any

from mechmem.analysis.dynamics.measure import Dynamics
from mechmem.analysis.stats import format_interval
from mechmem.analysis.transitions import event_order, find_event, format_order
from mechmem.errors import BadArgument, MechmemError
from mechmem.tables import format_table
from mechmem.training.rundir import read_metrics


def metrics_agreement(
    result: Dynamics, run_dir: str | Path, matches: dict[str, str] | None = None
) -> list[dict]:
    """Events of the trainer's logged curves (metrics.jsonl) next to the same events from the checkpoints.

    Compared: every metrics.jsonl key that names a curve and the pairs in `matches` (metrics key ->
    curve), each read with its curve's rule. `gap` is the difference in steps, `within` whether it is at
    most one interval (the coarser series' largest gap between records; both "not reached" also agree).
    """
    steps, logged = metrics_curves(run_dir)
    matches = {**{k: k for k in logged if k in result.rules}, **(matches or {})}
    interval = max((b - a for series in (result.steps, steps) for a, b in pairwise(series)), default=0)
    rows = []
    for key, curve in matches.items():
        if key not in logged or curve not in result.rules:
            raise MechmemError(
                f"cannot match {key}={curve}: metrics.jsonl logs {key in logged}, curve with a rule "
                f"{curve in result.rules}"
            )
        rule = result.rules[curve]
        ours = find_event(result.steps, result.curves[curve], rule)
        theirs = find_event(steps, logged[key], rule)
        gap = None if ours.step is None or theirs.step is None else abs(ours.step - theirs.step)
        rows.append(
            {
                "metric": key,
                "curve": curve,
                "rule": rule.describe(),
                "from_metrics": theirs.step,
                "from_checkpoints": ours.step,
                "gap": gap,
                "save_interval": interval,
                "within": (ours.step is None and theirs.step is None)
                or (gap is not None and gap <= interval),
            }
        )
    return rows


EVENT_HEADERS = ["curve", "event", "step", "between saves", "last value", "95% interval"]
"""The columns of `event_rows`."""


def event_rows(result: Dynamics) -> list[list]:
    """One row per reached event, in order: curve, rule, step, the saves around it, then the curve's last
    value with its 95% interval ("exact" for a curve read off the weights, "[-]" where it has none)."""
    rows = []
    for e in event_order(result.events):
        last = result.point(e.curve)
        value = None if last is None else last.value
        spread = "[-]" if last is None else "exact" if last.exact else format_interval(last.lower, last.upper)
        rows.append(
            [e.curve, e.rule.describe(), round(e.step), f"{e.interval[0]}-{e.interval[1]}", value, spread]
        )
    return rows


def dynamics_lines(result: Dynamics, run_dir: str | Path, matches: dict[str, str] | None = None) -> list[str]:
    """What `mechmem dynamics` prints: the events in order, the cost, and the same events read from the
    trainer's metrics.jsonl when there is one (also kept in `result.info["metrics_agreement"]`)."""
    events = event_order(result.events)
    missed = [e.curve for e in result.events if not e.reached]
    under = result.info.get("trained_under")
    lines = [f"trained under interventions: {under}"] if under else []
    lines += [
        format_table(event_rows(result), EVENT_HEADERS),
        f"order of events: {format_order(events)}"
        + (f"\nnot reached: {', '.join(missed)}" if missed else ""),
        f"{len(result.steps)} checkpoints, steps {result.steps[0]}..{result.steps[-1]}; seconds: "
        + ", ".join(f"{k} {v:.1f}" for k, v in result.cost_s.items()),
    ]
    if (Path(run_dir) / "metrics.jsonl").exists():
        agree = result.info["metrics_agreement"] = metrics_agreement(result, run_dir, matches)
        keys = ("metric", "curve", "from_metrics", "from_checkpoints", "within")
        headers = ["metrics.jsonl", "curve", "step (metrics)", "step (checkpoints)", "within"]
        lines.append(format_table([[r[k] for k in keys] for r in agree], headers))
    return lines


def metrics_curves(run_dir: str | Path) -> tuple[list[int], dict[str, list[float | None]]]:
    """The numeric curves the trainer logged in `run_dir/metrics.jsonl`: (steps, {key: values})."""
    records = read_metrics(run_dir)
    keys = list(
        dict.fromkeys(k for r in records for k, v in r.items() if k != "step" and isinstance(v, float))
    )
    return [int(r["step"]) for r in records], {k: [r.get(k) for r in records] for k in keys}


def _facet(quantity: str, curve: str) -> tuple[str, str]:
    """(panel title, legend label) of a curve: heads by pattern or composition mode, roles as held vs scores,
    else one panel."""
    if quantity in ("heads", "composition"):
        head, pattern = curve.split(".", 1)
        return pattern, head
    if quantity == "circuit":
        panel = "faithfulness (logit difference)" if curve.endswith("faithfulness") else "answer loss (nats)"
        return panel, curve
    if quantity == "roles":
        return ("role held (1) or not (0)", curve) if ".role=" in curve else ("task-role scores", curve)
    return quantity, curve


def plot_dynamics(result: Dynamics, quantity: str | None = None) -> Any:
    """The curves of one quantity against step, one panel per facet; returns the Figure. Each curve's 95%
    interval is a shaded band; its level is dotted and its event a dashed line. `quantity` may be left out
    when the result measured one quantity."""
    from mechmem.plotting import plt

    measured = [name for name, curves in result.groups.items() if curves]
    if quantity is None and len(measured) == 1:
        quantity = measured[0]
    if quantity not in measured:
        raise BadArgument(
            f"quantity= must name one of the quantities measured ({', '.join(measured) or 'none'}), "
            f"got {quantity!r}"
        )

    panels: dict[str, list[tuple[str, str]]] = {}
    for curve in result.groups[quantity]:
        title, label = _facet(quantity, curve)
        panels.setdefault(title, []).append((curve, label))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels), 3.2), squeeze=False, layout="constrained"
    )
    events = {e.curve: e for e in result.events}
    for ax, (title, curves) in zip(axes[0], panels.items()):
        for i, (name, label) in enumerate(curves):
            values, *band = (
                [float("nan") if v is None else v for v in b.get(name, ())]
                for b in (result.curves, result.lower, result.upper)
            )
            color = f"C{i % 10}"
            label += " (exact)" if name in result.exact else ""
            ax.plot(result.steps, values, marker=".", ms=3, color=color, label=label)
            if name in result.lower:
                ax.fill_between(result.steps, *band, color=color, alpha=0.2, lw=0)
            event = events.get(name)
            if event is not None and event.rule.level is not None:
                ax.axhline(event.rule.level, color="grey", ls=":", lw=0.8)
            if event is not None and event.reached:
                ax.axvline(event.step, color=color, ls="--", lw=0.8)
        ax.set(title=title, xlabel="step")
        ax.legend(fontsize=7)
    if (
        quantity == "composition"
    ):  # weights: its one band is the random baseline's range, not a sampling interval
        fig.suptitle(
            "band: 95% range of the score between random Gaussian matrices (the baseline)", fontsize=8
        )
    elif any(name in result.lower for name in result.groups[quantity]):
        n = result.info.get("eval", {}).get("n")
        fig.suptitle(f"bands: 95% intervals over {n} evaluation sequences or prompts", fontsize=8)
    return fig
