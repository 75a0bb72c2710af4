"""Activation patching decided by the evidence: pairs drawn in rounds until every cell's verdict is settled
(docs/decisions.md, "Activation patching").

    from mechmem.analysis.patching.decided import decided_patching
    found = decided_patching(model, task, ["resid_pre"], seed=0)   # `DecidedPatching`
    found.results["resid_pre"].to_dataframe()                       # with each cell's verdict

Each round draws new pairs and patches every cell of every sweep, exactly or by attribution. After each look
the sequential rule judges the gap (|m(clean) - m(corrupted)| against `MIN_GAP`) and every cell's share of it
(|share| against `PATCH_SHARE`); it stops when no test is open, when the gap is shown absent, or at the
budget.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from mechmem.analysis.frames import concat
from mechmem.analysis.patching.attribution import Attributor, sweep_stages
from mechmem.analysis.patching.result import DIRECTIONS, PatchingResult, sweep_intervals
from mechmem.analysis.patching.sweeps import Patcher, model_sweeps, resolve_sweep
from mechmem.analysis.sequential import FirstRoundCheck, run_rounds
from mechmem.analysis.stats import (
    MIN_GAP,
    NO,
    PATCH_POLICY,
    PATCH_SHARE,
    Decision,
    DecisionPolicy,
    RatioMoments,
)
from mechmem.errors import MechmemError
from mechmem.models.checks import (
    check_choice,
    check_choices,
    check_instance,
    check_memory_mb,
    check_number,
    check_seed,
    check_share,
)
from mechmem.models.parts import model_device
from mechmem.tasks.base import check_task

GAP = "gap"
"""The decision's family of the clean - corrupted gap (the other families are named after their sweeps)."""


@dataclass(frozen=True)
class DecidedPatching:
    """What `decided_patching` found: per sweep its result over every pair drawn, and the decision."""

    results: dict[str, PatchingResult]
    """Per sweep: means and marginal 95% intervals over every pair drawn, and its cells' `decision`."""
    decision: Decision
    """Families `gap` and one per sweep (its cells' shares of the gap)."""
    checks: dict[str, Any] = field(default_factory=dict)
    """Attribution only: per sweep, its agreement with exact patching on the first round's pairs."""

    @property
    def n(self) -> int:
        return self.decision.n

    def to_dataframe(self) -> Any:
        """Every sweep's cells, one row each, in the long form of `PatchingResult.to_dataframe` (its `sweep`
        column tells the sweeps apart), with each cell's share of the gap and verdict."""
        frames = [result.to_dataframe() for result in self.results.values()]
        return concat(frames, ["sweep", "stage", "direction", "method", "value"])

    def record(self) -> dict[str, Any]:
        """The decision for JSON: the policy, looks, why it stopped, and the gap's test."""
        full = self.decision.to_dict()
        return full | {"families": {GAP: full["families"][GAP]}}


def decided_patching(
    model: torch.nn.Module,
    task: Any,
    sweeps: Sequence[str] | None = None,
    *,
    seed: int = 0,
    policy: DecisionPolicy = PATCH_POLICY,
    method: str = "exact",
    direction: str = "denoising",
    memory_mb: float = 256.0,
    share: float = PATCH_SHARE,
    min_gap: float = MIN_GAP,
) -> DecidedPatching:
    """Patching sweeps on rounds of the task's clean/corrupted pairs until every verdict is settled.

    Args:
        task: gives the pairs (`task.patching_pair`; NotImplementedError when it has none).
        sweeps: the sweeps (default: every sweep the model has, `model_sweeps`).
        seed: seeds the one generator every round draws its pairs from.
        policy: the looks and level (`PATCH_POLICY`; `policy.with_budget(n)` for another budget).
        method: "exact" or "attribution" (a sweep failing its first-round check is patched exactly).
        share: a cell matters when its share of the gap is decided >= share in size.
        min_gap: the behaviour is there when |gap| is decided >= min_gap.

    Example:
        >>> import mechmem
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> found = mechmem.decided_patching(model, task, ["attn_head_out_all_pos"])
        >>> found.n, found.results["attn_head_out_all_pos"].decision.verdicts()    # L1H1 alone matters
        (64, ['no', 'no', 'no', 'no', 'yes', 'no'])
    """
    check_task(task, model)
    check_seed(seed)
    check_instance("policy", policy, DecisionPolicy, " (e.g. PATCH_POLICY.with_budget(n))")
    check_choice("method", method, ("exact", "attribution"))
    check_choice("direction", direction, DIRECTIONS)
    check_memory_mb(memory_mb)
    check_share("share", share)
    check_number("min_gap", min_gap, low=0.0)
    names = check_choices("sweeps", sweeps) if sweeps is not None else model_sweeps(model)
    for name in names:
        resolve_sweep(name, direction, model)
    device = model_device(model)
    checker = FirstRoundCheck()

    def sweep(name: str, exact: Patcher, att: Attributor | None) -> PatchingResult:
        if att is None:
            return exact.sweep(name, direction)
        return checker.measure(
            name,
            lambda kept: att.sweep(name, direction, check=kept is None),
            lambda failed: att.exact_sweep(name, direction, failed),
            lambda result: (result.check["trusted"], True, result.check),
        )

    def measure(k: int, gen: torch.Generator) -> tuple[Any, dict[str, RatioMoments]]:
        pair = task.patching_pair(k, generator=gen).to(device)
        att = None
        if method == "exact":
            exact = Patcher(model, pair.clean, pair.corrupted, pair=pair, memory_mb=memory_mb)
        else:
            stages = sweep_stages(model, names, direction)
            att = Attributor(model, pair.clean, pair.corrupted, pair=pair, stages=stages, memory_mb=memory_mb)
            exact = att.exact_patcher()
        if (prompt := exact.prompt_values) is None:
            raise MechmemError("decided patching needs a metric with one value per pair")
        found = {name: sweep(name, exact, att) for name in names}
        gap = (prompt["clean"] - prompt["corrupted"]).double()
        base = prompt["corrupted"] if direction == "denoising" else prompt["clean"]
        moments = {GAP: RatioMoments.from_values(gap)}
        for name, result in found.items():
            effect = result.per_prompt.double() - base.double().reshape(-1, *[1] * (result.values.ndim))
            moments[name] = RatioMoments.from_values(effect, gap)
        return (found, prompt), moments

    run = run_rounds(
        measure,
        {GAP: min_gap, **dict.fromkeys(names, share)},
        policy=policy,
        generator=torch.Generator().manual_seed(seed),
        absent=lambda families: bool(families[GAP].code == NO),
        absolute=(GAP, *names),
        axes={name: resolve_sweep(name, direction, model)[0].axes for name in names},
    )
    clean, corrupted = (torch.cat([p[key] for _, p in run.records]) for key in ("clean", "corrupted"))
    results = {}
    for name in names:
        first = run.records[0][0][name]
        per_prompt = torch.cat([r[name].per_prompt.double() for r, _ in run.records])
        results[name] = replace(
            first,
            values=per_prompt.mean(0).float(),
            clean=float(clean.double().mean()),
            corrupted=float(corrupted.double().mean()),
            check=checker.checks.get(name, first.check),
            intervals=sweep_intervals(per_prompt, clean, corrupted, direction),
            per_prompt=per_prompt,
            decision=run.decision[name],
        )
    return DecidedPatching(results, run.decision, checker.checks)


def decision_lines(found: DecidedPatching) -> list[str]:
    """The decision in words: looks, why it stopped, the gap's verdict and each sweep's tally of cells."""
    d = found.decision
    gap = d[GAP]
    first = (
        f'Decided over rounds of pairs (docs/decisions.md, "Activation patching"): looks '
        f"{', '.join(map(str, d.looks))} ({d.stopped}); gap {float(gap.mean):+.3f} "
        f"[{float(gap.lower):+.3f}, {float(gap.upper):+.3f}], behaviour (|gap| >= "
        f"{float(gap.threshold):g}): {gap.verdicts()[0]}."
    )
    lines = [first]
    for name, result in found.results.items():
        cells = result.decision
        matter = f"matter (share of the gap decided >= {float(cells.threshold.flatten()[0]):g} in size)"
        lines.append(f"{name}: " + cells.tally("cells", matter, "pairs") + ".")
    return lines
