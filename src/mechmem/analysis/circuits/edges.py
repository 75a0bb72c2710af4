"""Edge-level circuits: which component feeds which, scored by path patching; a small graph's faithfulness.

Nodes are the token embedding, the position embedding (absent under rotary and shortformer positions), every
attention head, every MLP and the logits. Each *input port* reads the sum of every earlier node's output (plus
biases), and an *edge* u -> v.port is u's term in it. Ports (TransformerLens hooks, before the layer norm):

    head LlHh      q, k, v    blocks.l.hook_q_input / hook_k_input / hook_v_input (one per head; under
                              grouped-query attention k and v once per key/value head)
    MLPl           in         blocks.l.hook_mlp_in
    logits         in         blocks.{last}.hook_resid_post

Outputs: hook_embed, hook_pos_embed, a head's z times its W_O (bias aside) and hook_mlp_out. A head feeds
every port of later layers and its own layer's MLP (not in a parallel block).

Ablating edges: a port whose edges from senders S are dropped gets its current value minus, over u in S, u's
current output minus its ablated one. One dropped edge is path patching of that edge; many evaluate a circuit
with the ACDC convention (a kept edge carries what its sender computes from its own, possibly ablated,
inputs). Ablated outputs (`ABLATIONS`): "corrupted" = on the pair's corrupted inputs, "mean" = the mean
over reference sequences per position, "zero" = zeros. Everything runs through the intervention engine.

Caveats: the position embedding's edges score exactly zero under "corrupted" and "mean" (use "zero"); a
corruption shows only the paths it disturbs; effects of single edges need not add up.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

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
from mechmem.analysis.stats import bootstrap_ratio
from mechmem.errors import MechmemError
from mechmem.models.backend import split_qkv_unsupported
from mechmem.models.checks import check_choice, check_memory_mb
from mechmem.models.parts import Head
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
    """A component: kind "embed", "pos", "head", "mlp" or "logits"; `depth` orders them: embeddings -1, heads
    of layer l at l, its MLP at l + 0.5 (l in a parallel block), logits at n_layers. Its output is read at
    `hook` (a head's z; None for the logits), sliced by `index` after the batch axis ((slice(None), h))."""

    name: str
    kind: str
    depth: float
    hook: str | None = None
    index: tuple = ()

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

    @property
    def row(self) -> int:
        """The port's row at its hook: its head (or key/value head), 0 for a hook without a head axis."""
        return self.index[-1] if self.index else 0


@dataclass(frozen=True)
class Edge:
    """The path from `sender`'s output into `port`."""

    sender: Node
    port: Port

    @property
    def name(self) -> str:
        return f"{self.sender.name}->{self.port.name}"

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "sender": self.sender.name,
            "receiver": self.port.node.name,
            "port": self.port.port,
        }


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
            node = Node(str(Head(l, h)), "head", float(l), f"blocks.{l}.attn.hook_z", (slice(None), h))
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


def _through_w_o(
    z: Float[Tensor, "batch pos head d_head"], w_o: Float[Tensor, "head d_head d_model"]
) -> Float[Tensor, "head batch pos d_model"]:
    """Each head's share of the attention output (bias aside) from its z: z_h @ W_O[h], per head."""
    return torch.einsum("bphe,hem->hbpm", z, w_o.to(z.dtype))


def _summed_through_w_o(
    z: Float[Tensor, "batch pos head d_head"], w_o: Float[Tensor, "head d_head d_model"]
) -> Float[Tensor, "batch pos d_model"]:
    """The heads' shares summed, in one matmul."""
    return z.flatten(-2) @ w_o.to(z.dtype).flatten(0, 1)


class EdgePatcher:
    """Clean and ablated outputs of every node on a pair's clean inputs; scores edges and evaluates circuits.
    A head's output change is kept in z space (`change`) and goes through W_O where a port uses it.

    Args:
        model: a `HookedTransformer`.
        pair: clean/corrupted inputs; the metric is its per-prompt logit difference at the answer position.
        ablation: "corrupted", "mean" or "zero" (see the module docstring).
        reference: sequences the "mean" ablation averages over (default: `pair.clean`).
        memory_mb: budget of one batched pass of the engine.
        metric: what `run`, `exact` and `evaluate` measure: logits [batch pos d_vocab] -> [..., batch], per
            prompt (default: the pair's logit difference; e.g. stacked with `pair.answer_loss_per_prompt`
            for losses); `attribution` always differentiates the logit difference.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        pair: PatchingPair,
        ablation: str = "mean",
        *,
        reference: Tensor | None = None,
        memory_mb: float = 256.0,
        metric: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        check_choice("ablation", ablation, ABLATIONS)
        check_memory_mb(memory_mb)
        self.model, self.pair, self.ablation, self.memory_mb = model, pair, ablation, memory_mb
        self.measure = pair.logit_diff_per_prompt if metric is None else metric
        self.graph = build_graph(model)
        self.tokens = pair.clean
        hooks = sorted({n.hook for n in self.graph.nodes if n.hook is not None})
        setter = {"corrupted": from_run(pair.corrupted), "zero": zero()}.get(ablation)
        setter = setter or mean(pair.clean if reference is None else reference)
        self.clean = setter_values(model, self.tokens, from_run(self.tokens), hooks)
        self.ablated = setter_values(model, self.tokens, setter, hooks)
        self.senders = [n for n in self.graph.nodes if n.hook is not None]
        """Every node with an output, in graph order (embeddings, then by depth); `at` indexes it by name."""
        self.at = {u.name: i for i, u in enumerate(self.senders)}
        self.groups: dict[str, list[int]] = {}
        """Per sender hook, its senders (consecutive indices into `senders`): a layer's heads share hook_z."""
        for i, u in enumerate(self.senders):
            self.groups.setdefault(u.hook, []).append(i)
        self.before = {p.hook: sum(u.depth < p.node.depth for u in self.senders) for p in self.graph.ports}
        """Per port hook: how many senders (a prefix of `senders`, whole groups) feed it."""
        with torch.no_grad():
            self.change = {h: self.ablated[h] - self.clean[h] for h in hooks}
        """Per sender hook, ablated - clean as the hook holds it ([batch pos head_index d_head] at hook_z)."""

    def w_o(self, hook: str) -> Float[Tensor, "head d_head d_model"]:
        """W_O of the layer whose heads write at `hook` (their hook_z)."""
        return self.model.blocks[self.senders[self.groups[hook][0]].layer].attn.W_O.detach()

    @torch.no_grad()
    def output(self, node: Node, act: Tensor) -> Float[Tensor, "batch pos d_model"]:
        """The node's output (what it adds to the residual stream) from the whole activation at its hook."""
        x = act[(slice(None), *node.index)]
        if node.kind == "head":
            attn = self.model.blocks[node.layer].attn
            x = x @ attn.W_O[node.index[-1]].to(x.dtype)
        return x

    def delta(self, sender: Node) -> Float[Tensor, "batch pos d_model"]:
        """The sender's output change when ablated (its ablated output - its clean output), in d_model."""
        return self.output(sender, self.change[sender.hook])

    def metric(self, logits: Float[Tensor, "batch pos d_vocab"]) -> Float[Tensor, "... batch"]:
        """The per-prompt metric (`metric` of the constructor; default the pair's logit difference)."""
        return self.measure(logits)

    def run(self, variants: list[list[Intervention]]) -> Float[Tensor, "variant ... batch"]:
        """The per-prompt metric under each variant (one engine call)."""
        return intervene(self.model, self.tokens, variants, self.metric, memory_mb=self.memory_mb)

    def exact(self, edges: list[Edge]) -> Float[Tensor, "edge batch"]:
        """Per prompt: metric(full) - metric(edge ablated), path patching each edge (one variant per edge)."""

        def shift(sender: Node) -> Any:
            return apply(lambda act, hook: act + self.delta(sender).to(act))

        variants = [[Intervention(e.port.hook, e.port.index, shift(e.sender))] for e in edges]
        values = self.run([[]] + variants)
        return values[0] - values[1:]

    def attribution(
        self, alphas: tuple[float | None, ...] = (None,), *, per_prompt: bool = False
    ) -> Float[Tensor, "edge ..."]:
        """Edge attribution patching: -(u_ablated - u_clean) . d metric / d port for every edge, summed over
        prompts, positions and d_model, the gradient averaged over one run per entry of `alphas` (None: the
        clean run, EAP; w: embeddings w of the way from clean to ablated, EAP-IG). With `per_prompt`, [edge,
        prompt]: each prompt's own estimate, whose mean over prompts is that number."""
        hooks = sorted({p.hook for p in self.graph.ports})
        embeds = [n.hook for n in self.graph.nodes if n.kind in ("embed", "pos")]
        n = len(self.tokens)
        scores = torch.zeros(len(self.graph.edges), *((n,) if per_prompt else ()))
        for rows in self.row_chunks():
            part = self.pair.rows(rows)

            def share(logits: Tensor, part: PatchingPair = part) -> Tensor:
                """The chunk's logit differences summed, over all n prompts (the chunks' gradients add up)."""
                return part.logit_diff_per_prompt(logits).sum() / n

            total: dict[str, Tensor] = {}
            for w in alphas:
                mix = [] if w is None else [self._toward_ablated(h, rows, w) for h in embeds]
                _, grads = activation_grads(self.model, self.tokens[rows], hooks, share, mix)
                for h in hooks:
                    g = grads[h] / len(alphas)
                    total[h] = total[h] + g if h in total else g
            if per_prompt:
                scores[:, rows] = n * self.edge_products(total, rows, per_prompt=True)
            else:
                scores += self.edge_products(total, rows)
        return scores

    def _toward_ablated(self, hook: str, rows: slice, w: float) -> Intervention:
        target = self.ablated[hook][rows]
        return Intervention(hook, (), apply(lambda a, h: a + w * (target.to(a) - a)))

    def row_chunks(self) -> list[slice]:
        """Chunks of prompts for `attribution`'s gradient passes, each within `memory_mb` (estimated as 16
        port-sized float32 tensors per prompt)."""
        cfg = self.model.cfg
        per_prompt = 16 * 4 * self.tokens.shape[1] * cfg.d_model * (3 * cfg.n_heads + 2) * cfg.n_layers
        size = max(1, int(self.memory_mb * 2**20 // per_prompt))
        return [slice(first, first + size) for first in range(0, len(self.tokens), size)]

    @torch.no_grad()
    def edge_products(
        self, grads: dict[str, Tensor], rows: slice = slice(None), *, per_prompt: bool = False
    ) -> Float[Tensor, "edge ..."]:
        """-(u's output change) . grads[port] summed over prompts (unless `per_prompt`), positions and
        d_model, for every edge u -> port, from a tensor at each port hook on the prompts `rows`."""
        keep = "b" if per_prompt else ""
        pieces: dict[str, list[Tensor]] = {hook: [] for hook in self.before}
        for sender_hook, ids in self.groups.items():  # every sender feeds at least the logits
            change = self.change[sender_hook][rows]  # deltas: [sender batch pos d_model]
            deltas = _through_w_o(change, self.w_o(sender_hook)) if change.ndim == 4 else change[None]
            for hook, n in self.before.items():
                if ids[-1] < n:
                    g = grads[hook].to(deltas.dtype)
                    pattern = f"sbpd,bphd->hs{keep}" if g.ndim == 4 else f"sbpd,bpd->s{keep}"
                    pieces[hook].append(-torch.einsum(pattern, deltas, g))
        by_hook = {hook: torch.cat(parts, dim=-2 if per_prompt else -1) for hook, parts in pieces.items()}
        scores = [by_hook[e.port.hook][(*e.port.index[1:], self.at[e.sender.name])] for e in self.graph.edges]
        return torch.stack(scores).cpu()

    def dropped(self, keep: Bool[Tensor, " edge"]) -> dict[str, Tensor]:
        """Per port hook with a dropped edge: a 0/1 matrix [row (the hook's head axis, or one), sender before
        it], 1 = dropped."""
        rows: dict[str, int] = {}
        for p in self.graph.ports:
            rows[p.hook] = max(rows.get(p.hook, 1), p.row + 1)
        drop: dict[str, Tensor] = {}
        for edge, kept in zip(self.graph.edges, keep.tolist()):
            if not kept:
                hook = edge.port.hook
                if hook not in drop:
                    drop[hook] = torch.zeros(rows[hook], self.before[hook])
                drop[hook][edge.port.row, self.at[edge.sender.name]] = 1.0
        return drop

    def changed(self, drop: dict[str, Tensor]) -> list[bool]:
        """Per sender: whether its output can differ from its clean output under `drop` (a port of it drops
        an edge, or a sender of smaller depth changed)."""
        hit = {p.node.name for p in self.graph.ports if p.hook in drop and bool(drop[p.hook][p.row].any())}
        out, first = [], math.inf  # the smallest depth of a changed sender so far (senders: by depth)
        for u in self.senders:
            out.append(u.name in hit or first < u.depth)
            first = min(first, u.depth) if out[-1] else first
        return out

    def circuit_variant(self, keep: Bool[Tensor, " edge"]) -> list[Intervention]:
        """Interventions that ablate every edge not in `keep` at once (the module docstring)."""
        return _CircuitPass(self, keep).interventions()

    def evaluate(self, keep: Bool[Tensor, "variant edge"]) -> Float[Tensor, "variant ... batch"]:
        """Per-prompt metric of each circuit (a row of `keep`, each distinct one run once)."""
        unique, where = torch.unique(keep, dim=0, return_inverse=True)
        variants = [
            self.circuit_variant(row) if bool(row.any()) else self.every_edge_ablated() for row in unique
        ]
        return self.run(variants)[where]

    def full_and_empty(self) -> Float[Tensor, "2 batch"]:
        """The per-prompt metric with every edge and with none (every edge ablated)."""
        every = torch.ones(len(self.graph.edges), dtype=torch.bool)
        return self.evaluate(torch.stack([every, ~every]))

    def every_edge_ablated(self) -> list[Intervention]:
        """The empty circuit as one edit: the clean run with the logits' input plus every sender's change
        (equal to `circuit_variant` of no edge: only the logits' port reaches the metric)."""
        port = next(p for p in self.graph.ports if p.node.kind == "logits")

        def shift(act: Tensor, hook: Any) -> Tensor:
            change = self.change  # summed in sender order
            total = sum(
                _summed_through_w_o(change[h], self.w_o(h)) if change[h].ndim == 4 else change[h]
                for h in self.groups
            )
            return act + total.to(act)

        return [Intervention(port.hook, port.index, apply(shift))]


class _CircuitPass:
    """The interventions of one circuit (`EdgePatcher.circuit_variant`) and what they hold during its pass.
    A port row's change is the dropped heads' shares, or, when more than half are dropped, every head's
    shares summed minus the kept ones."""

    def __init__(self, patcher: EdgePatcher, keep: Bool[Tensor, " edge"]) -> None:
        self.patcher = patcher
        self.drop = patcher.dropped(keep)
        changed = patcher.changed(self.drop)
        needed = {i for m in self.drop.values() for i in m.any(0).nonzero().flatten().tolist()}
        self.recorded = sorted({patcher.senders[i].hook for i in needed if changed[i]})
        """Sender hooks whose current values this pass records."""
        self.plan = {
            port: [
                (h, m[:, ids])
                for h, ids in patcher.groups.items()
                if ids[-1] < m.shape[1] and m[:, ids].any()
            ]
            for port, m in self.drop.items()
        }
        """Per port hook: (sender hook, its 0/1 [row, sender] block) for every sender hook it drops from."""
        self.current: dict[str, Tensor] = {}
        self.totals: dict[str, Tensor] = {}
        self.pending = len(self.drop)

    def interventions(self) -> list[Intervention]:
        out = [Intervention(hook, (), apply(self.record(hook))) for hook in self.recorded]
        return out + [Intervention(hook, (), apply(self.patch(hook))) for hook in self.drop]

    def record(self, name: str) -> Any:
        # keyed by the requested name: a TransformerLens 4 hook point may carry its canonical one
        def fn(act: Tensor, hook: Any) -> Tensor:
            self.current[name] = act - self.patcher.ablated[name].to(act.dtype)
            return act

        return fn

    def now(self, hook: str) -> Tensor:
        """Current minus ablated values at a sender hook: recorded, or (unchanged sender) clean - ablated."""
        return self.current[hook] if hook in self.recorded else -self.patcher.change[hook]

    def total(self, hook: str) -> Float[Tensor, "batch pos d_model"]:
        """Every head's share of the layer at `hook` summed (current minus ablated), once per pass."""
        if hook not in self.totals:
            self.totals[hook] = _summed_through_w_o(self.now(hook), self.patcher.w_o(hook))
        return self.totals[hook]

    def correction(self, hook: str, w: Tensor) -> Float[Tensor, "batch pos row d_model"]:
        """Per port row, the summed change of the senders at `hook` that row drops (`w`: [row, sender])."""
        diff = self.now(hook)
        if diff.ndim == 3:  # one node (embedding or MLP): [batch pos d_model]
            return diff[:, :, None, :] * w[:, 0].to(diff)[:, None]
        whole = w.sum(1) > w.shape[1] / 2  # rows written as every head minus the kept ones
        coef = torch.where(whole[:, None], w - 1, w)  # +1: a dropped head added, -1: a kept head taken off
        heads = coef.any(0).nonzero().flatten().tolist()
        out = torch.zeros((), dtype=diff.dtype, device=diff.device)
        if bool(whole.any()):
            out = out + whole.to(diff)[:, None] * self.total(hook)[:, :, None, :]
        if heads:
            shares = _through_w_o(diff[:, :, heads], self.patcher.w_o(hook)[heads])
            out = out + torch.einsum("rh,hbpm->bprm", coef[:, heads].to(diff), shares)
        return out

    def patch(self, port: str) -> Any:
        def fn(act: Tensor, hook: Any) -> Tensor:
            drop = sum(self.correction(sender, w) for sender, w in self.plan[port])
            self.pending -= 1
            if self.pending == 0:  # the pass's last port: release what it recorded
                self.current, self.totals, self.pending = {}, {}, len(self.drop)
            return act - (drop if act.ndim == 4 else drop[:, :, 0]).to(act.dtype)

        return fn


def circuit_intervals(
    full: Float[Tensor, " batch"],
    empty: Float[Tensor, " batch"],
    circuit: Float[Tensor, " batch"],
    complement: Float[Tensor, " batch"],
    *,
    generator: torch.Generator | None = None,
) -> dict[str, tuple[float, float]]:
    """95% percentile bootstrap intervals over prompts of "gap" = mean(full - empty), "faithfulness" =
    sum(circuit - empty) / sum(full - empty) and "completeness" = sum(full - complement) / sum(full - empty),
    the prompts resampled together (`generator`: default seeded with 0)."""
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
