"""The circuit record (`Circuit`: every edge's score, the kept edges, the criteria and their verdicts), the
confidence rule it is judged by, and its edges as a data frame.
"""

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechmem.analysis.circuits.edges import Graph
from mechmem.analysis.frames import short_repr
from mechmem.analysis.stats import (
    EDGE_SHARE,
    MIN_GAP,
    VERDICTS,
    Band,
    Decision,
    combine,
    covers,
    normal_interval,
    verdict,
)

CONFIDENCE = {"min_gap": MIN_GAP, "min_faithfulness": 0.8, "max_faithfulness": 1.25, "max_edge_fraction": 0.5}
"""The rule for a confident circuit, judged on intervals: faithfulness inside [min_faithfulness,
max_faithfulness] (1.25 = 1 / 0.8), completeness at least min_faithfulness."""
CRITERIA = {"behaviour": "gap", "faithful": "faithfulness", "complete": "completeness"}
"""The measured criteria of `CONFIDENCE` and the family of the sequential decision each is judged on."""
THRESHOLDS = {
    "gap": CONFIDENCE["min_gap"],
    "faithfulness": Band(CONFIDENCE["min_faithfulness"], CONFIDENCE["max_faithfulness"]),
    "completeness": CONFIDENCE["min_faithfulness"],
}
"""Each family's threshold (the gap judged on |gap|, faithfulness on a band)."""
MAX_RATIO_WIDTH = 1.0
"""A ratio whose marginal 95% interval is wider than this is printed as not measurable (docs/decisions.md)."""


def not_measurable(
    interval: tuple[float, float] | None, denominator: tuple[float, float] | None = None
) -> str:
    """Why a ratio with this marginal 95% `interval` (and its `denominator`'s) cannot be read, or "" when it
    can (docs/decisions.md, "Not measurable here")."""
    if denominator is not None and covers(*denominator):
        return f"the gap's 95% interval [{denominator[0]:.3g}, {denominator[1]:.3g}] includes 0"
    if interval is None or not all(map(math.isfinite, interval)):
        return "no interval (too few prompts)"
    if interval[1] - interval[0] > MAX_RATIO_WIDTH:
        return f"its 95% interval [{interval[0]:.3g}, {interval[1]:.3g}] is wider than {MAX_RATIO_WIDTH}"
    return ""


def band_verdict(lower: float, upper: float, band: Band) -> str:
    """ "yes" when [lower, upper] lies inside the band, "no" when wholly outside it, else "undecided"."""
    if band.lower <= lower and upper <= band.upper:
        return "yes"
    if upper < band.lower or lower > band.upper:
        return "no"
    return "undecided"


@dataclass(frozen=True)
class LeftOut:
    """A named head whose outgoing edges are all out of the circuit, measured on the criteria stage's prompts
    (docs/decisions.md, "Named heads the circuit leaves out")."""

    head: str
    """The head's node name (`L{layer}H{head}`)."""
    edges: int
    """Its outgoing edges in the graph."""
    share: tuple[float, float, float]
    """(value, lower, upper): their joint share of the gap in the full model, marginal 95% interval."""
    added: tuple[float, float, float]
    """(value, lower, upper): the faithfulness of the circuit with them minus the circuit's."""

    def reason(self) -> str:
        """The measured reason in words."""
        share, added = self.share, self.added
        words = (
            f"its {self.edges} outgoing edges jointly carry {share[0]:.3f} [{share[1]:.3f}, {share[2]:.3f}] "
            f"of the gap and add {added[0]:+.3f} [{added[1]:+.3f}, {added[2]:+.3f}] to the circuit's "
            "faithfulness"
        )
        small_share, small_added = (x[1] > -EDGE_SHARE and x[2] < EDGE_SHARE for x in (share, added))
        if small_share and small_added:
            return words + (
                f" (both within {EDGE_SHARE} of 0: idle on these prompts, or a backup of heads the circuit "
                "keeps)"
            )
        if small_share:
            return words + f" (removing it costs the full model less than {EDGE_SHARE} of the gap)"
        if small_added:
            return words + " (the circuit does its job without it: redundant with what is kept)"
        return words

    def to_dict(self) -> dict[str, Any]:
        return {"head": self.head, "edges": self.edges, "share": list(self.share), "added": list(self.added)}


def edge_frame(
    scores: Tensor, stderr: Tensor, exact: Tensor, attribution: Tensor | None, graph: Graph | None = None
) -> Any:
    """One row per edge: `edge` (its index), with a graph `name`, `sender`, `receiver`, `port`; then `value`
    (the score), `stderr`, `lower` / `upper` (score -+ 1.96 stderr), `exact` and `attribution` (NaN when none
    was computed)."""
    import pandas as pd

    columns: dict[str, Any] = {"edge": range(len(scores))}
    if graph is not None:
        rows = [e.to_dict() for e in graph.edges]
        columns |= {k: [row[k] for row in rows] for k in ("name", "sender", "receiver", "port")}
    scores, stderr = scores.detach().float().cpu(), stderr.detach().float().cpu()
    estimate = torch.full_like(scores, math.nan) if attribution is None else attribution.detach().float()
    lower, upper = normal_interval(scores, stderr)
    named = {"value": scores, "stderr": stderr, "lower": lower, "upper": upper, "exact": exact}
    columns |= {k: v.cpu().numpy() for k, v in (named | {"attribution": estimate}).items()}
    return pd.DataFrame(columns)


@dataclass
class Circuit:
    """Every edge's score, the kept edges, and the circuit's faithfulness and completeness."""

    graph: Graph
    scores: Float[Tensor, " edge"]
    """metric(full) - metric(edge ablated), mean over prompts (exact, or EAP where `exact` is False)."""
    stderr: Float[Tensor, " edge"]
    """Standard error of the score over prompts (`ScoredEdges.stderr`)."""
    exact: Bool[Tensor, " edge"]
    kept: Bool[Tensor, " edge"]
    """The circuit."""
    values: dict[str, float]
    """Metric of the full model, of every edge ablated ("empty"), of the circuit, of the full model minus
    it ("complement")."""
    method: str
    ablation: str
    metric: str = "logit_diff"
    n: int = 0
    attribution: Float[Tensor, " edge"] | None = None
    target: float | None = None
    threshold: float | None = None
    timings: dict[str, float] = field(default_factory=dict)
    attribution_check: dict[str, Any] | None = None
    """Agreement of the EAP estimate with the exact scores where both exist (`attribution.judge`)."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Marginal 95% intervals over prompts of "gap", "faithfulness", "completeness" (for reading)."""
    decision: Decision | None = None
    """The sequential decision of the measured criteria (families "gap", "faithfulness", "completeness")."""
    discovery_n: int = 0
    """Prompts the edges were scored and pruned on."""
    held_out: bool = False
    """Whether the verdict was judged on prompts other than those that chose the edges."""
    prompt_values: Tensor | None = None
    """[4 prompt]: per-prompt metric of the full model, every edge ablated, the circuit and its complement,
    on the prompts the verdict used."""
    pruning: dict[str, Any] = field(default_factory=dict)
    """How the kept prefix was searched ("search") and the circuit evaluations it took ("evaluations")."""
    edge_decision: Decision | None = None
    """The sequential test of every tested edge's share of the gap (family "edge", one test per edge where
    `exact`), when the edges were decided by the evidence."""
    joint: Bool[Tensor, " edge"] | None = None
    """Edges kept only because removing them takes what remains out of the selection band
    (`decided.select_edges`); None for a circuit chosen otherwise."""
    left_out: tuple[LeftOut, ...] = ()
    """The named heads (`decided_circuit(heads=...)`) the circuit leaves out, each with its reason."""

    def __post_init__(self) -> None:
        n = len(self.graph.edges)
        for name in ("scores", "stderr", "exact", "kept"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have one entry per edge ({n})")

    @property
    def gap(self) -> float:
        return self.values["full"] - self.values["empty"]

    def _fraction(self, value: float) -> float:
        return value / self.gap if self.gap else math.nan

    @property
    def faithfulness(self) -> float:
        return self._fraction(self.values["circuit"] - self.values["empty"])

    @property
    def completeness(self) -> float:
        return self._fraction(self.values["full"] - self.values["complement"])

    def criteria(self) -> dict[str, str]:
        """Each condition of `CONFIDENCE`: "yes", "no" or "undecided" (from the sequential decision, or the
        intervals without one)."""
        rule = CONFIDENCE
        if self.decision is not None:
            v = {k: VERDICTS[int(self.decision.families[f].code)] for k, f in CRITERIA.items()}
        else:
            gap = self.intervals.get("gap", (self.gap, self.gap))
            low_gap = 0.0 if gap[0] <= 0 <= gap[1] else min(abs(gap[0]), abs(gap[1]))
            faith = self.intervals.get("faithfulness", (self.faithfulness, self.faithfulness))
            complete = self.intervals.get("completeness", (self.completeness, self.completeness))
            v = {
                "behaviour": verdict(low_gap, max(abs(gap[0]), abs(gap[1])), rule["min_gap"]),
                "faithful": band_verdict(*faith, THRESHOLDS["faithfulness"]),
                "complete": verdict(complete[0], complete[1], rule["min_faithfulness"]),
            }
        v["sparse"] = (
            "yes" if 0 < int(self.kept.sum()) <= rule["max_edge_fraction"] * len(self.kept) else "no"
        )
        return {k: v[k] for k in ("behaviour", "faithful", "sparse", "complete")}

    @property
    def verdict(self) -> str:
        """`stats.combine` of the criteria: "yes" (confident), "no" or "undecided"."""
        return combine(list(self.criteria().values()))

    @property
    def confident(self) -> bool:
        return self.verdict == "yes"

    def overshoots(self) -> bool:
        """Whether the circuit's faithfulness interval lies wholly above the band."""
        upper = CONFIDENCE["max_faithfulness"]
        if self.decision is not None:
            return bool(self.decision.families["faithfulness"].corrected_lower > upper)
        return self.intervals.get("faithfulness", (self.faithfulness,))[0] > upper

    def unreadable(self) -> dict[str, str]:
        """`not_measurable` of "faithfulness" and "completeness"."""
        gap = self.intervals.get("gap")
        return {k: not_measurable(self.intervals.get(k), gap) for k in ("faithfulness", "completeness")}

    def heads(self, which: Bool[Tensor, " edge"] | None = None) -> list[str]:
        """The heads with an outgoing edge in `which` (default: the circuit), in graph order."""
        which = self.kept if which is None else which
        names = [
            e.sender.name for e, k in zip(self.graph.edges, which.tolist()) if k and e.sender.kind == "head"
        ]
        return list(dict.fromkeys(names))

    def undecided(self) -> str:
        """Why the verdict is undecided and the prompts that would decide it, in words ("" when decided)."""
        if self.verdict != "undecided" or self.decision is None:
            return ""
        fam = self.decision.families
        needed = [float(fam[f].n_needed) for k, f in CRITERIA.items() if self.criteria()[k] == "undecided"]
        if not needed:
            return ""
        most = max(needed)
        about = f"about {int(most)} prompts would decide it" if math.isfinite(most) else "no number would"
        if math.isnan(most):
            about = f"too few prompts for an interval (at least {self.decision.policy.min_units})"
        where = "at budget" if self.decision.stopped == "budget" else "at"
        return f"undecided {where} {self.decision.n} prompts, {about}"

    def edge_names(self, which: Bool[Tensor, " edge"] | None = None) -> list[str]:
        which = self.kept if which is None else which
        return [e.name for e, k in zip(self.graph.edges, which.tolist()) if k]

    def edge_verdicts(self) -> list[str]:
        """Per edge: "in", "out" or "undecided" by its share test, or "untested"; without tests, "in" where
        kept, else "out"."""
        if self.edge_decision is None:
            return ["in" if k else "out" for k in self.kept.tolist()]
        words = {"yes": "in", "no": "out", "undecided": "undecided"}
        tested = iter(self.edge_decision["edge"].verdicts())
        return [words[next(tested)] if t else "untested" for t in self.exact.tolist()]

    def edge_shares(self) -> dict[str, Tensor]:
        """Per edge, from its share test: "share", "lower", "upper" (marginal 95%), "corrected_lower",
        "corrected_upper" and "n_needed" (NaN where untested)."""
        n = len(self.graph.edges)
        keys = ("share", "lower", "upper", "corrected_lower", "corrected_upper", "n_needed")
        out = {k: torch.full((n,), math.nan, dtype=torch.float64) for k in keys}
        if self.edge_decision is not None:
            family, where = self.edge_decision["edge"], self.exact.nonzero().flatten()
            for key in keys:
                out[key][where] = getattr(family, "mean" if key == "share" else key).double()
        return out

    def undecided_edges(self) -> str:
        """The undecided edges in words ("" when none): how many, and the prompts that would decide them."""
        verdicts = self.edge_verdicts()
        open_ = [i for i, v in enumerate(verdicts) if v == "undecided"]
        if not open_ or self.edge_decision is None:
            return ""
        most = float(self.edge_shares()["n_needed"][open_].max())
        about = (
            f"about {int(most)} would decide them" if math.isfinite(most) else "no number would decide all"
        )
        if self.edge_decision.stopped == "no behaviour":  # the stage stopped: docs/decisions.md
            gap = self.edge_decision.info.get("gap", {})
            low, high = gap.get("corrected_lower"), gap.get("corrected_upper")
            shown = "" if low is None or high is None else f" (corrected interval [{low:.3g}, {high:.3g}])"
            about = (
                "sampling stopped: the edge stage's gap was shown smaller than "
                f"{CONFIDENCE['min_gap']} in size{shown}, no share of it to attribute"
            )
        return (
            f"{len(open_)} edge(s) undecided at {self.edge_decision.n} prompts "
            f"({', '.join(self.graph.edges[i].name for i in open_)}); {about}"
        )

    def to_dataframe(self) -> Any:
        """One row per edge (`edge_frame`) plus `kept`, `joint`, `decision` (`edge_verdicts`) and the share
        test's `share`, `share_lower`, `share_upper` and `n_needed` (`edge_shares`)."""
        frame = edge_frame(self.scores, self.stderr, self.exact, self.attribution, self.graph)
        frame["kept"] = self.kept.cpu().numpy()
        frame["joint"] = self._joint().cpu().numpy()
        frame["decision"] = self.edge_verdicts()
        shares = self.edge_shares()
        for key in ("share", "lower", "upper", "n_needed"):
            frame[key if key in ("share", "n_needed") else f"share_{key}"] = shares[key].numpy()
        return frame

    def _joint(self) -> Bool[Tensor, " edge"]:
        return self.joint if self.joint is not None else torch.zeros_like(self.kept)

    def __repr__(self) -> str:
        return short_repr(
            "Circuit",
            f"{int(self.kept.sum())} of {len(self.kept)} edges kept",
            f"{self.ablation} ablation, {self.metric}",
            *(
                f"{k} not measurable ({why})" if why else f"{k} {getattr(self, k):.3f}"
                for k, why in self.unreadable().items()
            ),
            f"verdict {self.verdict}" + (" (overshoots)" if self.overshoots() else ""),
        )

    def to_dict(self) -> dict[str, Any]:
        edges, verdicts, shares, joint = [], self.edge_verdicts(), self.edge_shares(), self._joint()

        def finite(x: Tensor) -> float | None:
            return float(x) if math.isfinite(float(x)) else None

        for i, e in enumerate(self.graph.edges):
            row = e.to_dict() | {
                "score": float(self.scores[i]),
                "stderr": float(self.stderr[i]),
                "exact": bool(self.exact[i]),
                "kept": bool(self.kept[i]),
                "joint": bool(joint[i]),
                "decision": verdicts[i],
            }
            if self.edge_decision is not None and self.exact[i]:
                row |= {
                    k if k in ("share", "n_needed") else f"share_{k}": finite(v[i]) for k, v in shares.items()
                }
            if self.attribution is not None:
                row["attribution"] = float(self.attribution[i])
            edges.append(row)
        return {
            **self.graph.to_dict(),
            "edges": edges,
            "circuit": self.edge_names(),
            "heads": self.heads(),
            "kept_jointly": self.edge_names(self.joint) if self.joint is not None else [],
            "left_out": [h.to_dict() | {"reason": h.reason()} for h in self.left_out],
            "not_measurable": {k: why for k, why in self.unreadable().items() if why},
            "overshoots": self.overshoots(),
            **{k: getattr(self, k) for k in ("method", "ablation", "metric", "n", "values", "faithfulness")},
            **{k: getattr(self, k) for k in ("completeness", "target", "threshold", "confident", "verdict")},
            "criteria": self.criteria(),
            "intervals": self.intervals,
            "interval": "marginal 95%: value -+ 1.96 delta-method standard errors over prompts",
            "decision": self.decision.to_dict() if self.decision is not None else None,
            "discovery_n": self.discovery_n,
            "held_out": self.held_out,
            "undecided": self.undecided(),
            "undecided_edges": self.undecided_edges(),
            "edge_decision": self.edge_decision.to_dict() if self.edge_decision is not None else None,
            "confidence_rule": CONFIDENCE,
            "timings_s": self.timings,
            "attribution_check": self.attribution_check,
            "pruning": self.pruning,
        }
