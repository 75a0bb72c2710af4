"""Circuit progress measures: how much of the model's behaviour one fixed circuit carries, step by step.

Nanda et al. (2023), "Progress measures for grokking via mechanistic interpretability", follow a circuit found
in the final model through training with two losses: the *restricted loss* (only the circuit kept) and the
*excluded loss* (only the circuit removed). Here the circuit is a fixed set of edges of the edge graph
(`mechmem.analysis.circuits`), by default the final checkpoint's decided circuit; at every checkpoint an
`EdgePatcher` on one fixed draw of the task's clean/corrupted pair evaluates four circuits at once:

    full        every edge kept (the model itself)
    empty       every edge ablated
    restricted  only the circuit's edges kept (everything else ablated)
    excluded    the circuit's edges ablated, everything else kept

Ablated edges carry each sender's mean output per position over the pair's clean prompts (mean ablation, the
ACDC convention of `EdgePatcher.circuit_variant`). Measured per prompt: the cross-entropy of the correct
answer at the answer position (`PatchingPair.answer_loss_per_prompt`; the pair exposes no loss of its own)
and the logit difference, whose faithfulness = sum(restricted - empty) / sum(full - empty) is the `Circuit`'s.

Caveats: the circuit is the final model's, so early steps measure how much of *that* mechanism exists, not
which mechanism the model then used; the mean ablation's reference changes with the weights (it is each step's
own mean output); the losses are at the answer position only, not the task's whole training loss.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.circuits.decided import decided_circuit
from mechmem.analysis.circuits.edges import EdgePatcher, Graph, build_graph
from mechmem.errors import MechmemError
from mechmem.tasks.base import PatchingPair

MEASURES = ("full", "empty", "restricted", "excluded")
"""The four circuits evaluated at every step, in the order of `ProgressMeasures` axis `circuit`."""


@dataclass(frozen=True)
class FixedCircuit:
    """The edges the progress measures keep at every step (edge names, `Edge.name`), and where they came
    from in words."""

    edges: tuple[str, ...]
    source: str

    def keep(self, graph: Graph) -> Tensor:
        """The circuit as a mask over `graph.edges`; a name the graph lacks is a one-line error."""
        names = [e.name for e in graph.edges]
        if unknown := sorted(set(self.edges) - set(names)):
            raise MechmemError(
                f"circuit edges {unknown[:4]} are not edges of the model (e.g. {', '.join(names[:4])})"
            )
        chosen = set(self.edges)
        return torch.tensor([n in chosen for n in names], dtype=torch.bool)

    def to_dict(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "source": self.source}


def circuit_of_heads(graph: Graph, heads: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Every edge into and out of the named heads' ports (e.g. ["L0H2", "L1H1"]), in graph order."""
    known = {n.name for n in graph.nodes if n.kind == "head"}
    if unknown := [h for h in heads if h not in known]:
        raise MechmemError(
            f"circuit heads {unknown[:4]} are not heads of the model ({', '.join(sorted(known))})"
        )
    chosen = set(heads)
    return tuple(e.name for e in graph.edges if e.sender.name in chosen or e.port.node.name in chosen)


def fixed_circuit(
    model: torch.nn.Module,
    task: Any,
    *,
    edges: list[str] | tuple[str, ...] = (),
    heads: list[str] | tuple[str, ...] = (),
    seed: int = 0,
    where: str | Path = "the model",
) -> FixedCircuit:
    """The given `edges`, every edge of the given `heads`, or else the decided circuit of `model` (mean
    ablation, `decided_circuit` seeded with `seed`). `where` names the checkpoint in the source's words.

    Example:
        >>> import mechmem
        >>> from mechmem.analysis.dynamics.progress import fixed_circuit
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> fixed_circuit(model, None, edges=["L0H2->L1H1.k"]).edges
        ('L0H2->L1H1.k',)
    """
    if edges and heads:
        raise MechmemError("give circuit edges or circuit heads, not both")
    graph = build_graph(model)
    if edges:
        found = FixedCircuit(tuple(dict.fromkeys(edges)), "the given edges")
        found.keep(graph)  # unknown names fail here, before any step is measured
        return found
    if heads:
        return FixedCircuit(circuit_of_heads(graph, heads), f"every edge of {', '.join(heads)}")
    circuit, _ = decided_circuit(model, task, seed=seed, ablation="mean")
    return FixedCircuit(
        tuple(circuit.edge_names()), f"the decided circuit of {where} (mean ablation, seed {seed})"
    )


@dataclass(frozen=True)
class ProgressMeasures:
    """Per-prompt logit difference and answer loss of the four circuits of `MEASURES` on one checkpoint."""

    logit_diff: Float[Tensor, "circuit batch"]
    loss: Float[Tensor, "circuit batch"]
    """Cross-entropy of the correct answer at the answer position (nats)."""

    def __post_init__(self) -> None:
        if self.logit_diff.shape != self.loss.shape or self.loss.shape[0] != len(MEASURES):
            raise ValueError(f"logit_diff and loss must both be [{len(MEASURES)} batch]")

    def of(self, name: str, kind: str = "loss") -> Float[Tensor, " batch"]:
        """One circuit's per-prompt values (`kind`: "loss" or "logit_diff")."""
        return getattr(self, kind)[MEASURES.index(name)]


def answer_metrics(pair: PatchingPair) -> Any:
    """logits -> [2 batch]: the logit difference and the answer loss per prompt (an `EdgePatcher` metric)."""

    def fn(logits: Float[Tensor, "batch pos d_vocab"]) -> Float[Tensor, "2 batch"]:
        return torch.stack([pair.logit_diff_per_prompt(logits), pair.answer_loss_per_prompt(logits)])

    return fn


@torch.no_grad()
def progress_measures(
    model: torch.nn.Module, pair: PatchingPair, circuit: FixedCircuit, *, memory_mb: float = 256.0
) -> ProgressMeasures:
    """The full, empty, restricted and excluded circuits' per-prompt metrics on `pair` (module docstring).

    Example:
        >>> import mechmem
        >>> from mechmem.analysis.dynamics.progress import FixedCircuit, progress_measures
        >>> model = mechmem.planted_induction_model()
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair, _ = mechmem.circuit_prompts(model, task, 16, seed=0)
        >>> every = FixedCircuit(tuple(e.name for e in build_graph(model).edges), "every edge")
        >>> m = progress_measures(model, pair, every)
        >>> bool((m.of("restricted") - m.of("full")).abs().max() < 1e-5)
        True
    """
    patcher = EdgePatcher(model, pair, "mean", metric=answer_metrics(pair), memory_mb=memory_mb)
    keep = circuit.keep(patcher.graph)
    every = torch.ones_like(keep)
    values = patcher.evaluate(torch.stack([every, ~every, keep, ~keep]))  # [circuit 2 batch]
    return ProgressMeasures(values[:, 0].double(), values[:, 1].double())
