"""Task roles decided by the sequential rule (`mechmem.analysis.task_roles`, docs/decisions.md, "Task
roles"): per-sequence evidence against one run_with_hooks per head, intervals against `mean_interval` of
those values, shares against the point rule's, and the verdicts on planted models and hand-made evidence."""

import pytest
import torch
from helpers import assert_no_hooks, build_model

from mechmem.analysis.roles import RoleThresholds, classify_heads, head_roles
from mechmem.analysis.stats import NO, UNDECIDED, YES, DecisionPolicy, mean_interval
from mechmem.analysis.task_roles import decide_task_roles, measure_task_evidence, probe_values
from mechmem.tasks.permutation import PermutationConfig, PermutationTask
from mechmem_papers.permutation.planted import planted_permutation_model

ROLES = ("recall", "elimination")


@pytest.fixture(scope="module")
def task():
    return PermutationTask(PermutationConfig(vocab_size=4))


@pytest.fixture(scope="module")
def mlp_model(task):
    return build_model(seed=2, n_layers=2, d_vocab=task.d_vocab, n_ctx=task.seq_len, normalization_type="LN")


@torch.no_grad()
def test_per_sequence_values_equal_a_naive_loop(task, mlp_model):
    """Every sequence's transfer and attention, head by head, against one run_with_hooks per head."""
    model = mlp_model
    probe = task.role_probes(16, generator=torch.Generator().manual_seed(3))[0]
    values = probe_values(model, probe)
    pair, rows = probe.pair, torch.arange(16)
    clean_logits, clean = model.run_with_cache(pair.clean)
    _, counter = model.run_with_cache(pair.corrupted)
    base = clean_logits[rows, pair.answer_pos].softmax(-1)[rows, pair.incorrect]
    for layer in range(2):
        name = f"blocks.{layer}.attn.hook_z"
        pattern = clean[f"blocks.{layer}.attn.hook_pattern"][rows, :, pair.answer_pos]  # [batch head k_pos]
        for head in range(model.cfg.n_heads):

            def patch(z, hook, src=counter[name], head=head):
                z[:, :, head] = src[:, :, head]
                return z

            logits = model.run_with_hooks(pair.clean, fwd_hooks=[(name, patch)])
            want = logits[rows, pair.answer_pos].softmax(-1)[rows, pair.incorrect] - base
            torch.testing.assert_close(values["transfer"][:, layer, head], want, atol=1e-5, rtol=0)
            attention = (pattern[:, head] * probe.keys.float()).sum(-1)
            torch.testing.assert_close(values["attention"][:, layer, head], attention, atol=1e-6, rtol=0)
    assert values["via_mlp"].shape == values["damage"].shape == (16, 2, model.cfg.n_heads)
    assert_no_hooks(model)


@torch.no_grad()
def test_intervals_and_shares_equal_their_definitions(task, mlp_model):
    """At one look, each quantity's marginal interval is `mean_interval` of the per-sequence values of the
    same draw, and each share is the point rule's share of the means."""
    model, n = mlp_model, 48
    reference = task.eval_batch(32, generator=torch.Generator().manual_seed(5)).tokens
    policy = DecisionPolicy(first=n, budget=n)
    got = decide_task_roles(
        model,
        task,
        generator=torch.Generator().manual_seed(9),
        reference=reference,
        thresholds=RoleThresholds(),
        policy=policy,
    )
    probes = task.role_probes(n, generator=torch.Generator().manual_seed(9))
    assert got.looks == (n,) and got.roles == ROLES
    points = {}
    for probe in probes:
        values = probe_values(model, probe, reference)
        for q, v in values.items():
            mean, lower, upper = mean_interval(v.double())
            key = f"{probe.role}_{q}"
            points[key] = v.mean(0)
            torch.testing.assert_close(got.evidence[key], mean.float(), atol=1e-6, rtol=0)
            torch.testing.assert_close(got.evidence[f"{key}_lower"], lower.float(), atol=1e-5, rtol=0)
            torch.testing.assert_close(got.evidence[f"{key}_upper"], upper.float(), atol=1e-5, rtol=0)
    point_rule = {h.name: h.evidence for h in classify_heads(points, ROLES)}
    decided = {h.name: h.evidence for h in classify_heads(got.evidence, ROLES)}
    for name, ev in decided.items():
        for role in ROLES:
            assert ev[f"{role}_share"] == pytest.approx(point_rule[name][f"{role}_share"], abs=1e-5)
            low, high = ev[f"{role}_share_corrected_lower"], ev[f"{role}_share_corrected_upper"]
            assert low <= ev[f"{role}_share"] <= high or ev[f"{role}_share"] == 0.0


def test_planted_heads_are_decided_at_the_first_look(task):
    """A planted circuit's roles are clear: the first look (64 sequences) settles them, both head orders."""
    for recall_head in (0, 1):
        model = planted_permutation_model(4, recall_head=recall_head)
        roles = head_roles(model, task, n=1000, seed=2)
        decision = roles.info["task_decision"]
        assert decision["looks"] == [64] and decision["stopped"] == "settled"
        assert roles.heads_with("recall") == [(1, recall_head)]
        assert roles.heads_with("elimination") == [(1, 1 - recall_head)]
        ev = {h.name: h.evidence for h in roles.heads}[f"L1H{recall_head}"]
        assert ev["recall_verdict"] == YES and ev["elimination_verdict"] == NO
        assert ev["recall_transfer_corrected_lower"] >= 0.1 and ev["recall_lead_lower"] >= 0.25


def test_random_models_decide_no_task_role(task):
    for seed in range(2):
        model = build_model(
            seed=seed, n_layers=1, d_model=32, n_heads=2, d_mlp=64, d_vocab=task.d_vocab, n_ctx=task.seq_len
        )
        roles = head_roles(model, task, n=256, seed=0)
        assert not {h.role for h in roles.heads} & {"recall", "elimination", "shared"}
        assert roles.info["task_n"] <= 256


def _decided(recall, elimination, *, verdicts, needed=0.0):
    """Hand-made evidence of one head with sequential verdicts (codes) per role."""
    ev = {}
    for role, value, code in zip(ROLES, (recall, elimination), verdicts, strict=True):
        t = torch.tensor([[value]])
        ev |= {
            f"{role}_transfer": t,
            f"{role}_attention": torch.ones(1, 1),
            f"{role}_score": t,
            f"{role}_share": t,
            f"{role}_lead_lower": t - 0.3,
            f"{role}_score_verdict": torch.tensor([[float(YES if value >= 0.1 else NO)]]),
            f"{role}_verdict": torch.tensor([[float(code)]]),
            f"{role}_n_needed": torch.tensor([[needed if code == UNDECIDED else 0.0]]),
        }
    return ev


def test_verdicts_name_the_role_and_undecided_names_none():
    """The classifier follows the verdicts, not the point values: an undecided role names nothing (and says
    how many sequences would decide it), a 'no' for every role with two scores is shared."""
    [head] = classify_heads(_decided(0.9, 0.0, verdicts=(YES, NO)), ROLES)
    assert head.role == "recall" and "corrected 95% intervals" in head.notes[0]
    [head] = classify_heads(_decided(0.9, 0.0, verdicts=(UNDECIDED, NO), needed=2048.0), ROLES)
    assert head.role == "none"
    assert any("recall undecided at the budget" in n and "about 2048 sequences" in n for n in head.notes)
    [head] = classify_heads(_decided(0.5, 0.4, verdicts=(NO, NO)), ROLES)
    assert head.role == "shared"
    [head] = classify_heads(_decided(0.5, 0.4, verdicts=(NO, UNDECIDED), needed=float("inf")), ROLES)
    assert head.role == "none" and any("no number of sequences would" in n for n in head.notes)


def test_means_of_the_values_are_the_point_evidence(task, mlp_model):
    probes = task.role_probes(24, generator=torch.Generator().manual_seed(1))
    means = measure_task_evidence(mlp_model, probes)
    for probe in probes:
        for q, v in probe_values(mlp_model, probe).items():
            torch.testing.assert_close(means[f"{probe.role}_{q}"], v.mean(0))
