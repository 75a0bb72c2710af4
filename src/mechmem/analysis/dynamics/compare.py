"""Two runs' dynamics side by side: e.g. a control run and one trained under an intervention, measured on the
same evaluation draw at the steps both saved, with the difference of each curve (B - A) and its interval.

The difference's 95% interval treats the two values as independent means: its standard error is the square
root of the summed variances, each run's standard error read off its own 95% interval as half-width / 1.96
(exact for the normal intervals; an approximation for bootstrap ones). Both runs are measured on the same
prompts, so where the two runs' per-prompt values are positively correlated this interval is conservative.
Curves read off the weights (exact) give an exact difference; a curve without an interval in either run
gives a difference without one.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mechmem.analysis.dynamics.measure import (
    DEFAULT_QUANTITIES,
    CurvePoint,
    Dynamics,
    final_circuit,
    run_dynamics,
    step_files,
)
from mechmem.analysis.stats import Z_95, format_interval, normal_interval
from mechmem.analysis.transitions import find_event
from mechmem.checkpoint import read_payload
from mechmem.errors import MechmemError
from mechmem.tables import format_table
from mechmem.training.rundir import payload_identity, run_differences


@dataclass(frozen=True)
class DynamicsComparison:
    """Run A's and run B's `Dynamics` (same quantities, seed and evaluation draw), the steps both saved,
    and how the runs differ (`run_differences`: dotted fields, A's value first: "train.seed 0 != 1")."""

    a: Dynamics
    b: Dynamics
    steps: list[int]
    differences: list[str]

    def __post_init__(self) -> None:
        if not self.steps:
            raise MechmemError("the two runs share no saved step")

    @property
    def curves(self) -> list[str]:
        """The curves both runs measured, in run A's order."""
        return [c for c in self.a.curves if c in self.b.curves]

    def values(self, run: str, curve: str) -> list[CurvePoint | None]:
        """Run "a"'s or "b"'s points of `curve` at the shared steps."""
        result = self.a if run == "a" else self.b
        return [result.point(curve, result.steps.index(s)) for s in self.steps]

    def difference(self, curve: str) -> list[CurvePoint | None]:
        """B - A at each shared step with its 95% interval (module docstring); None where either is None."""
        out: list[CurvePoint | None] = []
        for a, b in zip(self.values("a", curve), self.values("b", curve)):
            if a is None or b is None:
                out.append(None)
                continue
            value = b.value - a.value
            if a.exact and b.exact:
                out.append(CurvePoint(value, exact=True))
                continue
            se = math.hypot(*((p.upper - p.lower) / (2 * Z_95) for p in (a, b)))  # NaN where either has none
            out.append(CurvePoint(value, *normal_interval(value, se)))
        return out

    def events(self) -> list[dict[str, Any]]:
        """Per curve with a rule in run A: its event's step in each run (None: not reached) and B - A."""
        rows = []
        for curve in self.curves:
            if (rule := self.a.rules.get(curve)) is None:
                continue
            a, b = (find_event(r.steps, r.curves[curve], rule, curve).step for r in (self.a, self.b))
            gap = None if a is None or b is None else b - a
            rows.append({"curve": curve, "rule": rule.describe(), "step_a": a, "step_b": b, "b_minus_a": gap})
        return rows

    def to_dataframe(self) -> Any:
        """One row per curve and shared step: `curve`, `step`, `a`, `b`, `difference` (B - A), its `lower`
        and `upper` 95% bounds (NaN where none) and `exact`."""
        import pandas as pd

        rows = []
        for curve in self.curves:
            for step, a, b, d in zip(
                self.steps, self.values("a", curve), self.values("b", curve), self.difference(curve)
            ):
                nan = math.nan
                rows.append(
                    (curve, step, a.value if a else nan, b.value if b else nan)
                    + ((d.value, d.lower, d.upper, d.exact) if d else (nan, nan, nan, False))
                )
        columns = ["curve", "step", "a", "b", "difference", "lower", "upper", "exact"]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        frame = self.to_dataframe()
        return {
            "run_a": self.a.info.get("run_dir"),
            "run_b": self.b.info.get("run_dir"),
            "differences": self.differences,
            "steps": self.steps,
            "interval": "difference B - A, 95% normal: sqrt of the two runs' summed variances, each read off "
            "its own 95% interval as half-width / 1.96 (independent means; same prompts in both runs)",
            "rows": frame.where(frame.notna(), None).to_dict(orient="records"),
            "events": self.events(),
            "circuit": self.a.info.get("circuit"),
            "cost_s": {"a": self.a.cost_s, "b": self.b.cost_s},
        }

    def __repr__(self) -> str:
        return (
            f"DynamicsComparison({len(self.steps)} shared steps, {len(self.curves)} curves, "
            f"differs in {', '.join(self.differences) or 'nothing'})"
        )


def compare_dynamics(
    run_a: str | Path,
    run_b: str | Path,
    quantities: tuple[str, ...] | list[str] = DEFAULT_QUANTITIES,
    *,
    n: int = 128,
    seed: int = 0,
    device: str = "cpu",
    circuit_edges: tuple[str, ...] | list[str] = (),
    circuit_heads: tuple[str, ...] | list[str] = (),
) -> DynamicsComparison:
    """`run_dynamics` of both runs on the same evaluation draw, side by side at the steps both saved. The
    `circuit` quantity follows one circuit in both: the given edges or heads, else run A's final decided
    circuit. The runs must share the model config and task name (a one-line error names what differs).

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> runs = [pathlib.Path(tempfile.mkdtemp()) / "t1" for _ in range(2)]
        >>> for seed, run in enumerate(runs):
        ...     _ = mechmem.train_preset("permutation", "task1-quick", steps=4, save_every=2, out_dir=run,
        ...                              progress=False, seed=seed)
        >>> both = compare_dynamics(*runs, ["loss"], n=8)
        >>> both.steps, both.differences
        ([2, 4], ['train.seed 0 != 1'])
    """
    first = [read_payload(step_files(run)[0][1]) for run in (run_a, run_b)]
    differences = run_differences(first[0], payload_identity(first[1]))  # "field A's value != B's value"
    if clash := [d for d in differences if d.startswith(("model.", "task.name"))]:
        raise MechmemError(f"{run_b}: not comparable with {run_a} ({', '.join(clash[:4])})")
    circuit = None
    if "circuit" in quantities:
        try:
            circuit = final_circuit(run_a, edges=circuit_edges, heads=circuit_heads, seed=seed, device=device)
        except MechmemError:
            circuit = None  # each run then records why it has no circuit
    a, b = (
        run_dynamics(run, quantities, n=n, seed=seed, device=device, circuit=circuit)
        for run in (run_a, run_b)
    )
    return DynamicsComparison(a, b, [s for s in a.steps if s in b.steps], differences)


def comparison_lines(comparison: DynamicsComparison) -> list[str]:
    """What `mechmem dynamics RUN_A --compare RUN_B` prints: how the runs differ, every curve at the last
    shared step (A, B, B - A with its 95% interval), and the events side by side."""
    step = comparison.steps[-1]
    rows = []
    for curve in comparison.curves:
        a, b, d = (points[-1] for points in (
            comparison.values("a", curve), comparison.values("b", curve), comparison.difference(curve)
        ))  # fmt: skip
        spread = "[-]" if d is None else "exact" if d.exact else format_interval(d.lower, d.upper)
        rows.append([curve, a and a.value, b and b.value, d and d.value, spread])
    events = [[e["curve"], e["rule"], e["step_a"], e["step_b"], e["b_minus_a"]] for e in comparison.events()]
    return [
        f"A: {comparison.a.info.get('run_dir')}  B: {comparison.b.info.get('run_dir')}; the runs differ in: "
        + (", ".join(comparison.differences) or "nothing (same configuration)"),
        format_table(rows, [f"curve (step {step})", "A", "B", "B - A", "95% interval (independent)"]),
        format_table(events, ["curve", "event", "step A", "step B", "B - A"]),
        f"{len(comparison.steps)} shared steps {comparison.steps[0]}..{step}",
    ]


def plot_comparison(comparison: DynamicsComparison, quantity: str, *, columns: int = 4) -> Any:
    """Per curve of `quantity`: both runs' values with their 95% bands (top) and B - A with its 95% band
    over a zero line (below); returns the Figure."""
    from mechmem.plotting import plt

    curves = [c for c in comparison.a.groups.get(quantity, []) if c in comparison.b.curves]
    if not curves:
        raise MechmemError(f"no curve of {quantity!r} in both runs")
    cols = min(columns, len(curves))
    rows = 2 * math.ceil(len(curves) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.6 * cols, 2.4 * rows), squeeze=False, layout="constrained", sharex=True
    )
    steps = comparison.steps
    names = {
        run: Path(str(r.info.get("run_dir"))).name for run, r in (("a", comparison.a), ("b", comparison.b))
    }

    def draw(ax: Any, points: list[CurvePoint | None], color: str, label: str) -> None:
        value, lower, upper = (
            [math.nan if p is None else getattr(p, k) for p in points] for k in ("value", "lower", "upper")
        )
        ax.plot(steps, value, marker=".", ms=3, color=color, label=label)
        ax.fill_between(steps, lower, upper, color=color, alpha=0.2, lw=0)

    for i, curve in enumerate(curves):
        top, bottom = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        for j, run in enumerate("ab"):
            draw(top, comparison.values(run, curve), f"C{j}", f"{run.upper()}: {names[run]}")
        draw(bottom, comparison.difference(curve), "C2", "B - A")
        bottom.axhline(0.0, color="grey", lw=0.8)
        top.set_title(curve, fontsize=8)
        top.legend(fontsize=6)
        bottom.set(xlabel="step", ylabel="B - A")
    for k in range(len(curves), (rows // 2) * cols):
        axes[2 * (k // cols), k % cols].set_visible(False)
        axes[2 * (k // cols) + 1, k % cols].set_visible(False)
    fig.suptitle(
        "bands: 95% intervals (difference: sqrt of the summed variances, independent means)", fontsize=8
    )
    return fig
