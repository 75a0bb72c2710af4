"""The head-role classifier (`mechmem.analysis.roles`): synthetic evidence with known labels, a head whose
task roles stay undecided saying it fell back, the evidence itself against a naive hook loop, planted 2-layer
models with a recall circuit (previous-token head + induction-style recall head) and an elimination head, in
both head orders, and the README's notebook call giving the report's roles."""

import re

import pytest
import torch
from helpers import ROOT, assert_no_hooks, build_model

from mechmem.analysis.roles import RoleEvidence, RoleResult, RoleThresholds, classify_heads, head_roles
from mechmem.analysis.stats import NO, UNDECIDED, YES
from mechmem.analysis.task_roles import measure_task_evidence
from mechmem.checkpoint import save_checkpoint
from mechmem.report import build_report, circuit_section
from mechmem.tasks.permutation import PermutationConfig, PermutationTask
from mechmem_papers.permutation.planted import planted_permutation_config, planted_permutation_model

ROLES = ("recall", "elimination")


def evidence(recall, elimination, *, attention=1.0):
    """Task evidence [1 head] from transfer scores; attention on every role's keys set to `attention`."""
    rec, eli = torch.tensor([recall], dtype=torch.float), torch.tensor([elimination], dtype=torch.float)
    full = torch.full_like(rec, attention)
    return {
        "recall_transfer": rec,
        "elimination_transfer": eli,
        "recall_attention": full,
        "elimination_attention": full,
    }


def labels(ev, t=None):
    return [h.role for h in classify_heads(ev, ROLES, t)]


def test_labels_follow_the_shares_of_each_role():
    # Head 0 carries most of the recall transfer although it is small in absolute terms (a jointly carried
    # role); head 1 carries the elimination transfer and some recall.
    assert labels(evidence([0.26, 0.15], [0.01, 0.88])) == ["recall", "elimination"]
    assert labels(evidence([0.15, 0.26], [0.88, 0.01])) == ["elimination", "recall"]
    # Both heads share both roles evenly: no lead, both score -> "shared".
    assert labels(evidence([0.4, 0.4], [0.4, 0.4])) == ["shared", "shared"]
    # Nothing moves the answer: no task role (and no pattern either).
    assert labels(evidence([0.05, 0.02], [0.03, 0.0])) == ["none", "none"]


def test_a_role_absent_from_the_model_gives_no_share():
    # One head, elimination only (a Task 1 model): the tiny recall transfer must not count as a recall share.
    result = classify_heads(evidence([0.004], [0.95]), ROLES)
    assert [h.role for h in result] == ["elimination"]
    assert result[0].evidence["recall_share"] == 0.0 and result[0].evidence["elimination_share"] == 1.0


def test_a_head_reads_its_role_evidence_as_a_record():
    head = classify_heads(evidence([0.26], [0.01]), ROLES)[0]
    recall = head.task("recall")
    assert isinstance(recall, RoleEvidence) and recall.role == "recall"
    assert (recall.score, recall.share, recall.attention) == (
        head.evidence["recall_score"],
        head.evidence["recall_share"],
        head.evidence["recall_attention"],
    )
    assert recall.verdict is None and recall.bounds("score") == ""  # point evidence: no verdict, no bounds


def test_thresholds_are_used():
    ev = evidence([0.3, 0.0], [0.0, 0.0])
    assert labels(ev) == ["recall", "none"]
    assert labels(ev, RoleThresholds(min_score=0.35)) == ["none", "none"]
    assert labels(evidence([0.3, 0.0], [0.0, 0.0], attention=0.3)) == ["none", "none"]  # attention < 0.4
    close = evidence([0.5, 0.3], [0.2, 0.3])  # recall shares 0.625 / 0.375, elimination shares 0.4 / 0.6
    assert labels(close) == ["shared", "shared"]
    assert labels(close, RoleThresholds(share_margin=0.2)) == ["recall", "elimination"]


def test_path_patching_score_credits_an_effect_through_the_mlp():
    ev = evidence([0.02, 0.0], [0.0, 0.9])
    ev["recall_via_mlp"] = torch.tensor([[0.3, 0.0]])
    ev["elimination_via_mlp"] = torch.tensor([[0.0, 0.9]])
    heads = classify_heads(ev, ROLES)
    assert [h.role for h in heads] == ["recall", "elimination"]
    assert heads[0].evidence["recall_score"] == pytest.approx(0.3)


def test_task_roles_take_precedence_over_patterns():
    ev = evidence([0.9, 0.0, 0.0], [0.0, 0.0, 0.0])
    ev["induction"] = torch.tensor([[0.9, 0.8, 0.2]])
    ev["previous_token"] = torch.tensor([[0.0, 0.6, 0.49]])
    heads = classify_heads(ev, ROLES)
    assert [h.role for h in heads] == ["recall", "induction", "none"]  # the highest passing pattern names it
    assert any("induction" in note for note in heads[0].notes)
    assert [h.role for h in classify_heads(ev, ROLES, RoleThresholds(attention=0.85))] == [
        "recall",
        "none",
        "none",
    ]


@pytest.fixture(scope="module")
def task():
    return PermutationTask(PermutationConfig(vocab_size=4))


@pytest.mark.parametrize("recall_head", [1, 0])
def test_planted_roles_are_found_in_either_head_order(task, recall_head):
    model = planted_permutation_model(4, recall_head=recall_head)
    result = head_roles(model, task, n=200, seed=1)
    layer1 = ["elimination", "elimination"]
    layer1[recall_head] = "recall"
    # The previous-token head feeds the recall head but its own output is the same in both runs of each pair.
    assert result.labels == [["previous-token", "none"], layer1]
    ev = {(h.layer, h.head): h.evidence for h in result.heads}
    assert (
        ev[(1, recall_head)]["recall_transfer"] > 0.9
        and ev[(1, 1 - recall_head)]["elimination_transfer"] > 0.9
    )
    assert ev[(1, recall_head)]["recall_attention"] > 0.99
    assert "recall_via_mlp" not in ev[(1, recall_head)]  # attention-only: no MLP path
    assert result.heads_with("recall") == [(1, recall_head)]
    assert_no_hooks(model)


@torch.no_grad()
def test_evidence_equals_a_naive_hook_loop(task):
    """transfer, via_mlp and damage per head against one
    run_with_hooks per head, on a random model with an MLP."""
    model = build_model(seed=2, n_layers=2, d_vocab=task.d_vocab, n_ctx=task.seq_len, normalization_type="LN")
    probes = task.role_probes(64, generator=torch.Generator().manual_seed(0))
    reference = task.eval_batch(64, generator=torch.Generator().manual_seed(5)).tokens
    ev = measure_task_evidence(model, probes, reference)
    model.set_use_hook_mlp_in(True)
    rows = torch.arange(64)

    def p(logits, answer, pos):
        return logits[rows, pos].softmax(-1)[rows, answer].mean()

    for probe in probes:
        pair = probe.pair

        _, clean = model.run_with_cache(pair.clean)
        _, counter = model.run_with_cache(pair.corrupted)
        _, ref = model.run_with_cache(reference)
        base_cf, base_ok = (
            p(model(pair.clean), pair.incorrect, pair.answer_pos),
            p(model(pair.clean), pair.correct, pair.answer_pos),
        )
        for layer in range(2):
            name = f"blocks.{layer}.attn.hook_z"
            for head in range(2):

                def patch(z, hook, src=counter[name], head=head):
                    z[:, :, head] = src[:, :, head]
                    return z

                def ablate(z, hook, src=ref[name], head=head):
                    z[:, :, head] = src[:, :, head].mean(0)
                    return z

                delta = (counter[name][:, :, head] - clean[name][:, :, head]) @ model.blocks[layer].attn.W_O[
                    head
                ]
                mlp_hooks = [
                    (f"blocks.{l}.hook_mlp_in", lambda x, hook, d=delta: x + d) for l in range(layer, 2)
                ]
                want = {
                    "transfer": p(
                        model.run_with_hooks(pair.clean, fwd_hooks=[(name, patch)]),
                        pair.incorrect,
                        pair.answer_pos,
                    )
                    - base_cf,
                    "via_mlp": p(
                        model.run_with_hooks(pair.clean, fwd_hooks=mlp_hooks), pair.incorrect, pair.answer_pos
                    )
                    - base_cf,
                    "damage": base_ok
                    - p(
                        model.run_with_hooks(pair.clean, fwd_hooks=[(name, ablate)]),
                        pair.correct,
                        pair.answer_pos,
                    ),
                }
                for key, value in want.items():
                    got = ev[f"{probe.role}_{key}"][layer, head]
                    assert float(got) == pytest.approx(float(value), abs=1e-5), (probe.role, key, layer, head)
    model.set_use_hook_mlp_in(False)
    assert_no_hooks(model)


def test_random_models_get_no_task_role(task):
    for seed in range(3):
        model = build_model(
            seed=seed, n_layers=1, d_model=32, n_heads=2, d_mlp=64, d_vocab=task.d_vocab, n_ctx=task.seq_len
        )
        roles = {h.role for h in head_roles(model, task, n=200, seed=0).heads}
        assert not roles & {"recall", "elimination", "shared"}


def undecided_evidence(verdict):
    """Two heads: L0H0 a clear duplicate-token pattern, L0H1 an induction pattern undecided at the budget;
    L0H0's recall carries the sequential `verdict` (its elimination is undecided), L0H1's task roles NO."""
    ev = evidence([0.3, 0.0], [0.0, 0.0])
    for role in ROLES:
        ev[f"{role}_verdict"] = torch.tensor([[verdict if role == "recall" else UNDECIDED, NO]]).float()
        ev[f"{role}_score_verdict"] = torch.tensor([[verdict, NO]]).float()
        ev[f"{role}_lead_lower"] = torch.tensor([[0.5, 0.0]])
    ev["duplicate_token"] = torch.tensor([[0.9, 0.1]])
    ev["induction"] = torch.tensor([[0.0, 0.45]])
    ev["induction_lower"] = torch.tensor([[0.0, 0.3]])
    ev["induction_n_needed"] = torch.tensor([[0.0, 500.0]])
    return ev


def test_a_head_whose_task_roles_stay_undecided_says_it_fell_back():
    heads = classify_heads(undecided_evidence(UNDECIDED), ROLES)
    result = RoleResult(heads, ROLES, RoleThresholds(), {"n": 64})
    assert [h.role for h in heads] == ["duplicate-token", "none"]
    assert heads[0].fallback and heads[0].undecided == ["recall", "elimination"]
    assert not heads[1].fallback and heads[1].undecided == ["induction"]
    fell_back = (
        "L0H0 duplicate-token (fell back to its attention pattern: task roles recall, elimination undecided)"
    )
    assert result.summary() == f"{fell_back}, L0H1 none (undecided: induction)"
    assert fell_back in repr(result) and fell_back in repr(heads[0])
    frame = result.to_dataframe().groupby("head").first()
    assert frame["fallback"].tolist() == [True, False]
    assert frame["undecided"].tolist() == ["recall, elimination", "induction"]
    assert result.to_dict()["heads"][0]["fallback"] and result.to_dict()["heads"][1]["undecided"] == [
        "induction"
    ]
    lines = circuit_section(result).lines
    assert f"Heads: {result.summary()}." in lines and any(line.startswith(f"{fell_back}: ") for line in lines)


def test_a_decided_task_role_is_no_fallback():
    heads = classify_heads(undecided_evidence(YES), ROLES)
    assert [h.role for h in heads] == ["recall", "none"]
    assert not heads[0].fallback and heads[0].undecided == [] and heads[0].label == "L0H0 recall"
    assert (
        RoleResult(heads, ROLES, RoleThresholds()).summary()
        == "L0H0 recall, L0H1 none (undecided: induction)"
    )


def test_the_readme_notebook_call_names_the_heads_the_report_names(task, tmp_path, monkeypatch):
    """The README's notebook snippet, run as written on a checkpoint at t2/ckpt.pt, measures the roles with
    the report's own call (same sequences, seed and policy), so it prints the report's answer."""
    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"## Use it from a notebook\n\n```python\n(.*?)```", readme, re.DOTALL).group(1)
    model = planted_permutation_model(4)
    save_checkpoint(
        tmp_path / "t2" / "ckpt.pt",
        model=model,
        model_config=planted_permutation_config(4),
        task_name="permutation",
        task_config=task.config,
    )
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(snippet, "README.md", "exec"), namespace)  # noqa: S102 - the README's own snippet
    report = build_report(model, task, sections=()).section("circuit").findings
    roles = namespace["roles"]
    assert roles.summary() == report["summary"] and roles.labels == report["labels"]
    assert (roles.info["n"], roles.info["seed"]) == (report["n"], report["seed"])


def test_a_pattern_still_open_on_some_query_tokens_is_undecided():
    """The rule stopped at its budget with token tests open: no overall test is undecided (n_needed 0), yet
    more sequences could name the head, so it is "none (undecided: induction)", not a plain "none"."""
    ev = evidence([0.0], [0.0])
    ev |= {"induction": torch.tensor([[0.45]]), "induction_lower": torch.tensor([[0.3]])}
    ev |= {"induction_n_needed": torch.tensor([[0.0]]), "induction_open": torch.tensor([[1.0]])}
    (head,) = classify_heads(ev, ROLES)
    assert head.label == "L0H0 none (undecided: induction)" and "query tokens" in head.notes[0]
    ev["induction_open"] = torch.tensor([[0.0]])
    assert classify_heads(ev, ROLES)[0].label == "L0H0 none"
