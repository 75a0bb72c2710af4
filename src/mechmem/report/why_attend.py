"""Why each head of the report's circuit attends where it does: its top (query source x key source) terms of
the attention score (`qk_attribution`) on the sites of its role, and whether exact path patching of its k
edges ranks the key-side sources the same way (`qk_patching_agreement`).
"""

from dataclasses import dataclass
from typing import Any

from mechmem.analysis.qk import INTERVAL, QKAgreement, QKAttribution, qk_attribution, qk_patching_agreement
from mechmem.analysis.stats import format_interval
from mechmem.report.document import Table

ROLE_SITES = {
    "induction": "induction",
    "previous-token": "previous_token",
    "recall": "recall",
    "elimination": "elimination",
}
"""The site set a head of each role is read on; any other head is read on the first site set."""


@dataclass(frozen=True)
class HeadReason:
    """One circuit head: where it was read, its top term and each side's top source, with 95% intervals."""

    head: str
    role: str
    sites: str
    query_source: str
    key_source: str
    contribution: tuple[float, float, float]
    """The top term's mean, lower and upper end."""
    key_top: str
    query_top: str
    agreement: QKAgreement | None
    """Key side against path patching of the head's k edges (None where the head has no k edge to patch)."""
    note: str = ""
    """Where the sites' prompts come from when not from the task's data."""

    @property
    def label(self) -> str:
        """The graph's short caption: the top term, query source x key source."""
        return f"{self.query_source} x {self.key_source}"

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "agreement"}
        agreement = self.agreement
        out["patching"] = None if agreement is None else agreement.to_dict()
        return out


def side_top(result: QKAttribution, head: str, sites: str, side: str) -> str:
    """The source with the largest absolute mean on `side` ("key" or "query") of `head` on `sites`."""
    entry = result.entry(head, sites)
    return entry.sources[int(entry.interval(side)[0].abs().argmax())]


def head_reasons(
    model: Any, task: Any, heads: list[str], roles: dict[str, str], *, n: int, seed: int
) -> tuple[list[HeadReason], QKAttribution]:
    """The reasons of `heads` (their roles in `roles`), read on `n` prompts per site set drawn with `seed`."""
    result = qk_attribution(model, task, heads=heads, n=n, seed=seed)
    agreement = {
        a.head: a for a in qk_patching_agreement(model, task, heads, n=n, seed=seed) if a.side == "key"
    }
    available = list(dict.fromkeys(e.sites for e in result.entries))
    reasons = []
    for head in heads:
        role = roles.get(head, "none")
        sites = ROLE_SITES.get(role) if ROLE_SITES.get(role) in available else available[0]
        best = result.top(head, 1, sites)[0]
        tops = (side_top(result, head, sites, side) for side in ("key", "query"))
        term = (best.query_source, best.key_source, (best.contribution, best.lower, best.upper))
        note = result.entry(head, sites).note
        reasons.append(HeadReason(head, role, sites, *term, *tops, agreement.get(head), note))
    return reasons, result


def reason_table(reasons: list[HeadReason], result: QKAttribution) -> Table:
    """One row per circuit head: role, sites, top term with its interval, each side's top source, and the
    key side's agreement with path patching."""
    rows = []
    for r in reasons:
        a = r.agreement
        spearman = "n/a" if a is None or a.spearman != a.spearman else f"{a.spearman:.2f}"
        agrees = "n/a" if a is None or len(a.sources) < 2 else ("yes" if a.top_agrees else "no")
        mean, low, high = r.contribution
        rows.append(
            [
                r.head,
                r.role,
                r.sites + (f" ({r.note})" if r.note else ""),
                r.label,
                f"{mean:.3f} {format_interval(low, high)}",
            ]
            + [r.key_top, r.query_top, agrees, spearman]
        )
    caption = (
        "Why each circuit head attends: the largest term of its attention score (query source x key source) "
        f"on its role's sites, {result.convention}; {INTERVAL}; patching: whether exact path patching of the "
        "head's k edges (zero ablation) ranks the same key-side source first, and Spearman's rank correlation"
    )
    headers = ["head", "role", "sites", "top term", "contribution", "key side", "query side"]
    return Table([*headers, "patching agrees", "Spearman"], rows, caption)
