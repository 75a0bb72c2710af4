"""Ablation decided over rounds of sequences (docs/decisions.md, "Ablation"): the pooled deltas equal plain
ablation of the same sequences, a planted circuit's heads get their known verdicts, and `mechmem ablate` and
the report give one number for one seed."""

import argparse

import pytest
import torch
from helpers import assert_no_hooks, build_model, trained_induction_model

import mechmem
from mechmem.analysis.ablation import ablation_values, naive_head_ablation, task_metric
from mechmem.analysis.stats import NO, YES, DecisionPolicy
from mechmem.cli.ablate import ablate
from mechmem.report.sections import ReportContext, ablation_section
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask


@pytest.fixture(scope="module")
def trained():
    return trained_induction_model(), RepeatsTask(RepeatsConfig(d_vocab=16, half=8))


def rounds_of(task, seed: int, policy: DecisionPolicy, looks: tuple[int, ...], metric: str = "loss"):
    """The reference and each round's (tokens, metric), drawn the way `decided_ablation` draws them."""
    gen = torch.Generator().manual_seed(seed)
    reference = task_metric(task, metric, policy.budget, generator=gen)[0]
    out, taken = [], 0
    for look in looks:
        tokens, metric_fn, _ = task_metric(task, metric, look - taken, generator=gen)
        out.append((tokens, metric_fn))
        taken = look
    return reference, out


@pytest.mark.parametrize("metric", ["loss", "accuracy", "logit_diff"])
def test_pooled_deltas_equal_plain_ablation_of_the_same_sequences(trained, metric):
    model, task = trained
    policy = DecisionPolicy(first=16, budget=128)
    result = mechmem.decided_ablation(model, task, seed=5, policy=policy, metric=metric)
    looks = tuple(p for p in policy.looks() if p <= result.decision.n)
    assert len(looks) >= 2, result.decision  # the equality is about pooling rounds
    assert result.info["metric"] == metric
    reference, rounds = rounds_of(task, 5, policy, looks, metric)
    # per round one forward pass per head with run_with_hooks (the naive reference), pooled as a ratio of sums
    numerator, weight, base = torch.zeros(2, 2, dtype=torch.float64), 0.0, 0.0
    for tokens, measure in rounds:
        values = ablation_values(model, tokens, "mean", reference=reference)
        w = float(measure.weights.sum())
        numerator += naive_head_ablation(model, tokens, measure, values).double() * w
        base += float(measure(model(tokens).detach())) * w
        weight += w
    torch.testing.assert_close(result.heads[0].double(), numerator / weight, atol=1e-4, rtol=0)
    assert result.baseline == pytest.approx(base / weight, abs=1e-5)
    assert result.intervals.n_sequences == looks[-1] == result.info["n_sequences"]
    assert_no_hooks(model)


def test_a_planted_circuit_gets_its_known_verdicts_and_a_random_model_none():
    planted = mechmem.planted_induction_model()  # L0H2 previous-token, L1H1 induction head
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    result = mechmem.decided_ablation(planted, task)
    heads = result.decision.code.reshape(2, 4)[:, :3]  # per layer: heads 0-2, then the attention layer
    expected = torch.full((2, 3), NO, dtype=torch.int8)
    expected[0, 2] = expected[1, 1] = YES
    assert torch.equal(heads, expected)
    assert result.decision.n == 64 and "decision" in result.to_dict()
    random_model = build_model(0, n_ctx=24, d_vocab=12)
    quiet = mechmem.decided_ablation(random_model, task)
    assert quiet.decision.verdicts() == ["no"] * len(quiet.decision.verdicts())


def test_the_estimate_keeps_its_first_rounds_exact_variants(trained):
    model, task = trained
    result = mechmem.decided_ablation(
        model, task, seed=0, estimate=True, policy=DecisionPolicy(first=32, budget=128)
    )
    assert "check" in result.info
    if "exact_index" in result.info:  # trusted: every round estimated, with the same variants exact
        assert result.info["method"].startswith("first-order attribution")
    else:
        assert result.info["method"].startswith("exact (fallback")
    exact = mechmem.decided_ablation(model, task, seed=0, policy=DecisionPolicy(first=32, budget=128))
    if exact.decision.n == result.decision.n:  # the same sequences: the estimate tracks the exact deltas
        a, b = exact.heads.flatten() - exact.baseline, result.heads.flatten() - result.baseline
        assert torch.corrcoef(torch.stack([a, b]))[0, 1] > 0.8


@pytest.mark.parametrize("metric", ["accuracy", "logit_diff"])
def test_the_other_metrics_give_a_planted_circuit_its_known_verdicts(metric):
    planted = mechmem.planted_induction_model()  # L0H2 previous-token, L1H1 induction head
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    result = mechmem.decided_ablation(planted, task, metric=metric)
    heads = result.decision.code.reshape(2, 4)[:, :3]
    expected = torch.full((2, 3), NO, dtype=torch.int8)
    expected[0, 2] = expected[1, 1] = YES
    assert torch.equal(heads, expected), result.decision.verdicts()
    threshold = {"accuracy": 0.05, "logit_diff": 0.1}[metric]
    assert float(result.decision.threshold.flatten()[0]) == threshold


def test_the_command_decides_every_metric_as_the_function_does(trained):
    model, task = trained
    ckpt = argparse.Namespace(model=model, task=task, task_name="repeats")
    args = argparse.Namespace(metric="logit_diff", methods=["mean", "zero"], n_samples=128, seed=2)
    command = ablate(ckpt, args)
    direct = mechmem.decided_ablation(
        model,
        task,
        seed=2,
        policy=DecisionPolicy(first=64, budget=128),
        methods=("mean", "zero"),
        metric="logit_diff",
    )
    assert command.to_dict()["results"] == direct.to_dict()["results"]
    assert command.to_dict()["decision"] == direct.to_dict()["decision"]
    assert command.metric_name.startswith("logit_diff: ")


def test_the_command_and_the_report_give_one_number_for_one_seed(trained):
    model, task = trained
    ckpt = argparse.Namespace(model=model, task=task, task_name="repeats")
    args = argparse.Namespace(metric="loss", methods=["mean"], n_samples=512, seed=3)
    command = ablate(ckpt, args)
    roles = mechmem.head_roles(model, task, n=64, seed=3)
    section = ablation_section(ReportContext(model, task, 512, 3, roles))
    assert section.findings["results"] == command.to_dict()["results"]
    assert section.findings["decision"] == command.to_dict()["decision"]
    assert any("Decided over rounds of sequences" in line for line in section.lines)
