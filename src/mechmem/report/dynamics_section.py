"""The report's training-dynamics section: how the circuit formed over the run's step checkpoints.

The section runs `run_dynamics` on `checkpoints/step_N.pt` with the defaults of `mechmem dynamics` (the same
numbers for the same seed) plus the circuit's progress measures (restricted and excluded loss, faithfulness
of one fixed circuit: the report's edge circuit when it has one) and shows the curves with their 95%
intervals and the order of events.
"""

from pathlib import Path
from typing import Any

import torch

from mechmem.analysis.dynamics import DEFAULT_QUANTITIES, QUANTITIES, FixedCircuit, run_dynamics, step_files
from mechmem.analysis.dynamics.views import EVENT_HEADERS, event_rows, plot_dynamics
from mechmem.analysis.transitions import format_order
from mechmem.errors import MechmemError, one_line
from mechmem.report.document import Section, Table

DYNAMICS_SAMPLES = 128
"""Evaluation sequences per step (the default of mechmem dynamics)."""


def dynamics_section(
    run_dir: str | Path, task: Any = None, *, seed: int = 0, circuit: FixedCircuit | None = None
) -> Section:
    """Curves of every default quantity and of the circuit's progress measures against step, and the order
    of events, from `run_dir`'s checkpoints; `roles` too when the task defines task roles (its
    `role_probes`). The progress measures follow `circuit` (default: the run's final decided circuit)."""
    s = Section("dynamics", "Training dynamics: when each part formed")
    try:
        step_files(run_dir)
        named = task is not None and bool(task.role_probes(2, generator=torch.Generator().manual_seed(0)))
        quantities = (*DEFAULT_QUANTITIES, "circuit", *(("roles",) if named else ()))
        result = run_dynamics(run_dir, quantities, n=DYNAMICS_SAMPLES, seed=seed, circuit=circuit)
    except MechmemError as exc:  # no step checkpoints, or an unreadable one: the rest of the report stands
        s.skipped = one_line(exc)
        return s
    events = result.events
    s.findings = result.to_dict()
    if under := result.info.get("trained_under"):
        s.lines.append(f"Trained under interventions: {under}.")
    s.lines += [
        (
            f"{len(result.steps)} step checkpoints (steps {result.steps[0]} to {result.steps[-1]}), "
            f"every one measured on the same {DYNAMICS_SAMPLES} evaluation sequences (seed {seed}); "
            f"measured: {', '.join(result.groups)}."
        ),
        (
            "Event of a curve: the step where it first reaches its level "
            "(interpolated between the two saves around it) or its steepest change (the loss: its steepest "
            "fall); precision one save interval. "
            f"Order of events: {format_order(events)}."
        ),
    ]
    followed = result.info.get("circuit", {})
    if "skipped" in followed:
        s.lines.append(f"Circuit progress measures: not measured ({followed['skipped']}).")
    elif followed:
        s.lines.append(
            f"Circuit progress measures follow {followed['source']}: {len(followed['edges'])} edges, fixed "
            "at every step; restricted loss keeps only them, excluded loss ablates only them (mean ablation)."
        )
    missed = [e.curve for e in events if not e.reached]
    if missed:
        s.lines.append(f"Not reached by the last save: {', '.join(missed)}.")
    s.lines.append(
        f"Each value carries its 95% interval over the {DYNAMICS_SAMPLES} evaluation sequences or prompts "
        "(shaded bands in the figures; how, per quantity, in the table of what was measured); probes read "
        "off the weights are exact. Events are read on the values."
    )
    s.tables.append(Table(EVENT_HEADERS, event_rows(result), "Order of events, and each curve's last value"))
    defs = [[q, QUANTITIES[q].definition, QUANTITIES[q].interval, result.cost_s[q]] for q in result.groups]
    headers = ["quantity", "definition", "95% interval", "seconds"]
    s.tables.append(Table(headers, defs, "What was measured", floatfmt=".1f"))
    for quantity, curves in result.groups.items():
        if curves:
            s.add_figure(quantity, plot_dynamics(result, quantity))
    return s
