"""Head roles from measured evidence: which head eliminates and which recalls.

Technique. Sequences are split into two groups by what answering them needs: a *recall* group (the answer is
bound to an earlier occurrence of the query, e.g. a repeated x whose y was shown before) and an *elimination*
group (the answer is whatever has not been used yet). Per head we measure

    patching transfer  (the classifying evidence) for a recall pair and an elimination pair of inputs that differ
                       only in the information one role needs: e.g. the repeated x points at another earlier pair
                       (recall), or one earlier y is swapped with the unused one (elimination). Copy the head's
                       output from the counterfactual run into the clean run and record how much p(counterfactual
                       answer) rises. A head that carries the information moves the answer; one that does not, not;
    ablation damage    drop in mean p(correct answer) when the head's output is replaced by its mean over all
                       sequences (mean ablation), on each group (used for the labels when no pairs are given);
    attention mass     from the answer query onto named key sets, e.g. "bound" (the y that followed the matching
                       x), "match" (the matching x itself) and "other_y" (the other earlier y's).

Rule (`classify_roles`): with scores s_rec, s_eli of a head (transfer when measured, else damage), the head is
"recall" when s_rec >= min_score and s_rec - s_eli >= margin, "elimination" for the mirror case, "shared" when
both reach min_score without a clear winner, and "unused" otherwise.

Intuition: heads are symmetric at initialisation, so which head takes which job is decided by the seed; labels
have to come from measured behaviour, not from the head index. Why transfer rather than damage: when an MLP reads
both heads jointly (the permutation task's Task 2 model decodes the answer only after its FFN), removing either
head wrecks every answer, so ablation damage is large on both groups and does not separate the roles, while a
counterfactual that changes one kind of information moves the answer only through the head that carries it.
Caveats: transfer assumes the counterfactual leaves the other role's information unchanged; damage is measured on
the given sequences only, and a head that others compensate for looks unimportant under either test.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.tasks.base import PatchingPair

ROLES = ("recall", "elimination", "shared", "unused")


@dataclass(frozen=True)
class RoleThresholds:
    """Decision thresholds of the head-role classifier, in units of p(correct answer)."""

    min_score: float = 0.1
    """A role's score (transfer or damage, in p(answer)) must reach this for the head to matter for it."""
    margin: float = 0.1
    """A single role needs its score to exceed the other role's score by at least this much."""

    def to_dict(self) -> dict[str, float]:
        return {"min_score": self.min_score, "margin": self.margin}


@dataclass
class RoleEvidence:
    """Measured evidence per head: ablation damage on each group and attention mass on named key sets."""

    damage_recall: Float[Tensor, "layer head"]
    """Drop of mean p(correct) on the recall group when the head is mean-ablated."""
    damage_elimination: Float[Tensor, "layer head"]
    """Drop of mean p(correct) on the elimination group when the head is mean-ablated."""
    attention: dict[str, Float[Tensor, "layer head"]] = field(default_factory=dict)
    """Mean attention from the answer query onto each named key set (averaged over the recall group)."""
    baseline_recall: float = float("nan")
    """Mean p(correct) on the recall group without ablation."""
    baseline_elimination: float = float("nan")
    """Mean p(correct) on the elimination group without ablation."""
    transfer_recall: Float[Tensor, "layer head"] | None = None
    """Rise of p(counterfactual answer) when the head is patched from the recall pair's counterfactual run."""
    transfer_elimination: Float[Tensor, "layer head"] | None = None
    """The same for the elimination pair."""

    def __post_init__(self) -> None:
        shape = self.damage_recall.shape
        if self.damage_recall.ndim != 2 or self.damage_elimination.shape != shape:
            raise ValueError("damage_recall and damage_elimination must share the shape [layer head]")
        if (self.transfer_recall is None) != (self.transfer_elimination is None):
            raise ValueError("give both transfer_recall and transfer_elimination, or neither")
        for t in (self.transfer_recall, self.transfer_elimination):
            if t is not None and t.shape != shape:
                raise ValueError("transfer scores must have the shape [layer head] of the damage")
        for name, mass in self.attention.items():
            if mass.shape != shape:
                raise ValueError(f"attention[{name!r}] has shape {tuple(mass.shape)}, expected {tuple(shape)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "axes": ["layer", "head"],
            "damage_recall": self.damage_recall.tolist(),
            "damage_elimination": self.damage_elimination.tolist(),
            "attention": {k: v.tolist() for k, v in self.attention.items()},
            "baseline_recall": self.baseline_recall,
            "baseline_elimination": self.baseline_elimination,
            "transfer_recall": None if self.transfer_recall is None else self.transfer_recall.tolist(),
            "transfer_elimination": None if self.transfer_elimination is None else self.transfer_elimination.tolist(),
        }

    @property
    def basis(self) -> str:
        """Which scores label the heads: "patching transfer" when measured, else "ablation damage"."""
        return "ablation damage" if self.transfer_recall is None else "patching transfer"

    def scores(self) -> tuple[Tensor, Tensor]:
        """(recall score, elimination score), each [layer head], on the labelling basis."""
        if self.transfer_recall is None or self.transfer_elimination is None:
            return self.damage_recall, self.damage_elimination
        return self.transfer_recall, self.transfer_elimination


@dataclass
class RoleResult:
    """Role label of every head, with the evidence and thresholds that produced it."""

    labels: list[list[str]]
    """labels[layer][head], one of ROLES."""
    evidence: RoleEvidence
    thresholds: RoleThresholds

    def __post_init__(self) -> None:
        n_layers, n_heads = self.evidence.damage_recall.shape
        if len(self.labels) != n_layers or any(len(row) != n_heads for row in self.labels):
            raise ValueError("labels must be [layer][head] like the evidence")
        if any(label not in ROLES for row in self.labels for label in row):
            raise ValueError(f"labels must be among {ROLES}")

    def heads_with(self, role: str) -> list[tuple[int, int]]:
        """(layer, head) of every head carrying `role`."""
        return [(l, h) for l, row in enumerate(self.labels) for h, label in enumerate(row) if label == role]

    @property
    def split_found(self) -> bool:
        """True when exactly one head recalls and exactly one eliminates."""
        return len(self.heads_with("recall")) == 1 and len(self.heads_with("elimination")) == 1

    def to_dict(self) -> dict[str, Any]:
        return {"labels": self.labels, "basis": self.evidence.basis, "evidence": self.evidence.to_dict(),
                "thresholds": self.thresholds.to_dict()}


def classify_roles(evidence: RoleEvidence, thresholds: RoleThresholds = RoleThresholds()) -> RoleResult:
    """Label every head from its recall and elimination scores (rule in the module docstring)."""
    labels: list[list[str]] = []
    recall, elimination = evidence.scores()
    for rec_row, eli_row in zip(recall.tolist(), elimination.tolist()):
        row = []
        for rec, eli in zip(rec_row, eli_row):
            if rec >= thresholds.min_score and rec - eli >= thresholds.margin:
                row.append("recall")
            elif eli >= thresholds.min_score and eli - rec >= thresholds.margin:
                row.append("elimination")
            elif rec >= thresholds.min_score and eli >= thresholds.min_score:
                row.append("shared")
            else:
                row.append("unused")
        labels.append(row)
    return RoleResult(labels, evidence, thresholds)


def _p_correct(logits: Float[Tensor, "batch pos d_vocab"], pos: Tensor, target: Tensor) -> Tensor:
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, pos].float().softmax(-1)[rows, target]


@torch.no_grad()
def head_patching_transfer(model: Any, pair: PatchingPair) -> Float[Tensor, "layer head"]:
    """Rise of mean p(pair.incorrect) at `pair.answer_pos` when one head's output (hook_z) is copied from the
    corrupted (counterfactual) run into the clean run, for every head."""
    device = pair.clean.device
    rows = torch.arange(pair.clean.shape[0], device=device)
    names = [f"blocks.{l}.attn.hook_z" for l in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(pair.corrupted, names_filter=lambda n: n in names)

    def p_counterfactual(logits: Tensor) -> Tensor:
        return logits[rows, pair.answer_pos].float().softmax(-1)[rows, pair.incorrect].mean()

    base = p_counterfactual(model(pair.clean))
    out = torch.zeros(model.cfg.n_layers, model.cfg.n_heads)
    for layer, name in enumerate(names):
        for head in range(model.cfg.n_heads):

            def patch(z: Tensor, hook: Any, head: int = head, name: str = name) -> Tensor:
                z[:, :, head] = cache[name][:, :, head]
                return z

            out[layer, head] = p_counterfactual(model.run_with_hooks(pair.clean, fwd_hooks=[(name, patch)])) - base
    return out


@torch.no_grad()
def measure_role_evidence(
    model: Any,
    tokens: Int[Tensor, "batch pos"],
    answer_pos: Int[Tensor, " batch"],
    targets: Int[Tensor, " batch"],
    recall_group: Bool[Tensor, " batch"],
    key_sets: Mapping[str, Bool[Tensor, "batch key_pos"]] | None = None,
    *,
    recall_pair: PatchingPair | None = None,
    elimination_pair: PatchingPair | None = None,
) -> RoleEvidence:
    """Per head: mean-ablation damage on each group, attention mass on `key_sets`, and (given the two pairs) the
    patching transfer that `classify_roles` then labels from.

    Args:
        model: a HookedTransformer.
        tokens: input sequences.
        answer_pos: position whose prediction is scored, per sequence.
        targets: the correct answer token, per sequence.
        recall_group: True for sequences that need recall, False for those answered by elimination.
        key_sets: named boolean masks over key positions; attention from `answer_pos` onto each set is averaged
            over the recall group.
        recall_pair, elimination_pair: counterfactual pairs (`corrupted` is the counterfactual input, `incorrect`
            its answer) for the patching transfer; when both are given they decide the labels.
    """
    if (recall_pair is None) != (elimination_pair is None):
        raise ValueError("give both recall_pair and elimination_pair, or neither")
    device = tokens.device
    answer_pos, targets, recall_group = answer_pos.to(device), targets.to(device), recall_group.to(device)
    if not recall_group.any() or recall_group.all():
        raise ValueError("recall_group must contain both recall and elimination sequences")
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    names = [f"blocks.{l}.attn.hook_z" for l in range(n_layers)] + [
        f"blocks.{l}.attn.hook_pattern" for l in range(n_layers)
    ]
    logits, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    base = _p_correct(logits, answer_pos, targets)
    damage = torch.zeros(2, n_layers, n_heads)
    for layer in range(n_layers):
        mean_z = cache[f"blocks.{layer}.attn.hook_z"].mean(0, keepdim=True)
        for head in range(n_heads):

            def ablate(z: Tensor, hook: Any, head: int = head, mean_z: Tensor = mean_z) -> Tensor:
                z[:, :, head] = mean_z[:, :, head]
                return z

            ablated = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", ablate)])
            drop = base - _p_correct(ablated, answer_pos, targets)
            damage[0, layer, head] = drop[recall_group].mean()
            damage[1, layer, head] = drop[~recall_group].mean()
    attention: dict[str, Tensor] = {}
    rows = torch.arange(tokens.shape[0], device=device)
    for name, keys in (key_sets or {}).items():
        mass = torch.zeros(n_layers, n_heads)
        for layer in range(n_layers):
            pattern = cache[f"blocks.{layer}.attn.hook_pattern"][rows, :, answer_pos]  # [batch head key_pos]
            per_seq = (pattern * keys.to(device)[:, None, :].float()).sum(-1)
            mass[layer] = per_seq[recall_group].mean(0).cpu()
        attention[name] = mass
    transfer = (None, None)
    if recall_pair is not None and elimination_pair is not None:
        transfer = (head_patching_transfer(model, recall_pair), head_patching_transfer(model, elimination_pair))
    return RoleEvidence(
        damage[0],
        damage[1],
        attention,
        baseline_recall=float(base[recall_group].mean()),
        baseline_elimination=float(base[~recall_group].mean()),
        transfer_recall=transfer[0],
        transfer_elimination=transfer[1],
    )
