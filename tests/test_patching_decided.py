"""Activation patching decided over rounds of pairs (docs/decisions.md, "Activation patching"): the pooled
values equal one patching run over every pair drawn, cells of a planted circuit get their known verdicts, a
model without behaviour stops at the first look, and `mechmem patch` and the report give one number."""

from types import SimpleNamespace

import pytest
import torch
from helpers import assert_no_hooks, build_model, trained_induction_model

import mechmem
from mechmem.analysis.patching import Patcher, decided_patching, patch_checkpoint, run_sweeps
from mechmem.analysis.stats import NO, UNDECIDED, YES, DecisionPolicy
from mechmem.report.sections import ReportContext, patching_section
from mechmem.tasks.base import PatchingPair
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask

SWEEPS = ["attn_head_out_all_pos", "resid_pre"]


@pytest.fixture(scope="module")
def trained():
    return trained_induction_model(), RepeatsTask(RepeatsConfig(d_vocab=16, half=8))


def test_pooled_values_equal_one_run_over_every_pair_drawn(trained):
    model, task = trained
    policy = DecisionPolicy(first=16, budget=128)
    found = decided_patching(model, task, SWEEPS, seed=3, policy=policy)
    assert len(found.decision.looks) >= 2, found.decision  # the equality is about pooling rounds
    # the same pairs, drawn the way the rounds draw them, patched in one run
    gen, pairs, taken = torch.Generator().manual_seed(3), [], 0
    for look in found.decision.looks:
        pairs.append(task.patching_pair(look - taken, generator=gen))
        taken = look
    fields = PatchingPair.__dataclass_fields__
    pooled = PatchingPair(*(torch.cat([getattr(p, f) for p in pairs]) for f in fields))
    reference = run_sweeps(model, pooled, SWEEPS)
    runs = Patcher(model, pooled.clean, pooled.corrupted, pair=pooled).prompt_values
    gap = (runs["clean"] - runs["corrupted"]).double()
    for name in SWEEPS:
        ours, theirs = found.results[name], reference[name]
        torch.testing.assert_close(ours.values, theirs.values, atol=1e-5, rtol=0)
        torch.testing.assert_close(ours.lower, theirs.lower, atol=1e-5, rtol=0)
        # float32 means near 14 pooled in another order: one ulp there is 9.5e-7
        assert (ours.clean, ours.corrupted) == pytest.approx((theirs.clean, theirs.corrupted), abs=1e-5)
        assert ours.intervals.n_prompts == found.n == pooled.clean.shape[0]
        # each cell's test is its share of the gap: the sum of the patch's effects over the sum of the gaps
        effect = theirs.per_prompt.double() - runs["corrupted"].double().reshape(-1, 1, 1)
        share = effect.sum(0) / gap.sum()
        torch.testing.assert_close(ours.decision.mean, share, atol=1e-5, rtol=0)
    assert_no_hooks(model)


def test_cells_of_a_planted_circuit_get_their_known_verdicts():
    model = mechmem.planted_induction_model()  # L1H1 copies the answer; nothing else reaches the logits
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    found = decided_patching(model, task, SWEEPS, seed=0)
    heads = found.results["attn_head_out_all_pos"].decision
    expected = torch.full((2, 3), NO, dtype=torch.int8)
    expected[1, 1] = YES
    assert torch.equal(heads.code, expected)
    assert found.decision.stopped == "settled" and found.decision.looks == (64,)
    assert found.decision["gap"].code.item() == YES
    record = patch_checkpoint(
        SimpleNamespace(model=model, task=task, task_name="repeats"), SWEEPS, n=512, seed=0
    )
    assert record[1]["sweeps"]["attn_head_out_all_pos"]["decision"]["verdict"] == heads.verdicts()
    assert record[1]["decision"]["stopped"] == "settled" and record[1]["n_samples"] == 64


def test_a_model_without_behaviour_stops_at_the_first_look():
    model = build_model(0, n_ctx=24, d_vocab=12)
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    found = decided_patching(model, task, SWEEPS, seed=0)
    assert found.decision.stopped == "no behaviour" and found.decision.looks == (64,)
    assert found.decision["gap"].code.item() == NO
    # the cells' tests stay as their intervals say: patching layer 0's residual stream where the corrupted
    # prompt differs restores the clean run on every pair, so that share is 1 however small the gap
    shares = found.results["resid_pre"].decision
    assert float(shares.mean[0].max()) == pytest.approx(1.0, abs=1e-4)


def test_borderline_cells_draw_more_pairs_and_say_how_many_would_decide(trained):
    model, task = trained
    found = decided_patching(model, task, SWEEPS, seed=0, policy=DecisionPolicy(first=16, budget=64))
    codes = torch.cat([found.results[n].decision.code.flatten() for n in SWEEPS])
    if found.decision.stopped == "budget":  # then some cell is still open and says what would decide it
        assert bool((codes == UNDECIDED).any())
        needed = torch.cat([found.results[n].decision.n_needed.flatten() for n in SWEEPS])
        assert bool((needed[codes == UNDECIDED] > 64).all())
    else:
        assert found.decision.stopped == "settled" and not bool((codes == UNDECIDED).any())
    assert found.decision.looks == DecisionPolicy(first=16, budget=64).looks()[: len(found.decision.looks)]


def test_attribution_rounds_are_checked_once_and_agree_with_exact_patching(trained):
    model, task = trained
    exact = decided_patching(model, task, SWEEPS, seed=1)
    estimate = decided_patching(model, task, SWEEPS, seed=1, method="attribution")
    assert set(estimate.checks) == set(SWEEPS)
    for name in SWEEPS:
        result = estimate.results[name]
        assert result.check == estimate.checks[name]  # the first round's agreement check
        if result.check["trusted"]:
            assert "attribution" in result.method
        else:
            assert result.method.startswith("exact (fallback")
    # where the estimate was trusted and both stopped at the same look, it is close to exact patching
    if exact.decision.looks == estimate.decision.looks:
        a, b = exact.results["attn_head_out_all_pos"], estimate.results["attn_head_out_all_pos"]
        assert torch.corrcoef(torch.stack([a.values.flatten(), b.values.flatten()]))[0, 1] > 0.8


def test_the_command_and_the_report_give_one_number_for_one_seed(trained):
    model, task = trained
    ckpt = SimpleNamespace(model=model, task=task, task_name="repeats")
    _, record = patch_checkpoint(ckpt, None, n=512, seed=2)
    roles = mechmem.head_roles(model, task, n=64, seed=2)
    section = patching_section(ReportContext(model, task, 512, 2, roles))
    assert section.skipped is None
    for name in ("attn_head_out_all_pos", "resid_pre"):
        assert section.findings[name]["values"] == record["sweeps"][name]["values"]
        assert section.findings[name]["decision"] == record["sweeps"][name]["decision"]
    assert section.findings["decision"] == record["decision"]
    assert any("Decided over rounds of pairs" in line for line in section.lines)
