"""Task roles decided by the evidence: each head's per-sequence evidence on its task's counterfactual pairs,
drawn in rounds until every head's task role is decided (docs/decisions.md, "Task roles").

A task role (the permutation task's "recall" and "elimination") is tested on a `RoleProbe`: a counterfactual
pair that changes only the information the role needs, and the keys a head doing it attends to. Per sequence
and head the engine measures

    transfer   rise of p(counterfactual answer) when the head's output (hook_z, every position) is copied
               from the counterfactual run into the clean run;
    via_mlp    the same with the head's output change reaching only the MLP inputs (models with an MLP);
    attention  attention from the answer query onto the role's keys, on the clean inputs;
    damage     drop of p(correct answer) when the head is mean-ablated over a reference batch (reported).

Every quantity is a mean over sequences, and a head's share of a role a ratio of sums over them, so each has
the delta method's interval (`stats.RatioMoments`). The verdicts use the corrected intervals of the
sequential rule (`stats.judge`): a role is "yes" when its score (transfer or via MLP), its lead in share
over the other roles and its attention all clear their thresholds, "no" when one of them falls below, and more
sequences are drawn while some head's verdict could still change. `roles.classify_heads` turns the verdicts
into names.

Caveats: the share's set of scoring heads is read off the point estimates at each look; the lead's interval is
built from the share intervals' ends (conservative); transfer assumes the counterfactual leaves the other
roles' information unchanged.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.interventions import Intervention, apply, from_run, intervene, mean
from mechmem.analysis.logit_lens import answer_probability
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


# -- per-sequence evidence
# -----------------------------------------------------------------------------------------
def _heads(model: Any) -> list[tuple[int, int]]:
    return [(layer, head) for layer in range(model.cfg.n_layers) for head in range(model.cfg.n_heads)]


def _via_mlp_variant(
    model: Any, layer: int, head: int, z_change: Float[Tensor, "batch pos head_index d_head"]
) -> list[Intervention]:
    """Add the head's output change to the input of every MLP at or after its layer.

    The output change is the head's part of `z_change` (counterfactual - clean z of its layer) through W_O.
    """
    w_o = model.blocks[layer].attn.W_O[head]  # [d_head d_model]

    def add_change(x: Tensor, hook: Any) -> Tensor:
        # Computed when the hook runs, not held per head: [batch pos d_model] for each of layers x heads
        # variants would be 29 GB at 1,000 sequences of a 12-layer d_model 768 model.
        return x + z_change[:, :, head] @ w_o

    return [
        Intervention(f"blocks.{later}.hook_mlp_in", (), apply(add_change))
        for later in range(layer, model.cfg.n_layers)
    ]


def _clean_and_change(
    model: Any, pair: Any, rows: Tensor, pos: Tensor
) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor]]:
    """(clean logits, {z hook: counterfactual - clean z}, {pattern hook: attention from the answer position
    [batch head k_pos]}), from one clean and one counterfactual run.

    Kept: the clean run's z until the counterfactual run replaces it by the change, and only the answer row
    of each pattern (not every query's)."""
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(model.cfg.n_layers)]
    pattern_names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    clean_z: dict[str, Tensor] = {}
    change: dict[str, Tensor] = {}
    at_answer: dict[str, Tensor] = {}

    def keep(name: str) -> Any:
        def fn(act: Tensor, hook: Any) -> None:
            if name in pattern_names:
                at_answer[name] = act[rows, :, pos]
            else:
                clean_z[name] = act

        return fn

    def subtract(name: str) -> Any:
        def fn(act: Tensor, hook: Any) -> None:
            change[name] = act - clean_z.pop(name)

        return fn

    logits = model.run_with_hooks(pair.clean, fwd_hooks=[(n, keep(n)) for n in z_names + pattern_names])
    model.run_with_hooks(pair.corrupted, fwd_hooks=[(n, subtract(n)) for n in z_names])
    return logits, change, at_answer


@torch.no_grad()
def probe_values(
    model: Any, probe: RoleProbe, reference: Tensor | None = None
) -> dict[str, Float[Tensor, "batch layer head"]]:
    """Per sequence of the probe and per head: transfer, damage, via_mlp (models with an MLP) and attention,
    each [batch layer head] on CPU (the module docstring defines them). `reference`: the mean-ablation
    reference (default: the probe's clean inputs)."""
    heads, shape = _heads(model), (model.cfg.n_layers, model.cfg.n_heads)
    pair, pos = probe.pair, probe.pair.answer_pos
    reference = pair.clean if reference is None else reference
    rows = torch.arange(len(pos), device=pos.device)
    z_names = [f"blocks.{l}.attn.hook_z" for l in range(shape[0])]
    pattern_names = [f"blocks.{l}.attn.hook_pattern" for l in range(shape[0])]
    logits, change, at_answer = _clean_and_change(model, pair, rows, pos)

    def p_counterfactual(lg: Tensor) -> Tensor:
        return answer_probability(lg, pos, pair.incorrect)

    def p_correct(lg: Tensor) -> Tensor:
        return answer_probability(lg, pos, pair.correct)

    base_cf, base_ok = p_counterfactual(logits).cpu(), p_correct(logits).cpu()
    source, ablate = from_run(pair.corrupted), mean(reference)
    out = {
        "transfer": intervene(
            model,
            pair.clean,
            [Intervention(f"blocks.{l}.attn.hook_z", (slice(None), h), source) for l, h in heads],
            p_counterfactual,
        )
        - base_cf,
        "damage": base_ok
        - intervene(
            model,
            pair.clean,
            [Intervention(f"blocks.{l}.attn.hook_z", (slice(None), h), ablate) for l, h in heads],
            p_correct,
        ),
    }
    if not model.cfg.attn_only:
        paths = [_via_mlp_variant(model, l, h, change[z_names[l]]) for l, h in heads]
        out["via_mlp"] = intervene(model, pair.clean, paths, p_counterfactual) - base_cf
    values = {k: v.float().T.reshape(len(pos), *shape) for k, v in out.items()}  # [variant batch] -> heads
    keys = probe.keys.float()
    attention = torch.stack([(at_answer[name] * keys[:, None]).sum(-1) for name in pattern_names], 1)
    values["attention"] = attention.float().cpu()  # [batch layer head]
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


# -- the decision
# -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRoleEvidence:
    """What `decide_task_roles` found: per-head evidence [layer head] with intervals and verdicts, the
    families' decisions, and the looks taken."""

    roles: tuple[str, ...]
    evidence: dict[str, Float[Tensor, "layer head"]]
    """Per role r and quantity q (transfer, via_mlp, attention, damage, share): r_q, r_q_lower, r_q_upper
    (marginal 95%) and, for the judged ones, r_q_corrected_lower / r_q_corrected_upper; r_score (the larger
    of transfer and via MLP) with its bounds; r_lead_lower / r_lead_upper (corrected); r_score_verdict and
    r_verdict (codes `stats.YES`, `NO`, `UNDECIDED`); r_n_needed (sequences per probe that would decide
    an undecided verdict, 0 when decided)."""
    families: dict[str, FamilyDecision]
    """Per judged quantity, its tests [role layer head] after the last look."""
    looks: tuple[int, ...]
    stopped: str
    """ "settled" or "budget"."""
    policy: DecisionPolicy

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
        transfer = torch.cat(values[f"{r}_transfer"])  # [unit layer head]
        v = transfer
        if via:
            via_mlp = torch.cat(values[f"{r}_via_mlp"])
            v = torch.where(via_mlp.mean(0) > transfer.mean(0), via_mlp, transfer)
        scoring = v.mean(0) > 0
        if float(v.mean(0)[scoring].sum()) < min_score:  # the role is absent from the model: share 0
            scoring = torch.zeros_like(scoring)
        num = v * scoring
        den = num.flatten(1).sum(1)
        if not bool(scoring.any()):
            den = torch.ones_like(den)
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
    score_yes = transfer.code == YES
    score_no = transfer.code == NO
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


def _settled(families: dict[str, FamilyDecision], v: _Verdicts) -> bool:
    """No head's role verdict can still change with more sequences (docs/decisions.md)."""
    open_ = families["transfer"].open | families["attention"].open
    if "via_mlp" in families:
        open_ = open_ | families["via_mlp"].open
    share_imprecise = (~families["share"].precise).any(0, keepdim=True)  # [1 layer head]
    open_ = open_ | ((v.lead == UNDECIDED) & share_imprecise)
    return not bool((open_ & (v.role == UNDECIDED)).any())


def _n_needed(
    families: dict[str, FamilyDecision], v: _Verdicts, margin: float, n: int, policy: Any
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


def _head_evidence(
    roles: Sequence[str], families: dict[str, FamilyDecision], verdicts: _Verdicts, needed: Tensor, via: bool
) -> dict[str, Tensor]:
    """The per-head evidence tensors [layer head] of `TaskRoleEvidence.evidence`."""
    evidence: dict[str, Tensor] = {}
    for i, r in enumerate(roles):
        for q, f in families.items():
            evidence[f"{r}_{q}"] = f.mean[i].float()
            evidence[f"{r}_{q}_lower"], evidence[f"{r}_{q}_upper"] = f.lower[i].float(), f.upper[i].float()
            if q != "damage":
                evidence[f"{r}_{q}_corrected_lower"] = f.corrected_lower[i].float()
                evidence[f"{r}_{q}_corrected_upper"] = f.corrected_upper[i].float()
        parts = ("transfer", "via_mlp") if via else ("transfer",)
        evidence[f"{r}_score"] = torch.stack([evidence[f"{r}_{q}"] for q in parts]).amax(0)
        for end in ("lower", "upper", "corrected_lower", "corrected_upper"):
            evidence[f"{r}_score_{end}"] = torch.stack([evidence[f"{r}_{q}_{end}"] for q in parts]).amax(0)
        evidence[f"{r}_lead_lower"] = verdicts.lead_lower[i].float()
        evidence[f"{r}_lead_upper"] = verdicts.lead_upper[i].float()
        evidence[f"{r}_score_verdict"] = verdicts.score[i].float()
        evidence[f"{r}_verdict"] = verdicts.role[i].float()
        evidence[f"{r}_n_needed"] = needed[i].float()
    return evidence


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
        n: the budget (sequences per probe), replacing the policy's.
    """
    policy = policy if n is None else policy.with_budget(n)
    device = model_device(model)
    reference = reference.to(device)
    values: dict[str, list[Tensor]] = {}
    roles: tuple[str, ...] = ()
    via = not model.cfg.attn_only
    judged = [q for q in JUDGED if via or q != "via_mlp"]
    thresholds_of = {
        "transfer": thresholds.min_score,
        "via_mlp": thresholds.min_score,
        "attention": thresholds.task_attention,
        "share": thresholds.share_margin,
    }
    taken: list[int] = []
    families: dict[str, FamilyDecision] = {}
    stopped = "budget"
    for size in policy.looks():
        probes = task.role_probes(size - (taken[-1] if taken else 0), generator=generator)
        if not probes:
            return None
        roles = tuple(p.role for p in probes)
        for probe in probes:
            for k, v in probe_values(model, probe.to(device), reference).items():
                values.setdefault(f"{probe.role}_{k}", []).append(v)
        taken.append(size)
        moments = {q: _moments(values, roles, q) for q in judged if q != "share"}
        moments["share"] = _share_moments(values, roles, thresholds.min_score, via)
        moments["damage"] = _moments(values, roles, "damage")
        z = policy.z(math.prod(moments["share"].shape), len(judged))
        axes = ("role", "layer", "head")
        families = {
            q: judge(moments[q], thresholds_of.get(q, 0.0), z=z, policy=policy, name=q, axes=axes)
            for q in (*judged, "damage")
        }
        verdicts = _verdicts({q: families[q] for q in judged}, thresholds.share_margin)
        if _settled({q: families[q] for q in judged}, verdicts):
            stopped = "settled"
            break
    needed = _n_needed(families, verdicts, thresholds.share_margin, taken[-1], policy)
    evidence = _head_evidence(roles, families, verdicts, needed, via)
    return TaskRoleEvidence(roles, evidence, families, tuple(taken), stopped, policy)


__all__ = [
    "JUDGED",
    "QUANTITIES",
    "TaskRoleEvidence",
    "decide_task_roles",
    "measure_task_evidence",
    "probe_values",
]
