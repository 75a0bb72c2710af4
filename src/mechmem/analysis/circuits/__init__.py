"""Edge-level circuits: the edge graph and its patcher (path patching of every edge), the circuit record,
circuit discovery (scoring, pruning, faithfulness), the circuit decided edge by edge over rounds of
prompts, and its robustness to the ablation and the circuit's size.
"""

from mechmem.analysis.circuits.decided import EDGE_SHARE, EdgeStage, decide_edges, decided_circuit
from mechmem.analysis.circuits.discovery import (
    CHECK_EDGES,
    EDGE_STEPS,
    RESCORE_EDGES,
    attribution_agreement,
    circuit_pair,
    circuit_prompts,
    criteria_moments,
    discover_circuit,
    edge_attribution,
    score_edges,
)
from mechmem.analysis.circuits.edges import (
    ABLATION_TEXT,
    ABLATIONS,
    Edge,
    EdgePatcher,
    Graph,
    Node,
    Port,
    build_graph,
    circuit_intervals,
)
from mechmem.analysis.circuits.record import CONFIDENCE, CRITERIA, Circuit, edge_frame
from mechmem.analysis.circuits.robust import (
    MIB_FRACTIONS,
    AblationRobustness,
    CircuitRobustness,
    circuit_robustness,
    plot_robustness,
)

__all__ = [
    "ABLATIONS",
    "ABLATION_TEXT",
    "CHECK_EDGES",
    "CONFIDENCE",
    "CRITERIA",
    "EDGE_SHARE",
    "EDGE_STEPS",
    "MIB_FRACTIONS",
    "RESCORE_EDGES",
    "AblationRobustness",
    "Circuit",
    "CircuitRobustness",
    "Edge",
    "EdgePatcher",
    "EdgeStage",
    "Graph",
    "Node",
    "Port",
    "attribution_agreement",
    "build_graph",
    "circuit_intervals",
    "circuit_pair",
    "circuit_prompts",
    "circuit_robustness",
    "criteria_moments",
    "decide_edges",
    "decided_circuit",
    "discover_circuit",
    "edge_attribution",
    "edge_frame",
    "plot_robustness",
    "score_edges",
]
