"""Edge-level circuits: the edge graph and its patcher (path patching of every edge), and circuit
discovery (scoring, pruning, faithfulness).
"""

from mechmem.analysis.circuits.discovery import (
    CHECK_EDGES,
    CONFIDENCE,
    CRITERIA,
    EDGE_STEPS,
    RESCORE_EDGES,
    Circuit,
    attribution_agreement,
    circuit_pair,
    circuit_prompts,
    criteria_moments,
    decided_circuit,
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

__all__ = [
    "ABLATIONS",
    "ABLATION_TEXT",
    "CHECK_EDGES",
    "CONFIDENCE",
    "CRITERIA",
    "EDGE_STEPS",
    "RESCORE_EDGES",
    "Circuit",
    "Edge",
    "EdgePatcher",
    "Graph",
    "Node",
    "Port",
    "attribution_agreement",
    "build_graph",
    "circuit_intervals",
    "circuit_pair",
    "circuit_prompts",
    "criteria_moments",
    "decided_circuit",
    "discover_circuit",
    "edge_attribution",
    "score_edges",
]
