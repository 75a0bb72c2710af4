"""Task roles decided by the evidence: each head's per-sequence evidence on its task's counterfactual pairs,
drawn in rounds until every head's task role is decided (docs/decisions.md, "Task roles").

A task role (the permutation task's "recall" and "elimination") is tested on a `RoleProbe`: a counterfactual
pair that changes only the information the role needs, and the keys a head doing it attends to. Per sequence
and head:

    transfer   rise of p(counterfactual answer) when the head's hook_z (every position) is copied from the
               counterfactual run into the clean run;
    via_mlp    the same with the head's output change reaching only the MLP inputs (models with an MLP);
    attention  attention from the answer query onto the role's keys, on the clean inputs;
    damage     drop of p(correct answer) when the head is mean-ablated over a reference batch (reported).

Each is a mean over sequences and a head's share of a role a ratio of sums, with the delta method's interval
(`stats.RatioMoments`), judged by the sequential rule (`sequential.decide`): a role is "yes" when its score,
its lead in share over the other roles and its attention clear their thresholds, "no" when one falls below.
`roles.classify_heads` turns the verdicts into names. Caveats: the share's scoring heads are read off the
point estimates at each look; the lead's interval is built from the share intervals' ends (conservative).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.interventions import Intervention, apply, from_run, intervene, mean
from mechmem.analysis.logit_lens import answer_probability
from mechmem.analysis.sequential import decide
from mechmem.analysis.stats import (
    HEAD_POLICY,
    NO,
    UNDECIDED,
    YES,
    DecisionPolicy,
    FamilyDecision,
    RatioMoments,
    judge,
)
from mechmem.models.parts import model_device
from mechmem.tasks.base import RoleProbe

QUANTITIES = ("transfer", "via_mlp", "attention", "damage")
"""What is measured per sequence and head on a role's probe (via_mlp: models with an MLP only)."""
JUDGED = ("transfer", "via_mlp", "attention", "share")
"""The families of tests, each [role layer head]; damage is reported, not judged."""


# -- per-sequence evidence -----------------------------------------------------------------------------------
def _via_mlp_variant(
    model: Any, layer: int, head: int, z_change: Float[Tensor, "batch pos head_index d_head"]
) -> list[Intervention]:
    """Add the head's output change (its part of `z_change`, counterfactual - clean z, through W_O) to the
    input of every MLP at or after its layer."""
    w_o = model.blocks[layer].attn.W_O[head]  # [d_head d_model]

    def add_change(x: Tensor, hook: Any) -> Tensor:
        # computed when the hook runs: held per head it would be [batch pos d_model] per variant
        return x + z_change[:, :, head] @ w_o

    return [
        Intervention(f"blocks.{later}.hook_mlp_in", (), apply(add_change))
        for later in range(layer, model.cfg.n_layers)
    ]


@torch.no_grad()
def probe_values(
    model: Any, probe: RoleProbe, reference: Tensor | None = None
) -> dict[str, Float[Tensor, "batch layer head"]]:
    """Per sequence of the probe and per head: transfer, damage, via_mlp (models with an MLP) and attention,
    each [batch layer head] on CPU (the module docstring defines them). `reference`: the mean-ablation
    reference (default: the probe's clean inputs)."""
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    heads = [(layer, head) for layer in range(shape[0]) for head in range(shape[1])]
    pair, pos = probe.pair, probe.pair.answer_pos
    reference = pair.clean if reference is None else reference
    rows, keys = torch.arange(len(pos), device=pos.device), probe.keys.float()
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(shape[0])]
    pattern_names = [f"blocks.{l}.attn.hook_pattern" for l in range(shape[0])]
    clean_z: dict[str, Tensor] = {}
    change: dict[str, Tensor] = {}  # counterfactual - clean z
    attention: dict[str, Tensor] = {}  # from the answer query onto the role's keys [batch head]

    def store(into: dict[str, Tensor], name: str, value: Callable[[Tensor], Tensor]) -> Any:
        def fn(act: Tensor, hook: Any) -> None:
            into[name] = value(act)

        return fn

    def on_keys(act: Tensor) -> Tensor:
        return (act[rows, :, pos] * keys[:, None]).sum(-1)

    clean_hooks = [(n, store(clean_z, n, lambda act: act)) for n in z_names]
    logits = model.run_with_hooks(
        pair.clean, fwd_hooks=clean_hooks + [(n, store(attention, n, on_keys)) for n in pattern_names]
    )
    change_hooks = [(n, store(change, n, lambda act, n=n: act - clean_z.pop(n))) for n in z_names]
    model.run_with_hooks(pair.corrupted, fwd_hooks=change_hooks)
    p_counterfactual = partial(answer_probability, pos=pos, answer=pair.incorrect)
    p_correct = partial(answer_probability, pos=pos, answer=pair.correct)
    base_cf, base_ok = p_counterfactual(logits).cpu(), p_correct(logits).cpu()

    def patched(setter: Any, metric: Any) -> Tensor:
        """[variant batch] the metric with each head's z set by `setter`."""
        variants = [Intervention(z_names[l], (slice(None), h), setter) for l, h in heads]
        return intervene(model, pair.clean, variants, metric)

    out = {
        "transfer": patched(from_run(pair.corrupted), p_counterfactual) - base_cf,
        "damage": base_ok - patched(mean(reference), p_correct),
    }
    if not model.cfg.attn_only:
        paths = [_via_mlp_variant(model, l, h, change[z_names[l]]) for l, h in heads]
        out["via_mlp"] = intervene(model, pair.clean, paths, p_counterfactual) - base_cf
    values = {k: v.float().T.reshape(len(pos), *shape) for k, v in out.items()}  # [variant batch] -> heads
    values["attention"] = torch.stack([attention[n] for n in pattern_names], 1).float().cpu()
    return values


@torch.no_grad()
def measure_task_evidence(
    model: Any, probes: Sequence[RoleProbe], reference: Tensor | None = None
) -> dict[str, Float[Tensor, "layer head"]]:
    """Per head and probe, the means over the probe's sequences: "{role}_transfer", "{role}_via_mlp" (models
    with MLPs), "{role}_attention" and "{role}_damage" (mean ablation over `reference`, default the probe's
    clean inputs), each [layer head]: point values, without intervals (`decide_task_roles` has them)."""
    out: dict[str, Tensor] = {}
    for probe in probes:
        values = probe_values(model, probe, reference)
        out.update({f"{probe.role}_{k}": v.mean(0) for k, v in values.items()})
    return out


# -- the decision --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """One quantity [layer head]: mean, marginal 95% interval and, if judged, the corrected interval."""

    mean: Tensor
    lower: Tensor
    upper: Tensor
    corrected_lower: Tensor | None = None
    corrected_upper: Tensor | None = None

    @classmethod
    def of(cls, family: FamilyDecision, i: int, judged: bool = True) -> "Estimate":
        """Role `i`'s slice of a family [role layer head]."""
        ends = (family.corrected_lower[i].float(), family.corrected_upper[i].float()) if judged else ()
        return cls(family.mean[i].float(), family.lower[i].float(), family.upper[i].float(), *ends)

    @classmethod
    def largest(cls, parts: Sequence["Estimate"]) -> "Estimate":
        """Field by field, the largest of `parts` (a role's score: the larger of transfer and via MLP)."""
        return cls(*(torch.stack([getattr(p, f.name) for p in parts]).amax(0) for f in fields(cls)))


@dataclass(frozen=True)
class RoleHeads:
    """One task role's evidence per head [layer head]: the quantities with their intervals, the share's lead
    over the other roles (corrected), the verdicts (codes `stats.YES`, `NO`, `UNDECIDED`) and the sequences
    per probe that would decide an undecided verdict (0 when decided)."""

    role: str
    transfer: Estimate
    via_mlp: Estimate | None
    attention: Estimate
    share: Estimate
    damage: Estimate
    score: Estimate
    """The larger of transfer and via MLP."""
    lead_lower: Tensor
    lead_upper: Tensor
    score_verdict: Tensor
    verdict: Tensor
    n_needed: Tensor

    def flat(self) -> dict[str, Tensor]:
        """The keys of `HeadRole.evidence`: r_q, r_q_lower, r_q_upper and, judged, r_q_corrected_lower /
        r_q_corrected_upper; r_lead_lower, r_lead_upper, r_score_verdict, r_verdict, r_n_needed."""
        out: dict[str, Tensor] = {}
        for q in ("transfer", "via_mlp", "attention", "share", "damage", "score"):
            est = getattr(self, q)
            for end in (f.name for f in fields(Estimate)) if est is not None else ():
                if getattr(est, end) is not None:
                    out[f"{self.role}_{q}" + ("" if end == "mean" else f"_{end}")] = getattr(est, end)
        for name in ("lead_lower", "lead_upper", "score_verdict", "verdict", "n_needed"):
            out[f"{self.role}_{name}"] = getattr(self, name)
        return out


@dataclass(frozen=True)
class TaskRoleEvidence:
    """What `decide_task_roles` found: each role's per-head evidence, the families' decisions, the looks."""

    roles: tuple[str, ...]
    heads: tuple[RoleHeads, ...]
    """Per role, in `roles`' order."""
    families: dict[str, FamilyDecision]
    """Per quantity, its tests [role layer head] after the last look."""
    looks: tuple[int, ...]
    stopped: str
    """ "settled" or "budget"."""
    policy: DecisionPolicy

    @property
    def evidence(self) -> dict[str, Float[Tensor, "layer head"]]:
        """Every role's evidence under the keys of `HeadRole.evidence` (`RoleHeads.flat`)."""
        return {k: v for role in self.heads for k, v in role.flat().items()}

    @property
    def n(self) -> int:
        """Sequences per role probe at the last look."""
        return self.looks[-1] if self.looks else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": "docs/decisions.md",
            "roles": list(self.roles),
            "policy": self.policy.to_dict(),
            "looks": list(self.looks),
            "stopped": self.stopped,
            "families": {k: f.to_dict() for k, f in self.families.items()},
        }


def _moments(values: dict[str, list[Tensor]], roles: Sequence[str], key: str) -> RatioMoments:
    """The moments of one quantity over every sequence drawn so far, tests [role layer head]."""
    return RatioMoments.from_values(torch.stack([torch.cat(values[f"{r}_{key}"]) for r in roles], 1))


def _share_moments(
    values: dict[str, list[Tensor]], roles: Sequence[str], min_score: float, via: bool
) -> RatioMoments:
    """Each head's share of each role's score, a ratio of sums over sequences (docs/decisions.md)."""
    nums, dens = [], []
    for r in roles:
        v = transfer = torch.cat(values[f"{r}_transfer"])  # [unit layer head]
        if via:
            via_mlp = torch.cat(values[f"{r}_via_mlp"])
            v = torch.where(via_mlp.mean(0) > transfer.mean(0), via_mlp, transfer)
        scoring = v.mean(0) > 0
        if float(v.mean(0)[scoring].sum()) < min_score:  # the role is absent from the model: share 0
            scoring = torch.zeros_like(scoring)
        num = v * scoring
        den = num.flatten(1).sum(1) if bool(scoring.any()) else torch.ones(len(num))
        nums.append(num)
        dens.append(den[:, None, None].expand_as(num))
    return RatioMoments.from_values(torch.stack(nums, 1), torch.stack(dens, 1))


@dataclass(frozen=True)
class _Verdicts:
    score: Tensor
    lead_lower: Tensor
    lead_upper: Tensor
    lead: Tensor
    role: Tensor
    """Codes [role layer head]."""


def _code(yes: Tensor, no: Tensor) -> Tensor:
    code = torch.full(yes.shape, UNDECIDED, dtype=torch.int8)
    return code.masked_fill(no, NO).masked_fill(yes, YES)


def _verdicts(families: dict[str, FamilyDecision], margin: float) -> _Verdicts:
    transfer, attention, share = families["transfer"], families["attention"], families["share"]
    via = families.get("via_mlp")
    score_yes, score_no = transfer.code == YES, transfer.code == NO
    if via is not None:
        score_yes, score_no = score_yes | (via.code == YES), score_no & (via.code == NO)
    low, high = share.corrected_lower, share.corrected_upper
    n_roles = low.shape[0]
    if n_roles > 1:
        others = ~torch.eye(n_roles, dtype=torch.bool)[:, :, None, None]  # [role other 1 1]
        high_other = high[None].masked_fill(~others, float("-inf")).amax(1)
        low_other = low[None].masked_fill(~others, float("-inf")).amax(1)
        lead_lower, lead_upper = low - high_other, high - low_other
    else:
        lead_lower, lead_upper = low, high
    lead = _code(lead_lower >= margin, lead_upper < margin)
    score, att = _code(score_yes, score_no), attention.code
    role_yes = (score == YES) & (lead == YES) & (att == YES)
    role_no = (score == NO) | (lead == NO) | (att == NO)
    return _Verdicts(score, lead_lower, lead_upper, lead, _code(role_yes, role_no))


def _settled(families: dict[str, FamilyDecision], margin: float) -> bool:
    """No head's role verdict can still change with more sequences (docs/decisions.md)."""
    v = _verdicts(families, margin)
    open_ = torch.stack(
        [families[q].open for q in ("transfer", "attention", "via_mlp") if q in families]
    ).any(0)
    share_imprecise = (~families["share"].precise).any(0, keepdim=True)  # [1 layer head]
    open_ = open_ | ((v.lead == UNDECIDED) & share_imprecise)
    return not bool((open_ & (v.role == UNDECIDED)).any())


def _n_needed(
    families: dict[str, FamilyDecision], v: _Verdicts, margin: float, n: int, policy: DecisionPolicy
) -> Tensor:
    """Per [role layer head], sequences per probe that would decide an undecided verdict (0: decided)."""
    parts = [families["attention"].n_needed.masked_fill(families["attention"].code != UNDECIDED, 0)]
    if v.score.eq(UNDECIDED).any():
        for name in ("transfer", "via_mlp"):
            if name in families:
                f = families[name]
                parts.append(f.n_needed.masked_fill((f.code != UNDECIDED) | (v.score != UNDECIDED), 0))
    half = (v.lead_upper - v.lead_lower) / 2
    point = (v.lead_upper + v.lead_lower) / 2
    lead_needed = (n * (half / (point - margin).abs()).square()).nan_to_num(float("inf"))
    lead_needed = lead_needed.apply_(policy.rounded) if lead_needed.numel() else lead_needed
    parts.append(lead_needed.double().masked_fill(v.lead != UNDECIDED, 0))
    needed = torch.stack([p.double().nan_to_num(0.0) for p in parts]).amax(0)
    return needed.masked_fill(v.role != UNDECIDED, 0.0)


def _role_heads(
    i: int, role: str, families: dict[str, FamilyDecision], verdicts: _Verdicts, needed: Tensor
) -> RoleHeads:
    """Role `i`'s `RoleHeads` from the families [role layer head]."""
    est = {q: Estimate.of(f, i, judged=q != "damage") for q, f in families.items()}
    score = Estimate.largest([est[q] for q in ("transfer", "via_mlp") if q in est])
    quantities = (est.get(q) for q in ("transfer", "via_mlp", "attention", "share", "damage"))
    v = verdicts
    codes = (t[i].float() for t in (v.lead_lower, v.lead_upper, v.score, v.role, needed))
    return RoleHeads(role, *quantities, score, *codes)


class _NoRoleProbes(Exception):
    """The task defines no role probes."""


@torch.no_grad()
def decide_task_roles(
    model: Any,
    task: Any,
    *,
    generator: torch.Generator,
    reference: Tensor,
    thresholds: Any,
    policy: DecisionPolicy = HEAD_POLICY,
    n: int | None = None,
) -> TaskRoleEvidence | None:
    """Draw each role probe of `task` in rounds (`policy.looks()`, budget `n`) and decide every head's task
    roles (docs/decisions.md, "Task roles"); None when the task defines no role probes.

    Args:
        generator: draws the probes' sequences, round after round.
        reference: mean-ablation reference tokens (the damage column), drawn once by the caller.
        thresholds: a `roles.RoleThresholds` (min_score, share_margin, task_attention).
    """
    policy = policy if n is None else policy.with_budget(n)
    device = model_device(model)
    reference = reference.to(device)
    values: dict[str, list[Tensor]] = {}
    roles: list[tuple[str, ...]] = [()]
    via = not model.cfg.attn_only
    judged = [q for q in JUDGED if via or q != "via_mlp"]
    t = thresholds
    limits = dict(zip(JUDGED, (t.min_score, t.min_score, t.task_attention, t.share_margin)))
    limits = {q: limits[q] for q in judged}
    axes = ("role", "layer", "head")

    def draw(k: int, gen: torch.Generator) -> dict[str, RatioMoments]:
        """Every sequence's moments so far, per judged quantity [role layer head]."""
        probes = task.role_probes(k, generator=gen)
        if not probes:
            raise _NoRoleProbes
        roles[0] = tuple(p.role for p in probes)
        for probe in probes:
            for q, v in probe_values(model, probe.to(device), reference).items():
                values.setdefault(f"{probe.role}_{q}", []).append(v)
        moments = {q: _moments(values, roles[0], q) for q in judged if q != "share"}
        return moments | {"share": _share_moments(values, roles[0], t.min_score, via)}

    try:
        options = {"settled": partial(_settled, margin=t.share_margin), "axes": dict.fromkeys(judged, axes)}
        decision = decide(draw, limits, policy=policy, generator=generator, cumulative=True, **options)
    except _NoRoleProbes:
        return None
    families = {q: decision.families[q] for q in judged}
    damage = _moments(values, roles[0], "damage")
    families["damage"] = judge(damage, 0.0, z=families["share"].z, policy=policy, name="damage", axes=axes)
    verdicts = _verdicts(families, t.share_margin)
    needed = _n_needed(families, verdicts, t.share_margin, decision.n, policy)
    heads = tuple(_role_heads(i, r, families, verdicts, needed) for i, r in enumerate(roles[0]))
    return TaskRoleEvidence(roles[0], heads, families, decision.looks, decision.stopped, policy)
