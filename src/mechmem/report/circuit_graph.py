"""The report's edge-level circuit: the graph drawn by layer, its faithfulness, the strongest edges, and its
verdict under each ablation with its faithfulness over circuit sizes (`circuit_robustness`).

`edges_section(ctx)` decides the circuit on the task's clean/corrupted pair with mean ablation
(`decided_circuit`); `plot_circuit` draws it: embeddings at the bottom, one row per layer, logits on top;
edge width is proportional to |score|, blue edges support the clean answer and red ones oppose it.
"""

import math
from collections import Counter
from typing import Any

from mechmem.analysis.circuits import ABLATION_TEXT, CircuitRobustness, build_graph, circuit_robustness
from mechmem.analysis.circuits.decided import SELECTION_BAND, decided_circuit
from mechmem.analysis.circuits.discovery import circuit_prompts
from mechmem.analysis.circuits.record import CONFIDENCE, Circuit
from mechmem.analysis.circuits.robust import MEASURES, plot_robustness
from mechmem.analysis.distribution import prompt_fit
from mechmem.analysis.qk import qk_unsupported
from mechmem.analysis.stats import CIRCUIT_POLICY, format_interval, normal_interval
from mechmem.errors import MechmemError
from mechmem.models.parts import Head
from mechmem.report.document import Section, Table
from mechmem.report.why_attend import head_reasons, reason_table

PORT_OFFSET = {"q": -0.3, "k": 0.0, "v": 0.3, "in": 0.0}
ARROW = {"arrowstyle": "-|>", "alpha": 0.75, "shrinkA": 0, "shrinkB": 0, "connectionstyle": "arc3,rad=0.08"}
"""An edge's arrow; its width is proportional to |score|, its colour the score's sign."""


def _positions(circuit: Circuit) -> dict[str, tuple[float, float]]:
    """(x, y) of every node: heads along their layer's row, MLPs and logits centred, embeddings below."""
    heads = [n for n in circuit.graph.nodes if n.kind == "head"]
    width = max([Head.parse(n.name).head for n in heads], default=0) + 1
    side = 0.7 * (width - 1) + 1.0
    pos = {"embed": (-side, -1.0), "pos": (side, -1.0)}
    for node in circuit.graph.nodes:
        if node.kind == "head":
            pos[node.name] = (1.4 * (Head.parse(node.name).head - (width - 1) / 2), node.depth)
        elif node.kind in ("mlp", "logits"):
            pos[node.name] = (0.0, node.depth)
    return pos


def plot_circuit(
    circuit: Circuit,
    roles: dict[str, str] | None = None,
    *,
    title: str = "",
    attends: dict[str, str] | None = None,
) -> Any:
    """The circuit's kept edges between its nodes, placed by layer; a head's box shows its role and, from
    `attends`, why it attends (its top query source x key source term); returns a Figure."""
    from mechmem.plotting import plt

    roles, attends = roles or {}, attends or {}
    pos = _positions(circuit)
    xs = [x for x, _ in pos.values()]
    fig, ax = plt.subplots(
        figsize=(max(4.5, 1.2 * (max(xs) - min(xs)) + 3), 1.6 * (len({y for _, y in pos.values()}))),
        layout="constrained",
    )
    kept = circuit.kept.nonzero().flatten().tolist()
    top = float(circuit.scores[kept].abs().max()) if kept else 1.0
    used: set[str] = set()  # the nodes a kept edge leaves or enters
    for i in kept:
        edge = circuit.graph.edges[i]
        used |= {edge.sender.name, edge.port.node.name}
        (x0, y0), (x1, y1) = pos[edge.sender.name], pos[edge.port.node.name]
        score = float(circuit.scores[i])
        drop = 0.2 if edge.port.port in "qkv" else 0.1
        colour = "tab:blue" if score >= 0 else "tab:red"
        ax.annotate(
            "",
            xy=(x1 + PORT_OFFSET[edge.port.port], y1 - drop),
            xytext=(x0, y0 + 0.1),
            arrowprops=ARROW | {"lw": 0.6 + 5.0 * abs(score) / (top or 1.0), "color": colour},
        )
    for node in circuit.graph.nodes:
        if node.name not in used and node.kind not in ("head", "logits"):
            continue  # an input no kept edge leaves (e.g. `pos`) would dangle
        x, y = pos[node.name]
        face = "#fde9a9" if node.name in used else "#eeeeee"
        label = node.name + "".join(f"\n{d[node.name]}" for d in (roles, attends) if node.name in d)
        box = {"boxstyle": "round,pad=0.3", "fc": face, "ec": "#888888", "lw": 0.6}
        ax.text(x, y, label, ha="center", va="center", fontsize=10, bbox=box)
        if node.kind == "head":
            for port, dx in PORT_OFFSET.items():
                if port != "in":
                    ax.plot([x + dx], [y - 0.2], "o", ms=3, color="#555555")
                    ax.text(x + dx + 0.07, y - 0.23, port, ha="left", va="top", fontsize=8, color="#333333")
    ax.set_xlim(min(xs) - 1.0, max(xs) + 1.0)
    ax.set_ylim(-1.5, max(y for _, y in pos.values()) + 0.5)
    ax.axis("off")
    ax.set_title(title or f"circuit: {len(kept)} edges, faithfulness {circuit.faithfulness:.2f}", fontsize=9)
    return fig


def graph_view(
    circuit: Circuit, roles: dict[str, str], attends: dict[str, str] | None = None
) -> dict[str, Any]:
    """The interactive circuit graph's data: every node with its place, role and why it attends (`attends`),
    every edge with its score, standard error, 95% interval (None without a standard error), whether it is
    exact and kept."""
    pos, attends = _positions(circuit), attends or {}
    nodes = []
    for n in circuit.graph.nodes:
        x, y = pos[n.name]
        node = {"name": n.name, "kind": n.kind, "x": x, "y": y, "role": roles.get(n.name, "")}
        nodes.append(node | {"attends": attends.get(n.name, "")})
    edges = circuit.to_dict()["edges"]
    for row in edges:
        err = row["stderr"]
        row["lower"], row["upper"] = (None, None) if math.isnan(err) else normal_interval(row["score"], err)
    return {
        "nodes": nodes,
        "edges": edges,
        "port_offset": PORT_OFFSET,
        "method": circuit.method,
        "score_meaning": "drop of the logit difference when the edge alone is ablated",
    }


def edge_table(circuit: Circuit, top: int = 12) -> Table:
    """The `top` edges by |score|: score, stderr, kept or not (EAP, share of the gap, verdict if computed)."""
    order = circuit.scores.abs().argsort(descending=True)[:top].tolist()
    eap, tested = circuit.attribution is not None, circuit.edge_decision is not None
    shares, verdicts = circuit.edge_shares(), circuit.edge_verdicts()
    gap = circuit.intervals.get("gap", (circuit.gap, circuit.gap))
    no_gap = gap[0] <= 0 <= gap[1]  # a share of a gap whose interval holds 0 is not measurable
    rows = []
    for i in order:
        row = [circuit.graph.edges[i].name, float(circuit.scores[i]), float(circuit.stderr[i])]
        if tested:
            row += [
                "not measurable" if no_gap else float(shares[key][i]) for key in ("share", "lower", "upper")
            ] + [
                verdicts[i] + (", kept jointly" if circuit.joint is not None and circuit.joint[i] else ""),
            ]
        else:
            row.append("yes" if circuit.kept[i] else "no")
        rows.append(row + ([float(circuit.attribution[i])] if eap else []))
    headers = ["edge", "score", "stderr"]
    headers += ["share", "share lower", "share upper", "decision"] if tested else ["in circuit"]
    headers += ["EAP"] if eap else []
    what = "score = metric drop when the edge alone is ablated"
    return Table(headers, rows, f"Strongest edges (of {len(circuit.graph.edges)}); {what}")


def selection_words(circuit: Circuit) -> str:
    """How the circuit's edges were chosen, in words: the share test's counts, the threshold or the prefix."""
    if circuit.edge_decision is not None:
        counts = Counter(circuit.edge_verdicts())
        how = (
            f"each edge in when the corrected interval of its share of the gap lies outside "
            f"(-{circuit.threshold}, {circuit.threshold}), over {circuit.edge_decision.n} prompts: "
            + ", ".join(f"{counts[v]} {v}" for v in ("in", "out", "undecided", "untested") if counts[v])
        )
        joint = 0 if circuit.joint is None else int(circuit.joint.sum())
        if joint:
            band = SELECTION_BAND
            how += (
                f"; {joint} more kept jointly (removing them takes the faithfulness of what remains out of "
                f"[{band.lower}, {band.upper}] on those prompts)"
            )
    elif circuit.threshold is not None:
        how = f"every edge with |score| >= {circuit.threshold} x |gap|"
    else:
        how = f"shortest |score| prefix with faithfulness >= {circuit.target}"
        if circuit.pruning:
            search = circuit.pruning
            how += f", {search['search']}: {search['evaluations']} circuit evaluations"
    return how


def left_out_lines(circuit: Circuit, roles: dict[str, str] | None = None) -> list[str]:
    """One line per head the role step names that the circuit leaves out, with its measured reason."""
    roles = roles or {}
    return [
        f"Roles and circuit disagree: {h.head}"
        + (f" ({roles[h.head]})" if h.head in roles else "")
        + f" is named by the role step but not in the circuit: {h.reason()}."
        for h in circuit.left_out
    ]


def summary_lines(circuit: Circuit, source: str, roles: dict[str, str] | None = None) -> list[str]:
    """The section's findings in words: pair, ablation, method, circuit, measures, verdict, and the named
    heads (`roles`) the circuit leaves out."""
    v, rule, ci = circuit.values, CONFIDENCE, circuit.intervals
    kept = ", ".join(circuit.edge_names()) or "none"
    how = selection_words(circuit)
    unreadable = circuit.unreadable()

    def interval(name: str) -> str:
        return f" [{ci[name][0]:.3f}, {ci[name][1]:.3f}]" if name in ci else ""

    def ratio(name: str) -> str:
        if unreadable.get(name):
            return f"{name}: not measurable here ({unreadable[name]})"
        return f"{name} {getattr(circuit, name):.3f}{interval(name)}"

    faithful = f"faithful {circuit.criteria()['faithful']}: interval vs [{rule['min_faithfulness']}, "
    faithful += f"{rule['max_faithfulness']}]"
    if circuit.overshoots():
        faithful += (
            " (the circuit overshoots: alone it does more than the full model, so something outside it "
            "suppresses the behaviour)"
        )

    crit = circuit.criteria()
    check = circuit.attribution_check
    agreed = []
    if check is not None:
        agreed.append(
            f"Estimate vs exact on the {check['cells']} exactly scored edges: "
            f"Pearson {check['pearson']:.2f}, Spearman {check['spearman']:.2f}, "
            f"top-{check['k']} overlap {check['top_k']:.2f} "
            f"({'trusted' if check['trusted'] else 'not trusted'}: Pearson vs >= {check['threshold']})."
        )
    return [
        (
            f"Pair: {source}; "
            + (
                f"{circuit.discovery_n} prompts decided the edges, {circuit.n} others judged the circuit; "
                if circuit.held_out
                else f"{circuit.n} prompts, which both scored the edges and judged the circuit; "
            )
            + "metric: logit difference (clean - corrupted answer). "
            f"Ablation: {circuit.ablation} ({ABLATION_TEXT[circuit.ablation]}). Scores: {circuit.method}."
        ),
        f"Circuit: {int(circuit.kept.sum())} of {len(circuit.graph.edges)} edges ({how}): {kept}.",
        (
            f"{ratio('faithfulness').capitalize()} (circuit {v['circuit']:.3f}, "
            f"full model {v['full']:.3f}, every edge ablated {v['empty']:.3f}); {ratio('completeness')} "
            f"(circuit's edges ablated: {v['complement']:.3f}); gap {circuit.gap:.3f}{interval('gap')}. "
            "Brackets: marginal 95% interval over the prompts; the verdict is judged on intervals corrected "
            "for the three criteria and every look (docs/decisions.md)."
        ),
        (
            f"Confident: {circuit.verdict} (behaviour {crit['behaviour']}: |gap| interval vs >= "
            f"{rule['min_gap']}; {faithful}; "
            f"complete {crit['complete']}: interval vs >= {rule['min_faithfulness']}; "
            f"sparse {crit['sparse']}: at most {rule['max_edge_fraction']:.0%} of the edges)"
            f"{'; ' + circuit.undecided() if circuit.undecided() else ''}"
            f"{'; ' + circuit.undecided_edges() if circuit.undecided_edges() else ''}. "
            f"Time {circuit.timings['total']:.2f} s."
        ),
        *left_out_lines(circuit, roles),
        *agreed,
    ]


ROBUSTNESS_WORDS = (
    (
        "CPR: area under the faithfulness f(k) of the top-k edges by |score|, over the fraction of edges "
        "kept (trapezoid rule; MIB, Mueller et al. 2025); 1 at best."
    ),
    "CMD: area under |1 - f(k)| over the same axis; 0 at best.",
)
"""The definitions printed under the robustness table, one line each."""


def robustness_table(result: CircuitRobustness) -> Table:
    """The circuit's verdict under each ablation: faithfulness, completeness, CPR and CMD, each with its 95%
    percentile bootstrap interval over the held-out prompts."""
    rows = [
        [a.ablation, a.verdict]
        + [f"{a.measures[k][0]:.3f} {format_interval(*a.measures[k][1:])}" for k in MEASURES[1:]]
        for a in result.per_ablation
    ]
    caption = (
        f"Verdict under each ablation ({result.verdict}), on {result.n} held-out prompts; brackets: 95% "
        f"percentile bootstrap interval; the circuit keeps {result.circuit_size} of {result.n_edges} edges"
    )
    return Table(["ablation", "verdict", "faithfulness", "completeness", "CPR", "CMD"], rows, caption)


def edges_section(ctx: Any) -> Section:
    """Edge-level circuit of the report's model: discovered, drawn and measured (a report section)."""
    s = Section("edges", "Circuit: edges between components")
    try:
        build_graph(ctx.model)  # the reason to skip, before any data is drawn
        roles = {h.name: h.role for h in ctx.roles.heads}
        named = [name for name, role in roles.items() if role != "none"]
        circuit, source = decided_circuit(
            ctx.model, ctx.task, seed=ctx.seed, ablation="mean", heads=named, memory_mb=ctx.memory_mb
        )
    except (MechmemError, NotImplementedError) as exc:
        s.skipped = str(exc)
        return s
    s.findings = circuit.to_dict()
    s.findings["pair"] = source
    s.lines += summary_lines(circuit, source, roles)
    pair, _ = circuit_prompts(ctx.model, ctx.task, CIRCUIT_POLICY.first, ctx.seed)  # first round's prompts
    fit = prompt_fit(ctx.model, ctx.task, pair, generator=ctx.generator(12), source=source)
    s.findings["prompt_fit"] = fit.to_dict()
    s.lines.append(fit.message)
    s.tables.append(edge_table(circuit))
    attends = explain_heads(s, ctx, circuit, roles)
    s.add_figure("graph", plot_circuit(circuit, roles, attends=attends))
    n = max(2, min(ctx.n_samples, CIRCUIT_POLICY.first))  # the report's sample size, at most one round
    robust = circuit_robustness(ctx.model, ctx.task, circuit, n=n, seed=ctx.seed, memory_mb=ctx.memory_mb)
    s.findings["robustness"] = record = robust.to_dict()
    s.findings["timings_s"] = s.findings["timings_s"] | {"robustness": sum(record.pop("timings_s").values())}
    s.lines += [f"Robustness to the ablation and the circuit's size: {robust.verdict}.", *ROBUSTNESS_WORDS]
    s.tables.append(robustness_table(robust))
    s.add_figure("robustness", plot_robustness(robust))
    s.interactive["graph"] = graph_view(circuit, roles, attends)
    return s


def explain_heads(s: Section, ctx: Any, circuit: Circuit, roles: dict[str, str]) -> dict[str, str]:
    """Add why each of the circuit's heads attends (`why_attend`) to `s`: its table and findings["attends"];
    returns head -> the graph's caption (empty when QK attribution does not apply)."""
    heads = [h for h in circuit.heads() if h in roles]
    if not heads:
        return {}
    if reason := qk_unsupported(ctx.model):
        s.lines.append(f"Why the heads attend: not measured ({reason}).")
        return {}
    n = max(2, min(ctx.n_samples, CIRCUIT_POLICY.first))
    reasons, result = head_reasons(ctx.model, ctx.task, heads, roles, n=n, seed=ctx.seed)
    s.findings["attends"] = {"convention": result.convention, "heads": [r.to_dict() for r in reasons]}
    s.tables.append(reason_table(reasons, result))
    return {r.head: r.label for r in reasons}
