"""Edge-level circuits: which component feeds which, scored by path patching; a small graph's faithfulness.

The graph. Nodes are the token embedding, the position embedding, every attention head, every MLP and the
logits. The residual stream read anywhere is the sum of every earlier node's output (plus biases), so each
*input port* is such a sum and an *edge* u -> v.port is the term u's output contributes to v's port. Ports
(TransformerLens hooks, all before the layer norm that follows them):

    head LlHh      q, k, v    blocks.l.hook_q_input / hook_k_input / hook_v_input, one copy per head, so a
                              previous-token head feeding an induction head's keys (K-composition) is its own
                              edge
    MLPl           in         blocks.l.hook_mlp_in
    logits         in         blocks.{last}.hook_resid_post (the final residual stream, before the final norm)

and outputs hook_embed, hook_pos_embed, a head's z times its W_O (its share of the attention output, bias b_O
aside; the same as TransformerLens's attn.hook_result without computing it for every head) and an MLP's
hook_mlp_out. A head feeds every port of later layers and its own layer's MLP (not in a parallel block,
whose MLP reads the block's input beside the heads). Under grouped-query attention a group of heads shares
one key and one value input (ports L.H.k / L.H.v of the group's first head, index: the key/value head).
Rotary and shortformer positions add nothing to the residual stream, so those models have no pos node.

Ablating edges. A port whose incoming edges from senders S are dropped gets its value in the current run
minus, over u in S, (u's output in the current run - u's ablated output); every other port is left alone. One
dropped edge is path patching of that edge (its sender's change reaches the model through that port only);
many dropped edges evaluate a circuit with the ACDC convention (a kept edge carries what its sender computes
from its own, possibly ablated, inputs: the senders' outputs are read in the same pass). Ablated outputs
(`ABLATIONS`): "corrupted" = the sender's output on the pair's corrupted inputs (same sequence index), "mean"
= its mean over reference sequences at each position (the engine's `mean` setter), "zero" = zeros. Everything
runs through the intervention engine (`apply` setters, variants stacked into batched passes).

Caveats: the position embedding is the same in clean and corrupted runs and equals its per-position mean, so
its edges score exactly zero under "corrupted" and "mean" (use "zero" to see them). A corruption shows only
the paths it disturbs: the generic repeats pair changes one token, so only the value path carrying it moves.
Effects of single edges need not add up.
"""

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechmem.analysis.intervals import bootstrap_ratio
from mechmem.analysis.interventions import (
    Intervention,
    activation_grads,
    apply,
    from_run,
    intervene,
    mean,
    setter_values,
    zero,
)
from mechmem.errors import MechmemError
from mechmem.models.adapter import split_qkv_unsupported
from mechmem.tasks.base import PatchingPair

ABLATIONS = ("corrupted", "mean", "zero")
ABLATION_TEXT = {
    "corrupted": "each sender's output on the corrupted prompt of the same pair",
    "mean": "each sender's mean output per position over the reference prompts, by default the clean ones",
    "zero": "each sender's output set to zero",
}
"""What an ablated edge carries, in words, per ablation (printed with every circuit)."""


@dataclass(frozen=True)
class Node:
    """A component: kind "embed", "pos", "head", "mlp" or "logits".

    `depth` orders them: embeddings -1, head of layer l at l, MLP of layer l at l + 0.5 (at l in a parallel
    block, beside its heads), logits at n_layers.
    """

    name: str
    kind: str
    depth: float
    hook: str | None = None
    """Hook the node's output is read from (None for the logits); for a head, its z (times W_O: its
    output)."""
    index: tuple = ()
    """Slice of that hook's axes after batch: (slice(None), h) for head h."""

    @property
    def layer(self) -> int:
        return int(self.depth) if self.depth >= 0 else -1


@dataclass(frozen=True)
class Port:
    """An input of a node: "q", "k", "v" of a head, "in" of an MLP or the logits."""

    node: Node
    port: str
    hook: str
    index: tuple = ()

    @property
    def name(self) -> str:
        return self.node.name if self.port == "in" else f"{self.node.name}.{self.port}"


@dataclass(frozen=True)
class Edge:
    """The path from `sender`'s output into `port`."""

    sender: Node
    port: Port

    @property
    def name(self) -> str:
        return f"{self.sender.name}->{self.port.name}"


@dataclass
class Graph:
    """Every node, port and edge of a model (see the module docstring)."""

    nodes: list[Node]
    ports: list[Port]
    edges: list[Edge]

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [{"name": n.name, "kind": n.kind, "depth": n.depth} for n in self.nodes]}


def build_graph(model: torch.nn.Module) -> Graph:
    """The computational graph of a `HookedTransformer` with sequential attention and MLP blocks."""
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "blocks"):
        raise MechmemError("circuit discovery needs a TransformerLens HookedTransformer")
    if reason := split_qkv_unsupported(model):
        raise MechmemError(f"circuit discovery patches per-head Q/K/V inputs: {reason}")
    nodes = [Node("embed", "embed", -1.0, "hook_embed")]
    if cfg.positional_embedding_type == "standard":  # rotary and shortformer add nothing to the residual
        nodes.append(Node("pos", "pos", -1.0, "hook_pos_embed"))
    parallel = bool(getattr(cfg, "parallel_attn_mlp", False))
    group = cfg.n_heads // (getattr(cfg, "n_key_value_heads", None) or cfg.n_heads)
    ports = []
    for l in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            node = Node(f"L{l}H{h}", "head", float(l), f"blocks.{l}.attn.hook_z", (slice(None), h))
            nodes.append(node)
            ports.append(Port(node, "q", f"blocks.{l}.hook_q_input", (slice(None), h)))
            if h % group == 0:  # grouped-query: one key/value input per group, named after its first head
                ports += [
                    Port(node, x, f"blocks.{l}.hook_{x}_input", (slice(None), h // group)) for x in "kv"
                ]
        if not cfg.attn_only:
            # a parallel block's MLP reads resid_pre, beside its layer's heads
            nodes.append(Node(f"MLP{l}", "mlp", l + (0.0 if parallel else 0.5), f"blocks.{l}.hook_mlp_out"))
            ports.append(Port(nodes[-1], "in", f"blocks.{l}.hook_mlp_in"))
    nodes.append(Node("logits", "logits", float(cfg.n_layers)))
    ports.append(Port(nodes[-1], "in", f"blocks.{cfg.n_layers - 1}.hook_resid_post"))
    edges = [Edge(u, p) for p in ports for u in nodes if u.hook is not None and u.depth < p.node.depth]
    return Graph(nodes, ports, edges)


def _take(act: Tensor, index: tuple) -> Tensor:
    return act[(slice(None), *index)]


def _share_of(part: PatchingPair, n: int) -> Any:
    """The metric of a chunk of prompts: their logit differences summed, over all `n` prompts (so the chunks'
    gradients add up to the mean's)."""

    def metric(logits: Tensor) -> Tensor:
        return part.logit_diff_per_prompt(logits).sum() / n

    return metric


class EdgePatcher:
    """Clean and ablated outputs of every node on a pair's clean inputs; scores edges and evaluates circuits.

    Args:
        model: a `HookedTransformer`.
        pair: clean/corrupted inputs; the metric is its per-prompt logit difference at the answer position.
        ablation: "corrupted", "mean" or "zero" (see the module docstring).
        reference: sequences the "mean" ablation averages over (default: `pair.clean`).
        memory_mb: budget of one batched pass of the engine.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        pair: PatchingPair,
        ablation: str = "mean",
        *,
        reference: Tensor | None = None,
        memory_mb: float = 256.0,
    ) -> None:
        if ablation not in ABLATIONS:
            raise MechmemError(f"ablation must be one of {', '.join(ABLATIONS)}, got {ablation!r}")
        self.model, self.pair, self.ablation, self.memory_mb = model, pair, ablation, memory_mb
        self.graph = build_graph(model)
        self.tokens = pair.clean
        hooks = sorted({n.hook for n in self.graph.nodes if n.hook is not None})
        setter = {"corrupted": from_run(pair.corrupted), "zero": zero()}.get(ablation)
        setter = setter or mean(pair.clean if reference is None else reference)
        self.clean = setter_values(model, self.tokens, from_run(self.tokens), hooks)
        self.ablated = setter_values(model, self.tokens, setter, hooks)
        self.senders = [n for n in self.graph.nodes if n.hook is not None]
        """Every node with an output, in graph order (embeddings, then by depth): `delta_stack`'s rows."""
        self.before = {p.hook: sum(u.depth < p.node.depth for u in self.senders) for p in self.graph.ports}
        """Per port hook: how many senders (a prefix of `senders`) feed it."""
        with torch.no_grad():
            diff = {h: self.ablated[h] - self.clean[h] for h in hooks}
            self.delta_stack = torch.stack([self.output(u, diff[u.hook]) for u in self.senders])
        """Each sender's output change when ablated: [sender, batch, pos, d_model]."""
        self.delta = {u.name: d for u, d in zip(self.senders, self.delta_stack)}

    @torch.no_grad()
    def output(self, node: Node, act: Tensor) -> Float[Tensor, "batch pos d_model"]:
        """The node's output (what it adds to the residual stream) from the whole activation at its hook."""
        x = _take(act, node.index)
        if node.kind == "head":
            attn = self.model.blocks[node.layer].attn
            x = x @ attn.W_O[node.index[-1]].to(x.dtype)
        return x

    def metric(self, logits: Float[Tensor, "batch pos d_vocab"]) -> Float[Tensor, " batch"]:
        """The pair's logit difference, per prompt."""
        return self.pair.logit_diff_per_prompt(logits)

    def run(self, variants: list[list[Intervention]]) -> Float[Tensor, "variant batch"]:
        """The per-prompt metric under each variant (one engine call)."""
        return intervene(self.model, self.tokens, variants, self.metric, memory_mb=self.memory_mb)

    def exact(self, edges: list[Edge]) -> Float[Tensor, "edge batch"]:
        """Per prompt: metric(full) - metric(edge ablated), by path patching each edge (one variant per
        edge)."""

        def shift(delta: Tensor) -> Any:
            return apply(lambda act, hook: act + delta.to(act.device))

        variants = [
            [Intervention(e.port.hook, e.port.index, shift(self.delta[e.sender.name]))] for e in edges
        ]
        values = self.run([[]] + variants)
        return values[0] - values[1:]

    def attribution(self, alphas: tuple[float | None, ...] = (None,)) -> Float[Tensor, " edge"]:
        """Edge attribution patching: -(u_ablated - u_clean) . d metric / d port for every edge, summed over
        prompts, positions and d_model, the gradient averaged over one run per entry of `alphas`: None is the
        clean run (EAP, one forward and one backward pass), a number w a run whose token and position
        embeddings lie w of the way from their clean to their ablated values (EAP-IG).

        The prompts go through in chunks (`row_chunks`): each chunk's port gradients are contracted with its
        senders' changes before the next, so memory does not grow with the prompts; the metric is the mean
        over all prompts, so the sum over chunks is the whole batch's number.
        """
        hooks = sorted({p.hook for p in self.graph.ports})
        embeds = [n.hook for n in self.graph.nodes if n.kind in ("embed", "pos")]
        n = len(self.tokens)
        scores = torch.zeros(len(self.graph.edges))
        for rows in self.row_chunks():
            part = self.pair.rows(rows)
            total: dict[str, Tensor] = {}
            for w in alphas:
                mix = [] if w is None else [self._toward_ablated(h, rows, w) for h in embeds]
                _, grads = activation_grads(self.model, self.tokens[rows], hooks, _share_of(part, n), mix)
                for h in hooks:
                    g = grads[h] / len(alphas)
                    total[h] = total[h] + g if h in total else g
            scores += self.edge_products(total, rows)
        return scores

    def _toward_ablated(self, hook: str, rows: slice, w: float) -> Intervention:
        target = self.ablated[hook][rows]
        return Intervention(hook, (), apply(lambda a, h: a + w * (target.to(a) - a)))

    def row_chunks(self) -> list[slice]:
        """Chunks of prompts for the gradient passes of `attribution`, each within `memory_mb`. A hooked
        backward pass holds, per prompt, the port activations, their zero leaves and gradients, the running
        average and the pass's saved activations: estimated as 16 port-sized float32 tensors (d_model per
        head and position for each of the query, key and value inputs, 2 x d_model for the MLP input and the
        logits' residual stream)."""
        cfg = self.model.cfg
        per_prompt = 16 * 4 * self.tokens.shape[1] * cfg.d_model * (3 * cfg.n_heads + 2) * cfg.n_layers
        size = max(1, int(self.memory_mb * 2**20 // per_prompt))
        return [slice(first, first + size) for first in range(0, len(self.tokens), size)]

    def edge_products(self, grads: dict[str, Tensor], rows: slice = slice(None)) -> Float[Tensor, " edge"]:
        """-(u's output change) . grads[port] summed over prompts, positions and d_model, for every edge u ->
        port, from the gradient (or any tensor shaped like it) at each port's hook on the prompts `rows`: one
        contraction per port hook over all its senders at once."""
        by_hook = {}
        for hook, n in self.before.items():
            g = grads[hook].to(self.delta_stack.dtype)
            pattern = "sbpd,bphd->hs" if g.ndim == 4 else "sbpd,bpd->s"
            by_hook[hook] = -torch.einsum(pattern, self.delta_stack[:n, rows], g)
        at = {u.name: i for i, u in enumerate(self.senders)}
        scores = [by_hook[e.port.hook][(*e.port.index[1:], at[e.sender.name])] for e in self.graph.edges]
        return torch.stack(scores).cpu()

    def circuit_variant(self, keep: Bool[Tensor, " edge"]) -> list[Intervention]:
        """Interventions that ablate every edge not in `keep` at once (see the module docstring).

        Each sender hook records the output changes (current - ablated) of its senders that some port drops;
        each port hook then subtracts, for all its ports at once, the sum of its dropped senders' changes (a
        0/1 matrix [port, sender] times the stacked changes).
        """
        at = {u.name: i for i, u in enumerate(self.senders)}
        rows: dict[str, int] = {}  # port hook -> its head axis (key/value heads under grouped-query), or 1
        for p in self.graph.ports:
            rows[p.hook] = max(rows.get(p.hook, 1), p.index[-1] + 1 if p.index else 1)
        drop: dict[str, Tensor] = {}  # port hook -> [rows, senders before it], 1 = dropped
        for edge, kept in zip(self.graph.edges, keep.tolist()):
            if not kept:
                hook = edge.port.hook
                if hook not in drop:
                    drop[hook] = torch.zeros(rows[hook], self.before[hook])
                drop[hook][edge.port.index[-1] if edge.port.index else 0, at[edge.sender.name]] = 1.0
        need = sorted({i for m in drop.values() for i in m.any(0).nonzero().flatten().tolist()})
        changes: dict[int, Tensor] = {}
        by_hook: dict[str, list[int]] = {}
        for i in need:
            by_hook.setdefault(self.senders[i].hook, []).append(i)

        def record(name: str) -> Any:
            # Keyed by the requested name: a TransformerLens 4 hook point may carry its canonical one.
            def fn(act: Tensor, hook: Any) -> Tensor:
                diff = act - self.ablated[name].to(act.dtype)
                ids = by_hook[name]
                if self.senders[ids[0]].kind == "head":
                    W_O = self.model.blocks[self.senders[ids[0]].layer].attn.W_O.to(act.dtype)
                    heads = [self.senders[i].index[-1] for i in ids]
                    outs = torch.einsum("bphd,hdm->hbpm", diff[:, :, heads], W_O[heads])
                    changes.update(zip(ids, outs))
                else:
                    changes[ids[0]] = diff
                return act

            return fn

        out = [Intervention(hook, (), apply(record(hook))) for hook in sorted(by_hook)]
        for hook, matrix in drop.items():
            cols = matrix.any(0).nonzero().flatten().tolist()

            def patch(act: Tensor, hook: Any, cols: list[int] = cols, m: Tensor = matrix) -> Tensor:
                stacked = torch.stack([changes[i] for i in cols])
                weights = m[:, cols].to(act)
                if act.ndim == 4:
                    return act - torch.einsum("hs,sbpd->bphd", weights, stacked)
                return act - torch.einsum("s,sbpd->bpd", weights[0], stacked)

            out.append(Intervention(hook, (), apply(patch)))
        return out

    def evaluate(self, keep: Bool[Tensor, "variant edge"]) -> Float[Tensor, "variant batch"]:
        """Per-prompt metric of each circuit (a row of `keep`), every other edge ablated."""
        return self.run([self.circuit_variant(row) for row in keep])


def circuit_intervals(
    full: Float[Tensor, " batch"],
    empty: Float[Tensor, " batch"],
    circuit: Float[Tensor, " batch"],
    complement: Float[Tensor, " batch"],
    *,
    generator: torch.Generator | None = None,
) -> dict[str, tuple[float, float]]:
    """95% percentile bootstrap intervals over prompts (`mechmem.analysis.intervals`) of a circuit's measures.

    From per-prompt metric values of the full model, every edge ablated, the circuit alone and the full model
    minus the circuit: "gap" = mean(full - empty), "faithfulness" = sum(circuit - empty) / sum(full - empty),
    "completeness" = sum(full - complement) / sum(full - empty); the prompts are resampled together, so each
    resample is one redraw of the prompt set. `generator` defaults to one seeded with 0 (same prompts, same
    interval).
    """
    gen = generator or torch.Generator().manual_seed(0)
    full, empty, circuit, complement = (x.detach().double().cpu() for x in (full, empty, circuit, complement))
    gap = full - empty
    out = {}
    for name, num, den in (
        ("gap", gap, None),
        ("faithfulness", circuit - empty, gap),
        ("completeness", full - complement, gap),
    ):
        state = gen.get_state()  # the same resamples for every measure
        low, high = bootstrap_ratio(num, den, generator=gen)
        gen.set_state(state)
        out[name] = (float(low), float(high))
    return out


__all__ = [
    "ABLATIONS",
    "ABLATION_TEXT",
    "Edge",
    "EdgePatcher",
    "Graph",
    "Node",
    "Port",
    "build_graph",
    "circuit_intervals",
]
