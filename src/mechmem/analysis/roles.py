"""Head roles: what each attention head does, from measured evidence and fixed thresholds, by one classifier
(`classify_heads`; `head_roles` measures and classifies in one call).

Task roles come from the task's role probes (`Task.role_probes`, measured and decided in
`mechmem.analysis.task_roles`). A head's *score* for role r is max(transfer, via_mlp); its *share* is its part
of the scoring heads' summed score (0 when that sum is below `min_score`: the role is absent). A head gets r
when, on corrected intervals, (1) its score is at least `min_score`, (2) its share of r leads its share of
every other role by at least `share_margin`, and (3) its attention on r's keys is at least `task_attention`
(docs/decisions.md, "Task roles"). When (1) holds for two roles and every role fails, the head is "shared".
A head whose task roles stay undecided at the budget falls back to its attention pattern (or "none") and says
so (`HeadRole.fallback`, `undecided`). Evidence built by hand with point values is judged by the same three
conditions on the point values. Shares matter because a role can be carried jointly: copying one head alone
may move the answer only partly, yet its share of the transfer is the largest.

Attention-pattern roles (previous-token, induction, duplicate-token) follow the role rule of docs/analyses.md
("Role rule"): probes [r, r] at every half-length 4, 8, 16, ... the context allows, plus the task's data; a
head whose detection score's corrected lower end is at least `attention` on any probe has the pattern, and so
does one that clears it for at least `heads.MIN_TOKENS` query tokens. A task role takes precedence; a head
with no evidence above threshold is "none".

The thresholds were fixed on development seeds (permutation task2-quick and task1-quick, seed 7) before the
five-seed acceptance runs (seeds 0-4). Caveats: transfer assumes the counterfactual leaves the other roles'
information unchanged; a head that others compensate for looks less important under any single-head test.
"""

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis import heads as head_detection
from mechmem.analysis.frames import concat, short_repr
from mechmem.analysis.sequential import decide
from mechmem.analysis.stats import HEAD_POLICY, NO, UNDECIDED, YES, Decision, DecisionPolicy, RatioMoments
from mechmem.analysis.task_roles import decide_task_roles
from mechmem.config import ConfigMixin
from mechmem.models.checks import check_count, check_instance, check_model, check_number, check_seed
from mechmem.models.parts import Head, model_device
from mechmem.tasks.base import check_task

ROLE_COLUMNS = ["layer", "head", "role", "fallback", "undecided", "evidence", "value"]
"""The columns of a role's `to_dataframe`."""
PATTERN_ROLES = {
    "previous_token": "previous-token",
    "induction": "induction",
    "duplicate_token": "duplicate-token",
}


@dataclass(frozen=True)
class RoleThresholds(ConfigMixin):
    """The evidence a role needs; every number here is printed next to the measurements it judges."""

    attention: float = 0.5
    """Min corrected lower end of a detection score (attention mass on the pattern's keys), on any probe."""
    min_score: float = 0.1
    """Min task-role score, max(transfer, via_mlp), in units of p(answer)."""
    share_margin: float = 0.25
    """The head's share of its role's score must exceed its share of every other task role by this much."""
    task_attention: float = 0.4
    """Min attention from the answer query on the role's keys."""
    mlp_drop: float = 0.05
    """Min drop in mean p(answer) under mean ablation of a layer's MLP, to name it as contributing."""
    neuron_share: float = 0.5
    """Key neurons: the fewest whose direct effects make up this share of the MLP's positive effect."""
    max_key_neurons: int = 5
    """At most this many key neurons are listed."""

    def __post_init__(self) -> None:
        for name in ("attention", "min_score", "share_margin", "task_attention", "mlp_drop", "neuron_share"):
            check_number(name, getattr(self, name))
        check_count("max_key_neurons", self.max_key_neurons, minimum=0)


@dataclass
class HeadRole:
    """A head's role, the numbers behind it, and why."""

    layer: int
    head: int
    role: str
    evidence: dict[str, float]
    notes: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    """The roles left undecided at the budget that could still name the head (empty: the name is decided)."""

    @property
    def name(self) -> str:
        return Head(self.layer, self.head).name

    def task(self, role: str) -> "RoleEvidence":
        """The head's evidence for task role `role`."""
        return RoleEvidence.read(self.evidence, role)

    @property
    def fallback(self) -> bool:
        """True when the head is named by its attention pattern because its task roles stayed undecided."""
        return self.role in PATTERN_ROLES.values() and bool(self.undecided)

    @property
    def label(self) -> str:
        """The name with what it rests on: "L1H1 recall", "L1H0 none (undecided: induction)" or "L0H0
        duplicate-token (fell back to its attention pattern: task roles recall, elimination undecided)"."""
        if self.fallback:
            return f"{self.name} {self.role} (fell back to its attention pattern: task roles " + (
                f"{', '.join(self.undecided)} undecided)"
            )
        if self.undecided:
            return f"{self.name} {self.role} (undecided: {', '.join(self.undecided)})"
        return f"{self.name} {self.role}"

    def to_dataframe(self) -> Any:
        """One row per evidence quantity of the head (`ROLE_COLUMNS`): `layer`, `head`, `role`, `fallback`,
        `undecided` (comma-separated), `evidence` (e.g. "induction_lower", "recall_transfer") and `value`."""
        import pandas as pd

        head = [self.layer, self.head, self.role, self.fallback, ", ".join(self.undecided)]
        rows = [[*head, k, float(v)] for k, v in self.evidence.items()]
        return pd.DataFrame(rows, columns=ROLE_COLUMNS)

    def __repr__(self) -> str:
        return short_repr("HeadRole", self.label, f"{len(self.evidence)} evidence values")

    def to_dict(self) -> dict[str, Any]:
        keys = ("layer", "head", "role", "fallback", "undecided", "evidence", "notes")
        return {k: getattr(self, k) for k in keys}


@dataclass
class RoleResult:
    """The role of every head, the task roles looked for, and the thresholds used."""

    heads: list[HeadRole]
    task_roles: tuple[str, ...]
    thresholds: RoleThresholds
    info: dict[str, Any] = field(default_factory=dict)
    """How the evidence was measured (sample size, seed, data)."""

    @property
    def labels(self) -> list[list[str]]:
        """labels[layer][head]."""
        n_layers = 1 + max((h.layer for h in self.heads), default=-1)
        return [[h.role for h in self.heads if h.layer == layer] for layer in range(n_layers)]

    def heads_with(self, role: str) -> list[tuple[int, int]]:
        """(layer, head) of every head with `role`."""
        return [(h.layer, h.head) for h in self.heads if h.role == role]

    def evidence(self, key: str) -> Float[Tensor, "layer head"]:
        """One evidence quantity for every head, [layer head] (NaN where not measured)."""
        labels = self.labels
        out = torch.full((len(labels), max(map(len, labels), default=0)), float("nan"))
        for h in self.heads:
            out[h.layer, h.head] = h.evidence.get(key, float("nan"))
        return out

    def summary(self) -> str:
        """The named or undecided heads' `label`s, e.g. "L0H2 previous-token, L1H1 induction"."""
        if not self.heads:
            return "no attention heads analysed"
        named = [h.label for h in self.heads if h.role != "none" or h.undecided]
        return ", ".join(named) if named else "no head roles found"

    def to_dataframe(self) -> Any:
        """Every head's rows (`HeadRole.to_dataframe`, columns `ROLE_COLUMNS`), head after head."""
        return concat([h.to_dataframe() for h in self.heads], ROLE_COLUMNS)

    def __repr__(self) -> str:
        summary = self.summary()
        return short_repr(
            "RoleResult",
            f"{len(self.heads)} heads",
            f"task roles {', '.join(self.task_roles)}" if self.task_roles else "pattern roles only",
            summary if len(summary) <= 160 else summary[:157] + "...",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary(),
            "labels": self.labels,
            "task_roles": list(self.task_roles),
            "heads": [h.to_dict() for h in self.heads],
            "thresholds": self.thresholds.to_dict(),
            **self.info,
        }


# -- measurement ---------------------------------------------------------------------------------------------
@dataclass
class PatternEvidence:
    """Detection evidence over the role rule's probes: summaries [layer head], curves, and their decision."""

    evidence: dict[str, Float[Tensor, "layer head"]]
    """Per pattern p: p (best score over the probes), p_lower (best corrected lower end: what the rule
    judges), p_token_lower (best corrected token-selective lower end, `heads.kth_highest`), p_n_needed
    (sequences per probe that would decide its undecided tests, smallest over the probes; 0: none undecided,
    inf: one sits on the threshold), p_open (1 when the head is not named p but an open test could)."""
    probes: list[str]
    """What each probe is, in the curves' order."""
    curves: dict[str, dict[str, Tensor]]
    """Per pattern, each [probe layer head]: "score", "lower", "upper" (marginal 95%), "corrected_lower",
    "corrected_upper", "token_lower" (corrected)."""
    decision: Decision | None = None
    """Families "overall" [probe pattern layer head] and "token" [random probe pattern layer head token]."""

    @property
    def n(self) -> int:
        """Sequences per probe at the last look (the most any probe was drawn on: `probe_n`)."""
        return self.decision.n if self.decision is not None else 0

    @property
    def probe_n(self) -> list[int]:
        """Per probe, the sequences it was drawn on (it stops once none of its tests can change a name)."""
        if self.decision is None:
            return []
        frozen, n = [f.units for f in self.decision.families.values() if f.units is not None], []
        for i in range(len(self.probes)):
            ends = [float(u[i].max()) for u in frozen if i < len(u)]
            n.append(int(max(ends)) if ends else self.decision.n)
        return n

    def probe_text(self) -> str:
        """The probes with their sequences, e.g. "[r, r], |r| = 8: 64 sequences; task data: 256 sequences"."""
        return "; ".join(f"{p}: {k} sequences" for p, k in zip(self.probes, self.probe_n))

    def rows(self) -> list[list[object]]:
        """Per head and pattern: `LlHh`, the pattern, then "score [lower, upper]" (marginal 95%) per probe."""
        rows: list[list[object]] = []
        for name, curve in self.curves.items():
            for layer, head in itertools.product(*map(range, curve["score"].shape[1:])):
                at = (slice(None), layer, head)
                cells = [
                    f"{float(s):.2f} [{float(lo):.2f}, {float(hi):.2f}]"
                    for s, lo, hi in zip(curve["score"][at], curve["lower"][at], curve["upper"][at])
                ]
                rows.append([str(Head(layer, head)), name, *cells])
        return rows

    def to_dict(self) -> dict[str, Any]:
        out = {
            "probes": self.probes,
            "probe_n": self.probe_n,
            "curves": {p: {k: v.tolist() for k, v in c.items()} for p, c in self.curves.items()},
            "interval": "marginal 95%: score -+ 1.96 delta-method standard errors over sequences",
        }
        if self.decision is not None:
            out["decision"] = {
                "policy": self.decision.policy.to_dict(),
                "looks": list(self.decision.looks),
                "stopped": self.decision.stopped,
                "z": {k: f.z for k, f in self.decision.families.items()},
                "rule": "docs/decisions.md",
            }
        return out


def named_heads(families: Any) -> tuple[Tensor, Tensor]:
    """Per [pattern layer head]: (named: an overall test yes on some probe, or `MIN_TOKENS` token tests yes on
    one probe; could still be named: an open overall test, or enough yes-or-open token tests on one probe)."""
    overall = families["overall"]
    named, could = (overall.code == YES).any(0), overall.open.any(0)
    if "token" in families:
        token = families["token"]
        named = named | ((token.code == YES).sum(-1) >= head_detection.MIN_TOKENS).any(0)
        could = could | (((token.code == YES) | token.open).sum(-1) >= head_detection.MIN_TOKENS).any(0)
    return named, could


def names_settled(families: Any) -> bool:
    """The head rule's stop: every (head, pattern) is named, or no open test could name it."""
    named, could = named_heads(families)
    return bool((named | ~could).all())


def stale_names(families: Any) -> dict[str, Tensor]:
    """Per family, the tests of settled (head, pattern)s, no longer measured (docs/decisions.md, "Head naming
    measures only what can still change a name")."""
    named, could = named_heads(families)
    settled = named | ~could  # [pattern layer head]
    out = {"overall": settled.unsqueeze(0).expand_as(families["overall"].code)}
    if "token" in families:
        out["token"] = settled.unsqueeze(0).unsqueeze(-1).expand_as(families["token"].code)
    return out


def _stacked(
    moments: dict[str, RatioMoments] | None, keys: list[str], k: int, shape: Sequence[int]
) -> RatioMoments:
    """One probe's moments of the patterns `keys`, stacked; for a probe not drawn this round (`moments` None:
    its tests are all frozen), `k` units, none measured."""
    if moments is not None:
        return RatioMoments.stack([moments[p] for p in keys])
    zero = torch.zeros(tuple(shape), dtype=torch.float64)
    return RatioMoments(k, zero, zero, zero, zero, zero, zero)


def draw_probes(model: Any, task: Any, halves: Sequence[int]) -> Any:
    """The role rule's probes as a `sequential.Draw`: k new sequences per probe with a test still measured."""
    cfg = model.cfg
    keys = list(head_detection.BUILTIN_PATTERNS)
    overall_shape = (len(keys), cfg.n_layers, cfg.n_heads)
    token_shape = (*overall_shape, cfg.d_vocab)

    def draw(
        k: int, generator: torch.Generator, measured: dict[str, Tensor] | None = None
    ) -> dict[str, RatioMoments]:
        overall, token = (measured or {}).get("overall"), (measured or {}).get("token")
        overall_parts, token_parts = [], []
        for i, half in enumerate([*halves, None] if task is not None else halves):  # None: the task's data
            wanted = (
                overall is None
                or bool(overall[i].any())
                or (token is not None and half is not None and bool(token[i].any()))
            )
            r = None
            if wanted and half is None:
                batch = task.eval_batch(k, generator=generator).to(model_device(model))
                answers = batch.loss_mask > 0
                r = head_detection.detect_heads_on_task(model, batch.tokens, answers, resamples=0)
            elif wanted:
                tokens = head_detection.repeated_random_tokens(k, half, cfg.d_vocab, generator=generator)
                r = head_detection.detect_heads(model, tokens.to(model_device(model)), resamples=0)
            overall_parts.append(_stacked(r.moments if r else None, keys, k, overall_shape))
            if half is not None:
                token_parts.append(_stacked(r.token_moments if r else None, keys, k, token_shape))
        out = {"overall": RatioMoments.stack(overall_parts)}
        if halves:
            out["token"] = RatioMoments.stack(token_parts)
        return out

    return draw


@torch.no_grad()
def measure_pattern_evidence(
    model: Any,
    task: Any = None,
    *,
    generator: torch.Generator,
    halves: Sequence[int] | None = None,
    policy: DecisionPolicy = HEAD_POLICY,
    n: int | None = None,
    threshold: float | None = None,
) -> PatternEvidence:
    """Detection scores per head over the role rule's probes, sampled in rounds until every head's name is
    decided (docs/decisions.md): [r, r] for every half-length in `halves` (default `heads.default_halves`)
    and, with a task, its data at the answer queries. Every head, pattern, probe and token is one test
    against `threshold` (default `RoleThresholds().attention`); `n` replaces the policy's budget."""
    halves = head_detection.default_halves(model, task) if halves is None else list(halves)
    probes = [f"[r, r], |r| = {half}" for half in halves] + (["task data"] if task is not None else [])
    if not probes:
        return PatternEvidence({}, [], {})
    policy = policy if n is None else policy.with_budget(n)
    t = RoleThresholds().attention if threshold is None else threshold
    families = ("overall", "token") if halves else ("overall",)
    overall = ("probe", "pattern", "layer", "head")
    axes = {"overall": overall, "token": (*overall, "token")}
    draw, limits = draw_probes(model, task, halves), dict.fromkeys(families, t)
    options = {"settled": names_settled, "axes": axes, "freeze": families, "stale": stale_names}
    decision = decide(draw, limits, policy=policy, generator=generator, **options)
    return _evidence_from(decision, probes, len(halves))


def _evidence_from(decision: Decision, probes: list[str], random: int) -> PatternEvidence:
    """Curves [probe layer head] and per-head evidence from the decision (token-selective: random probes)."""
    overall = decision["overall"]
    token = decision.families.get("token")
    selective = torch.full(overall.mean.shape, float("-inf"))
    if token is not None:
        lows = token.corrected_lower.masked_fill(~token.testable, float("nan"))
        selective[:random] = head_detection.kth_highest(lows.float()).double()
    undecided = (overall.code == UNDECIDED) & overall.testable
    needed = overall.n_needed.masked_fill(~undecided, float("nan"))  # [probe pattern layer head]
    # the fewest over the probes; 0 where no probe has an undecided test (nothing to decide)
    fewest = needed.masked_fill(needed.isnan(), float("inf")).amin(0).masked_fill(needed.isnan().all(0), 0.0)
    named, could = named_heads(decision.families)  # [pattern layer head]
    evidence, curves = {}, {}
    for i, k in enumerate(head_detection.BUILTIN_PATTERNS):
        ends = ("lower", "upper", "corrected_lower", "corrected_upper")
        curve = {"score": overall.mean[:, i].float()} | {e: getattr(overall, e)[:, i].float() for e in ends}
        curves[k] = curve | {"token_lower": selective[:, i].float()}
        evidence[k] = curve["score"].nan_to_num(0.0).amax(0)
        evidence[f"{k}_lower"] = curve["corrected_lower"].nan_to_num(0.0).amax(0)
        evidence[f"{k}_token_lower"] = curves[k]["token_lower"].nan_to_num(0.0, neginf=0.0).amax(0)
        evidence[f"{k}_n_needed"] = fewest[i].float()
        evidence[f"{k}_open"] = (could[i] & ~named[i]).float()
    return PatternEvidence(evidence, probes, curves, decision)


# -- the classifier ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RoleEvidence:
    """One head's evidence for one task role: the keys "{role}_{quantity}" of `HeadRole.evidence`, as fields
    (`task_roles.decide_task_roles` writes them; point evidence built by hand has no verdicts or bounds)."""

    role: str
    score: float
    share: float
    attention: float
    lead_lower: float
    """Corrected lower bound of the share's lead over the other roles (nan for point evidence)."""
    verdict: float | None
    """The role's sequential code (`YES`, `NO`, `UNDECIDED`); None for point evidence."""
    score_verdict: float | None
    n_needed: float
    """Sequences per probe that would decide the role (nan: none would)."""
    corrected: dict[str, tuple[float, float]]
    """Quantity ("score", "share", "attention") -> its corrected 95% interval, where measured."""

    @classmethod
    def read(cls, ev: dict[str, float], role: str) -> "RoleEvidence":
        """The role's fields from a head's flat evidence."""
        nan, prefix = float("nan"), f"{role}_"
        of = {k.removeprefix(prefix): v for k, v in ev.items() if k.startswith(prefix)}
        corrected = {
            q: (of[f"{q}_corrected_lower"], of[f"{q}_corrected_upper"])
            for q in ("score", "share", "attention")
            if f"{q}_corrected_lower" in of and f"{q}_corrected_upper" in of
        }
        return cls(
            role, of["score"], of["share"], of.get("attention", nan), of.get("lead_lower", nan),
            of.get("verdict"), of.get("score_verdict"), of.get("n_needed", nan), corrected,
        )  # fmt: skip

    def bounds(self, quantity: str) -> str:
        """ " [lower, upper]" (corrected) of a quantity, or "" when it has none."""
        low, high = self.corrected.get(quantity, (None, None))
        return "" if low is None or high is None else f" [{low:.2f}, {high:.2f}]"


def task_undecided_notes(ev: dict[str, float], roles: Sequence[str]) -> list[str]:
    """Words for each task role the sequential rule left undecided for a head (none for point evidence)."""
    notes = []
    for e in (RoleEvidence.read(ev, role) for role in roles):
        if e.verdict != UNDECIDED:
            continue
        about = "no number of sequences would (a quantity sits on its threshold)"
        if math.isfinite(e.n_needed) and e.n_needed > 0:
            about = f"about {int(e.n_needed)} sequences per probe would decide it"
        notes.append(f"task role {e.role} undecided at the budget (score {e.score:.2f}): {about}")
    return notes


def _task_role(ev: dict[str, float], roles: Sequence[str], t: RoleThresholds) -> tuple[str, str] | None:
    """(the task role a head's evidence supports or "shared", the reason), or None: on the sequential verdicts
    where the evidence has them (docs/decisions.md, "Task roles"), else on the point values."""
    evs = [RoleEvidence.read(ev, r) for r in roles]
    decided = all(e.verdict is not None for e in evs)
    scoring = [e for e in evs if (e.score_verdict == YES if decided else e.score >= t.min_score)]
    for e in evs if decided else scoring:
        if decided and e.verdict == YES:
            return e.role, (
                f"{e.role}: score {e.score:.2f}{e.bounds('score')} (>= {t.min_score}), "
                f"share {e.share:.2f}{e.bounds('share')} leads the other roles by at "
                f"least {e.lead_lower:.2f} (>= {t.share_margin}), attention on its keys "
                f"{e.attention:.2f}{e.bounds('attention')} (>= {t.task_attention}); "
                "corrected 95% intervals"
            )
        lead = e.share - max((o.share for o in evs if o.role != e.role), default=0.0)
        if not decided and lead >= t.share_margin and e.attention >= t.task_attention:
            return e.role, (
                f"{e.role}: score {e.score:.2f} (>= {t.min_score}), share {e.share:.2f} "
                f"leads the other roles by {lead:.2f} (>= {t.share_margin}), attention on its keys "
                f"{e.attention:.2f} (>= {t.task_attention}); point values"
            )
    if len(scoring) >= 2 and (not decided or all(e.verdict == NO for e in evs)):
        scores = [f"{e.role} {e.score:.2f}{e.bounds('score') if decided else ''}" for e in scoring]
        return "shared", f"scores {', '.join(scores)} without a lead"
    return None


class ClearPattern(NamedTuple):
    """A head's attention pattern that the role rule calls clear; patterns sort by (overall, lower)."""

    overall: bool
    """Clear over all query tokens (True), or for some tokens only (False)."""
    lower: float
    """The lower end that cleared the threshold (the point score for evidence without intervals)."""
    role: str
    """The pattern's role name (`PATTERN_ROLES`)."""
    note: str
    """The evidence in words."""


def _clear_pattern(ev: dict[str, float], key: str, t: RoleThresholds) -> ClearPattern | None:
    """The head's pattern `key` when the role rule calls it clear (lower ends, or point scores), else None."""
    name = PATTERN_ROLES[key]
    if key not in ev or (f"{key}_lower" not in ev and ev[key] < t.attention):
        return None
    if f"{key}_lower" not in ev:
        return ClearPattern(True, ev[key], name, f"{name} score {ev[key]:.2f} (>= {t.attention})")
    low, token_low = ev[f"{key}_lower"], ev.get(f"{key}_token_lower", float("-inf"))
    if low >= t.attention:
        note = (
            f"{name}: best score {ev[key]:.2f}, corrected interval lower end {low:.2f} (>= {t.attention}) on "
            "some probe"
        )
        return ClearPattern(True, low, name, note)
    if token_low >= t.attention:
        note = (
            f"{name} for some tokens only: >= {head_detection.MIN_TOKENS} query tokens with a corrected "
            f"lower end >= {t.attention} (best such {token_low:.2f}); overall best score {ev[key]:.2f}"
        )
        return ClearPattern(False, token_low, name, note)
    return None


def undecided_note(ev: dict[str, float], key: str) -> str | None:
    """Words for a pattern the sequential rule left undecided at its budget (None when it decided it)."""
    needed = ev.get(f"{key}_n_needed", 0.0)
    overall = not (needed == 0 or math.isnan(needed))
    if not overall and not ev.get(f"{key}_open", 0.0):
        return None
    about = "tests on some query tokens are still open: more sequences could name it"
    if overall:
        about = "no number of sequences would (the score sits on the threshold)"
    if overall and math.isfinite(needed):
        about = f"about {int(needed)} sequences per probe would decide it"
    return f"{PATTERN_ROLES[key]} undecided at the budget (best score {ev[key]:.2f}): {about}"


def classify_heads(
    evidence: dict[str, Tensor], task_roles: Sequence[str] = (), thresholds: RoleThresholds | None = None
) -> list[HeadRole]:
    """One `HeadRole` per head from evidence tensors [layer head] (the module docstring's rule): detection
    scores (previous_token, induction, duplicate_token) and per task role r r_transfer, r_via_mlp,
    r_attention, r_damage; each role's score and share are added to the evidence."""
    t = thresholds or RoleThresholds()
    if not evidence:
        return []
    evidence = dict(evidence)
    # the point score max(transfer, via_mlp), and each head's share of its positive sum
    for role in task_roles:
        transfer, via = evidence[f"{role}_transfer"], evidence.get(f"{role}_via_mlp")
        score = transfer if via is None else torch.maximum(transfer, via)
        total = score.clamp_min(0).sum()
        share = score.clamp_min(0) / total if float(total) >= t.min_score else torch.zeros_like(score)
        evidence.setdefault(f"{role}_score", score)
        evidence.setdefault(f"{role}_share", share)
    n_layers, n_heads = next(iter(evidence.values())).shape
    roles = []
    for layer, head in itertools.product(range(n_layers), range(n_heads)):
        ev = {k: float(v[layer, head]) for k, v in evidence.items()}
        patterns = sorted((c for k in PATTERN_ROLES if (c := _clear_pattern(ev, k, t))), reverse=True)
        clear = {p.role for p in patterns}
        notes = [p.note for p in patterns]
        notes += [
            u for k, name in PATTERN_ROLES.items() if name not in clear and (u := undecided_note(ev, k))
        ]
        notes += task_undecided_notes(ev, task_roles)
        task = _task_role(ev, task_roles, t) if task_roles else None
        undecided: list[str] = []
        if task is not None:
            role, notes = task[0], [task[1]] + [f"also {note}" for note in notes]
        else:
            role = patterns[0].role if patterns else "none"
            undecided = [r for r in task_roles if RoleEvidence.read(ev, r).verdict == UNDECIDED]
            if not patterns:
                undecided += [name for k, name in PATTERN_ROLES.items() if undecided_note(ev, k)]
        roles.append(HeadRole(layer, head, role, ev, notes, undecided))
    return roles


def head_roles(
    model: Any,
    task: Any = None,
    *,
    n: int = HEAD_POLICY.budget,
    seed: int = 0,
    thresholds: RoleThresholds | None = None,
    policy: DecisionPolicy = HEAD_POLICY,
) -> RoleResult:
    """Measure every head's evidence from `seed` (patterns by `measure_pattern_evidence`, task roles by
    `task_roles.decide_task_roles`, each up to `n` sequences per probe) and classify it; `task` may be None
    (attention-pattern roles only).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> roles = mechmem.head_roles(model, task, n=64)
        >>> [(h.name, h.role) for h in roles.heads if h.role != "none"]
        [('L0H2', 'previous-token'), ('L1H1', 'induction')]
    """
    check_model(model)
    if task is not None:
        check_task(task, model)
    check_count("n", n)
    check_seed(seed)
    t = check_instance("thresholds", thresholds or RoleThresholds(), RoleThresholds)
    check_instance("policy", policy, DecisionPolicy, " (e.g. HEAD_POLICY.with_budget(n))")
    if head_detection.no_attention_reason(model):
        return RoleResult([], (), t, {"n": n, "seed": seed})
    patterns = measure_pattern_evidence(
        model, task, generator=torch.Generator().manual_seed(seed), policy=policy, n=n, threshold=t.attention
    )
    info = {"n": n, "pattern_n": patterns.n, "task_n": None, "seed": seed, "reference": None}
    info |= {"patterns": patterns.to_dict(), "task_decision": None}
    decided = None
    if task is not None:
        reference = task.eval_batch(n, generator=torch.Generator().manual_seed(seed + 2)).tokens
        gen = torch.Generator().manual_seed(seed + 1)
        decided = decide_task_roles(
            model, task, generator=gen, reference=reference, thresholds=t, policy=policy, n=n
        )
    if decided is None:
        return RoleResult(classify_heads(patterns.evidence, (), t), (), t, info)
    info |= {"task_n": decided.n, "reference": "a separate draw of the task's evaluation batch"}
    info["task_decision"] = decided.to_dict()
    evidence = patterns.evidence | decided.evidence
    return RoleResult(classify_heads(evidence, decided.roles, t), decided.roles, t, info)
