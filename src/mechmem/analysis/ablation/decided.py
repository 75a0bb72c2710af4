"""Ablation decided by the evidence: evaluation sequences drawn in rounds until every component's verdict
is settled (docs/decisions.md, "Ablation").

    from mechmem.analysis.ablation.decided import decided_ablation
    result = decided_ablation(model, task, seed=0)        # an `AblationResult` with its `decision`

One generator seeded with the seed draws the mean / resample reference, then each round's sequences;
resampling uses a second generator seeded with seed + 1. After each look every component's |delta| is judged
against `ABLATION_THRESHOLDS`; sampling stops when no test is open or at the budget.
"""

from typing import Any

import torch

from mechmem.analysis.ablation.attribution import attribute_ablation
from mechmem.analysis.ablation.exact import METHODS, ablate_heads, layer_parts, task_metric
from mechmem.analysis.ablation.result import AblationResult, SequenceChanges
from mechmem.analysis.options import ABLATION_METRICS
from mechmem.analysis.sequential import FirstRoundCheck, run_rounds
from mechmem.analysis.stats import ABLATION_POLICY, ABLATION_THRESHOLDS, DecisionPolicy, RatioMoments
from mechmem.errors import MechmemError
from mechmem.models.checks import check_choice, check_choices, check_instance, check_number, check_seed
from mechmem.models.parts import model_device
from mechmem.tasks.base import check_task

FAMILY = "delta"
"""The decision's one family: every ablation's change of the metric, [method, variant]."""
UNITS = {"loss": "nats", "accuracy": "of accuracy", "logit_diff": "logits"}


def decided_ablation(
    model: torch.nn.Module,
    task: Any,
    *,
    seed: int = 0,
    policy: DecisionPolicy = ABLATION_POLICY,
    methods: tuple[str, ...] = ("mean",),
    estimate: bool = False,
    metric: str = "loss",
    threshold: float | None = None,
) -> AblationResult:
    """Ablate every head, attention layer and MLP on rounds of the task's sequences until every change of
    the metric is decided (docs/decisions.md, "Ablation").

    Args:
        task: gives the sequences and the metric (`ablation.task_metric`).
        seed: seeds the one generator the reference and every round are drawn from.
        policy: the looks and level (`ABLATION_POLICY`; `policy.with_budget(n)` for another budget).
        methods: of `ablation.METHODS`; metric: "loss", "accuracy" or "logit_diff".
        estimate: estimate by attribution (one method only), `CHECK_VARIANTS` computed exactly; failing the
            first round's check makes every round exact.
        threshold: a component matters when its |delta| is decided >= threshold (default: the metric's
            `ABLATION_THRESHOLDS`).

    Example:
        >>> import mechmem
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> result = mechmem.decided_ablation(model, task)
        >>> result.decision.verdicts()    # per layer: heads 0-2, the attention layer
        ['no', 'no', 'yes', 'yes', 'no', 'yes', 'no', 'yes']
    """
    check_task(task, model)
    check_seed(seed)
    check_instance("policy", policy, DecisionPolicy, " (e.g. ABLATION_POLICY.with_budget(n))")
    methods = tuple(check_choices("methods", methods, METHODS))
    if estimate and len(methods) != 1:
        raise MechmemError("an estimated ablation takes one method")
    check_choice("metric", metric, ABLATION_METRICS)
    threshold = ABLATION_THRESHOLDS[metric] if threshold is None else check_number("threshold", threshold)
    device = model_device(model)
    generator = torch.Generator().manual_seed(seed)
    reference = task_metric(task, metric, policy.budget, generator=generator)[0].to(device)
    resampler = torch.Generator().manual_seed(seed + 1)
    checker = FirstRoundCheck()

    def measure(k: int, gen: torch.Generator) -> tuple[AblationResult, dict[str, RatioMoments]]:
        tokens, metric_fn, name = task_metric(task, metric, k, generator=gen)
        args = (model, tokens.to(device), metric_fn)
        shared = {"reference": reference, "generator": resampler, "metric_name": name}
        if not estimate:
            found = ablate_heads(*args, methods=methods, **shared)
        else:  # the first round falls back inside; its check decides every round's method
            found = checker.measure(
                FAMILY,
                lambda kept: attribute_ablation(
                    *args, method=methods[0], fallback=kept is None, exact_variants=kept, **shared
                ),
                lambda failed: failed or ablate_heads(*args, methods=methods, **shared),
                lambda r: ("exact_index" in r.info, r.info.get("exact_index"), r.info),
            )
        changes = found.sequences.changes.reshape(k, len(methods), -1)
        return found, {FAMILY: RatioMoments.from_values(changes, found.sequences.weights)}

    run = run_rounds(
        measure,
        {FAMILY: threshold},
        policy=policy,
        generator=generator,
        absolute=(FAMILY,),
        axes={FAMILY: ("method", "variant")},
    )
    rounds, first_info = run.records, checker.checks.get(FAMILY)
    sequences = SequenceChanges(
        *(torch.cat([getattr(r.sequences, f) for r in rounds]) for f in ("changes", "weights", "numerators"))
    )
    total = sequences.weights.sum().clamp_min(1e-12)
    baseline = float(sequences.numerators.sum() / total)
    info = dict(rounds[0].info)
    if first_info is not None and "check" in first_info:
        info["check"] = first_info["check"]
    info |= {"n_sequences": len(sequences.weights), "metric": metric}
    return AblationResult(
        rounds[0].metric_name,
        baseline,
        methods,
        *layer_parts(model, baseline + sequences.changes.sum(0) / total, len(methods)),
        info=info,
        intervals=sequences.intervals(len(methods), model.cfg),
        sequences=sequences,
        decision=run.decision[FAMILY],
    )


def decision_line(result: AblationResult) -> str:
    """The decision in words: how many components matter, do not, or are undecided, and why it stopped."""
    d = result.decision
    n, threshold = result.info.get("n_sequences", d.n), float(d.threshold.flatten()[0])
    metric = result.info.get("metric", "loss")
    what = {"loss": "the loss", "accuracy": "the accuracy", "logit_diff": "the logit difference"}[metric]
    matter = f"matter (|change of {what}| decided >= {threshold:g} {UNITS[metric]})"
    line = f'Decided over rounds of sequences (docs/decisions.md, "Ablation"): {n} sequences; ' + d.tally(
        "ablations", matter, "sequences"
    )
    return line + "."
