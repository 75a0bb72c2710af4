"""The last MLP's role, decided by the evidence (docs/decisions.md, "The MLP's role").

    from mechmem.analysis.mlp_role import decided_mlp_role
    found = decided_mlp_role(model, task, seed=0)     # found.role, found.decision["drop"]

The MLP "contributes to the answer" when mean-ablating its output lowers p(answer) at the last answer
position by at least `threshold` on average, decided over rounds of evaluation sequences (`MLP_POLICY`).
Also measured on the same sequences, not judged: the logit lens p(answer) before and after the MLP and
every neuron's direct effect on the answer logit.
"""

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.interventions import Intervention, intervened_logits, mean
from mechmem.analysis.logit_lens import answer_probability, decode_residual
from mechmem.analysis.neurons import neuron_direct_effect
from mechmem.analysis.sequential import decide
from mechmem.analysis.stats import MLP_POLICY, NO, YES, Decision, DecisionPolicy, RatioMoments
from mechmem.models.parts import model_device

FAMILY = "drop"
"""The decision's one family: the mean drop of p(answer) when the MLP is mean-ablated."""


def last_answer(batch: Any) -> tuple[Int[Tensor, " batch"], Int[Tensor, " batch"]]:
    """Per sequence of a task batch: its last loss-masked position and the target there."""
    n, pos = batch.loss_mask.shape
    idx = (batch.loss_mask > 0).float() * torch.arange(1, pos + 1, device=batch.loss_mask.device)
    last = idx.argmax(-1)
    return last, batch.targets[torch.arange(n, device=last.device), last]


@dataclass(frozen=True)
class MlpRole:
    """What `decided_mlp_role` measured, per sequence over every round."""

    layer: int
    decision: Decision
    """The family `drop`: one test against the threshold."""
    p_answer: Float[Tensor, " sequence"]
    """p(answer) at the last answer position: the model's output."""
    p_before: Float[Tensor, " sequence"]
    """The same read from the residual stream just before the MLP (resid_mid, logit lens)."""
    drops: Float[Tensor, " sequence"]
    """p_answer minus p(answer) with the MLP's output mean-ablated."""
    effect: Float[Tensor, "sequence d_mlp"]
    """Every neuron's direct effect on the answer logit."""

    @property
    def role(self) -> str:
        """ "contributes to the answer" (drop decided >= threshold), "none" (decided below) or "undecided"."""
        code = int(self.decision[FAMILY].code)
        return "contributes to the answer" if code == YES else "none" if code == NO else "undecided"

    @property
    def n(self) -> int:
        return len(self.drops)


def decided_mlp_role(
    model: torch.nn.Module,
    task: Any,
    *,
    seed: int = 0,
    policy: DecisionPolicy = MLP_POLICY,
    threshold: float = 0.05,
    layer: int | None = None,
) -> MlpRole:
    """The MLP of `layer` (default: the last) judged on rounds of the task's evaluation sequences;
    `policy.budget` is also the size of the mean's reference batch."""
    layer = model.cfg.n_layers - 1 if layer is None else layer
    device = model_device(model)
    generator = torch.Generator().manual_seed(seed)
    reference = task.eval_batch(policy.budget, generator=generator).tokens.to(device)
    ablate = Intervention(f"blocks.{layer}.hook_mlp_out", (), mean(reference))
    mid = f"blocks.{layer}.hook_resid_mid"
    parts: dict[str, list[Tensor]] = {"base": [], "pre": [], "drops": [], "effect": []}

    @torch.no_grad()
    def draw(k: int, gen: torch.Generator) -> dict[str, RatioMoments]:
        batch = task.eval_batch(k, generator=gen).to(device)
        tokens, (pos, targets) = batch.tokens, last_answer(batch)
        parts["effect"].append(neuron_direct_effect(model, tokens, layer, pos, targets).cpu())
        logits, cache = model.run_with_cache(tokens, names_filter=lambda x: x == mid)
        base = answer_probability(logits, pos, targets)
        pre = answer_probability(decode_residual(model, cache[mid]), pos, targets)
        drops = base - answer_probability(intervened_logits(model, tokens, ablate), pos, targets)
        for name, value in (("base", base), ("pre", pre), ("drops", drops)):
            parts[name].append(value.detach().double().cpu())
        return {FAMILY: RatioMoments.from_values(parts["drops"][-1])}

    decision = decide(draw, {FAMILY: threshold}, policy=policy, generator=generator)
    joined = {name: torch.cat(values) for name, values in parts.items()}
    return MlpRole(layer, decision, joined["base"], joined["pre"], joined["drops"], joined["effect"])
