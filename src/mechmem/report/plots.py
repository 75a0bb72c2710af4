"""One figure function for every analysis result: `plot(result)` picks the result's own plot.

The figure is a matplotlib `Figure`, never shown.
"""

from typing import Any

from mechmem.analysis.ablation import AblationResult, plot_ablation
from mechmem.analysis.circuits import Circuit, CircuitRobustness, plot_robustness
from mechmem.analysis.composition import CompositionScores, plot_composition
from mechmem.analysis.dynamics import Dynamics, plot_dynamics
from mechmem.analysis.heads import HeadScores, plot_head_scores
from mechmem.analysis.logit_lens import LogitLensResult, plot_logit_lens
from mechmem.analysis.patching import DecidedPatching, PatchingResult, plot_patching
from mechmem.analysis.probes import MemoryProbes, plot_probes
from mechmem.analysis.qk import QKAttribution, plot_qk_attribution
from mechmem.report.circuit_graph import plot_circuit


def plot(result: Any, **options: Any) -> Any:
    """The figure of an analysis result: patching heatmap, ablation deltas, head scores, composition scores,
    logit lens, memory probes, circuit graph, a circuit's faithfulness over circuit sizes per ablation, one
    quantity's training curves (`quantity=`, a `Dynamics` result), or QK attribution.

    `options` go to the result's own plot function (e.g. `title=` for head scores, `roles=` for a circuit).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()
        >>> tokens = torch.randint(12, (16, 24), generator=torch.Generator().manual_seed(0))
        >>> figure = mechmem.plot(mechmem.detect_heads(model, tokens), title="head scores")
        >>> type(figure).__name__
        'Figure'
    """
    kinds = (
        (PatchingResult, plot_patching),
        (AblationResult, plot_ablation),
        (HeadScores, plot_head_scores),
        (CompositionScores, plot_composition),
        (LogitLensResult, plot_logit_lens),
        (MemoryProbes, plot_probes),
        (Circuit, plot_circuit),
        (CircuitRobustness, plot_robustness),
        (Dynamics, plot_dynamics),
        (QKAttribution, plot_qk_attribution),
    )
    for kind, draw in kinds:
        if isinstance(result, kind):
            return draw(result, **options)
    if isinstance(result, DecidedPatching):
        raise TypeError(
            f"no figure for a DecidedPatching: it holds one PatchingResult per sweep in results "
            f"({', '.join(result.results)}); plot one with mechmem.plot(result.results[name])"
        )
    drawn = ", ".join(kind.__name__ for kind, _ in kinds)
    raise TypeError(f"no figure for a {type(result).__name__} (mechmem.plot draws {drawn})")
