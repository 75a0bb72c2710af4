"""Training dynamics: analyses over a run's step checkpoints, and their tables and figures."""

from mechmem.analysis.dynamics.measure import (
    DEFAULT_QUANTITIES,
    QUANTITIES,
    STEP_NAME,
    CurvePoint,
    Dynamics,
    EvalData,
    Quantity,
    checked_steps,
    iter_models,
    ratio_point,
    run_dir_of,
    run_dynamics,
    set_levels,
    step_files,
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
    "EvalData",
    "Quantity",
    "checked_steps",
    "dynamics_lines",
    "event_rows",
    "iter_models",
    "metrics_agreement",
    "metrics_curves",
    "plot_dynamics",
    "ratio_point",
    "run_dir_of",
    "run_dynamics",
    "set_levels",
    "step_files",
]
