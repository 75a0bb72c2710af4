"""Naming the circuit from measured evidence, with every threshold explicit.

Each head gets at most one role. Two kinds of evidence are used:

- **Task roles** (elimination, recall), measured on the task's own data with causal evidence
  (`mechmem.analysis.roles`). The score of a role is its *patching transfer* (how much copying the head's output
  from a counterfactual run that changes only that role's information moves the answer) when counterfactual pairs
  exist, else its *ablation damage* (drop in p(answer) under mean ablation, on repeat vs no-repeat sequences).
  A head is an *elimination* head when its elimination score is at least `ablation_drop` and `ablation_margin`
  above its recall score, and, at the answer, it puts at least `task_attention` of its attention on the earlier
  y's. A *recall* head is the mirror image, and attends to the earlier occurrence of the current x or the y that
  followed it.
- **Attention-pattern roles** (previous-token, induction, duplicate-token), measured on repeated random sequences
  drawn from the model's own vocabulary and on the task's data: the head's detection score (attention mass on the
  pattern's keys, the higher of the two) is at least `attention`. When several patterns pass, the highest names
  the role.

A task role, being causal and on-distribution, takes precedence; the patterns a task head also matches are kept in
its notes. A head with no evidence above threshold is named "none". Caveat: thresholds are fixed fractions, not
significance tests; a head just below a threshold is reported as "none" with its numbers shown, so a reader can judge.
"""

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from mechmem.config import ConfigMixin

PATTERN_ROLES = {
    "previous_token": "previous-token",
    "induction": "induction",
    "duplicate_token": "duplicate-token",
}
TASK_ROLES = ("elimination", "recall")


@dataclass(frozen=True)
class RoleThresholds(ConfigMixin):
    """The evidence a role needs; every number here is printed in the report next to the measurements."""

    attention: float = 0.5
    """Min detection score (attention mass on the pattern's keys) for previous-token, induction, duplicate-token."""
    ablation_drop: float = 0.1
    """Min score (in p(answer)) for elimination / recall: patching transfer when measured, else ablation damage."""
    ablation_margin: float = 0.1
    """The role's group must lose at least this much more than the other group."""
    task_attention: float = 0.4
    """Min attention at the answer on the earlier y's (elimination) or on the matching x and its y (recall)."""
    mlp_drop: float = 0.05
    """Min drop in mean p(answer) under mean ablation of a layer's MLP, to name it as contributing."""
    neuron_share: float = 0.5
    """Key neurons: the fewest neurons whose direct effects make up this share of the MLP's positive effect."""
    max_key_neurons: int = 5
    """At most this many key neurons are listed."""


@dataclass
class HeadRole:
    """A head's named role, the numbers behind it, and why."""

    layer: int
    head: int
    role: str
    evidence: dict[str, float]
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"L{self.layer}H{self.head}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "head": self.head,
            "role": self.role,
            "evidence": self.evidence,
            "notes": self.notes,
        }


def _task_role(ev: dict[str, float], t: RoleThresholds) -> tuple[str, str] | None:
    kind = "transfer" if "recall_transfer" in ev else "damage"
    eli, rec = ev.get(f"elimination_{kind}"), ev.get(f"recall_{kind}")
    if eli is None or rec is None:
        return None
    what = "patching transfer" if kind == "transfer" else "ablation damage"
    att_used, att_match = ev.get("attention_used_y", 0.0), ev.get("attention_match_bound", 0.0)
    if eli >= t.ablation_drop and eli - rec >= t.ablation_margin and att_used >= t.task_attention:
        return "elimination", (
            f"{what} {eli:.2f} for elimination (>= {t.ablation_drop}), {rec:.2f} for recall "
            f"(margin >= {t.ablation_margin}); attention on earlier y's {att_used:.2f} (>= {t.task_attention})"
        )
    if rec >= t.ablation_drop and rec - eli >= t.ablation_margin and att_match >= t.task_attention:
        return "recall", (
            f"{what} {rec:.2f} for recall (>= {t.ablation_drop}), {eli:.2f} for elimination "
            f"(margin >= {t.ablation_margin}); attention on the matching x and its y {att_match:.2f} "
            f"(>= {t.task_attention})"
        )
    return None


def name_head_roles(evidence: dict[str, Tensor], thresholds: RoleThresholds | None = None) -> list[HeadRole]:
    """One `HeadRole` per head from evidence tensors, each [layer head], keyed by measurement name.

    Recognised keys: previous_token, induction, duplicate_token (detection scores); elimination_transfer,
    recall_transfer, elimination_damage, recall_damage, attention_used_y, attention_match_bound (task evidence). Missing keys are simply not used.
    """
    t = thresholds or RoleThresholds()
    if not evidence:
        return []
    n_layers, n_heads = next(iter(evidence.values())).shape
    roles = []
    for layer in range(n_layers):
        for head in range(n_heads):
            ev = {k: float(v[layer, head]) for k, v in evidence.items()}
            patterns = sorted(
                ((ev[k], name) for k, name in PATTERN_ROLES.items() if k in ev and ev[k] >= t.attention),
                reverse=True,
            )
            notes = [f"{name} score {score:.2f} (>= {t.attention})" for score, name in patterns]
            task = _task_role(ev, t)
            if task is not None:
                role = task[0]
                notes = [task[1]] + [f"also {n}" for n in notes]
            elif patterns:
                role = patterns[0][1]
            else:
                role = "none"
            roles.append(HeadRole(layer, head, role, ev, notes))
    return roles


def circuit_summary(roles: list[HeadRole]) -> str:
    """A one-line description such as "L0H2 previous-token, L1H1 induction" (or "no head roles found")."""
    if not roles:
        return "no attention heads analysed"
    named = [f"{r.name} {r.role}" for r in roles if r.role != "none"]
    return ", ".join(named) if named else "no head roles found"
