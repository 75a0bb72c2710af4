"""Training dynamics: analyses over a run's step checkpoints, and their tables and figures."""

from mechmem.analysis.dynamics.compare import DynamicsComparison, compare_dynamics, plot_comparison
from mechmem.analysis.dynamics.measure import (
    DEFAULT_QUANTITIES,
    QUANTITIES,
    STEP_NAME,
    CurvePoint,
    Dynamics,
    EvalData,
    Quantity,
    checked_steps,
    final_circuit,
    iter_models,
    ratio_point,
    run_dir_of,
    run_dynamics,
    set_levels,
    step_files,
)
from mechmem.analysis.dynamics.progress import (
    FixedCircuit,
    ProgressMeasures,
    fixed_circuit,
    progress_measures,
)
from mechmem.analysis.dynamics.views import (
    dynamics_lines,
    event_rows,
    metrics_agreement,
    metrics_curves,
    plot_dynamics,
)

__all__ = [
    "DEFAULT_QUANTITIES",
    "QUANTITIES",
    "STEP_NAME",
    "CurvePoint",
    "Dynamics",
    "DynamicsComparison",
    "EvalData",
    "FixedCircuit",
    "ProgressMeasures",
    "Quantity",
    "checked_steps",
    "compare_dynamics",
    "dynamics_lines",
    "event_rows",
    "final_circuit",
    "fixed_circuit",
    "iter_models",
    "metrics_agreement",
    "metrics_curves",
    "plot_comparison",
    "plot_dynamics",
    "progress_measures",
    "ratio_point",
    "run_dir_of",
    "run_dynamics",
    "set_levels",
    "step_files",
]
