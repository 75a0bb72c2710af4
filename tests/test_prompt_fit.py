"""The prompt-fit check: its losses equal plain TransformerLens computations, its rule flags exactly what it
says, a planted model that does induction only after the birth task's triggers is flagged on random repeats
but not on its own task's data, in the commands' text and JSON and in the report, and a model given a task it
was not trained on is flagged on that task's own data."""

import json
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from helpers import build_model

import mechmem
from mechmem.analysis import distribution
from mechmem.analysis.distribution import (
    FACTOR,
    MARGIN_NATS,
    PromptFit,
    own_data_fit,
    prompt_fit,
    prompt_loss,
    repeats_fit,
)
from mechmem.cli.main import main
from mechmem.io import dumps
from mechmem.report import build_report, circuit_graph
from mechmem.report.circuit_graph import edges_section
from mechmem.report.document import summary_rows, to_markdown
from mechmem.report.sections import heads_section
from mechmem.tasks import build_task
from mechmem.tasks.base import Batch

T = 24
LETTERS = "abcdefghijkl"


@pytest.fixture(scope="module")
def birth_config(tmp_path_factory):
    """The birth task on a small random corpus of 12 letters (so the planted model stays small and fast),
    2 fixed triggers, T = 24."""
    draw = torch.randint(len(LETTERS), (4000,), generator=torch.Generator().manual_seed(0))
    path = tmp_path_factory.mktemp("corpus") / "letters.txt"
    path.write_text("".join(LETTERS[i] for i in draw.tolist()))
    return {"seq_len": T, "n_triggers": 2, "fixed_triggers": True, "corpus": str(path)}


@pytest.fixture(scope="module")
def birth(birth_config):
    return build_task("birth", birth_config)


def trigger_only_induction(task):
    """The planted induction model with its induction head's query cut for every token but the task's fixed
    triggers: it copies the token after an earlier occurrence only when the current token is a trigger (a
    non-trigger query attends uniformly), as a birth model with fixed triggers learns to."""
    model = mechmem.planted_induction_model(task.d_vocab, task.seq_len)
    others = torch.ones(task.d_vocab, dtype=torch.bool)
    others[task.sampler.fixed] = False
    with torch.no_grad():
        model.blocks[1].attn.W_Q[1, others.nonzero().flatten()] = 0.0
    return model


@pytest.fixture(scope="module")
def gated(birth):
    return trigger_only_induction(birth)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def test_batch_loss_equals_transformer_lens_per_token_loss():
    model = build_model(d_vocab=12, n_ctx=16)
    task = build_task("repeats", {"d_vocab": 12, "half": 8})
    batch = task.eval_batch(16, generator=gen(0))
    per_token = model(batch.tokens, return_type="loss", loss_per_token=True)  # predicts tokens[:, 1:]
    mask = batch.loss_mask[:, :-1]  # the last target is padding, never masked in
    expected = float((per_token * mask).sum() / mask.sum())
    assert prompt_loss(model, batch) == pytest.approx(expected, abs=1e-5)


def test_pair_loss_equals_a_loop_over_prompts():
    model = build_model(d_vocab=12, n_ctx=16)
    pair = build_task("repeats", {"d_vocab": 12, "half": 8}).patching_pair(8, generator=gen(0))
    with torch.no_grad():
        logits = model(pair.clean)
    losses = [
        -float(F.log_softmax(logits[i, int(pair.answer_pos[i])], -1)[int(pair.correct[i])]) for i in range(8)
    ]
    assert prompt_loss(model, pair) == pytest.approx(sum(losses) / 8, abs=1e-5)


def test_chunks_give_the_whole_batch_value(monkeypatch, birth):
    model = build_model(d_vocab=birth.d_vocab, n_ctx=T)
    whole = prompt_fit(model, birth, birth.patching_pair(12, generator=gen(0)), generator=gen(1))
    batch = birth.eval_batch(12, generator=gen(2))
    whole_batch = prompt_fit(model, birth, batch, generator=gen(3))
    monkeypatch.setattr(distribution, "LOGITS_BUDGET", 1)  # one sequence per pass
    rows = prompt_fit(model, birth, birth.patching_pair(12, generator=gen(0)), generator=gen(1))
    rows_batch = prompt_fit(model, birth, batch, generator=gen(3))
    assert rows.prompt_loss == pytest.approx(whole.prompt_loss, abs=1e-5)
    assert rows.task_loss == pytest.approx(whole.task_loss, abs=1e-5)
    assert rows_batch.prompt_loss == pytest.approx(whole_batch.prompt_loss, abs=1e-5)
    assert rows_batch.task_loss == pytest.approx(whole_batch.task_loss, abs=1e-5)


def test_at_most_fit_prompts_are_scored_the_first_ones(monkeypatch, birth):
    model = build_model(d_vocab=birth.d_vocab, n_ctx=T)
    batch = birth.eval_batch(10, generator=gen(0))
    pair = birth.patching_pair(10, generator=gen(1))
    monkeypatch.setattr(distribution, "FIT_PROMPTS", 4)
    first = Batch(batch.tokens[:4], batch.targets[:4], batch.loss_mask[:4])
    fit = prompt_fit(model, birth, batch, generator=gen(2))
    assert fit.n == 4 and fit.prompt_loss == pytest.approx(prompt_loss(model, first), abs=1e-6)
    fit = prompt_fit(model, birth, pair, generator=gen(2))
    assert fit.n == 4 and fit.prompt_loss == pytest.approx(
        prompt_loss(model, pair.rows(slice(0, 4))), abs=1e-6
    )


@pytest.mark.parametrize("task_loss", [0.0, 0.01, 0.5, 2.0, 2.5, 4.0])
def test_the_rule_needs_both_the_margin_and_the_factor(task_loss):
    def fit(prompt):
        return PromptFit("p", 8, prompt, prompt, prompt, 10**6, task_loss, "r")

    threshold = max(task_loss + MARGIN_NATS, FACTOR * task_loss)
    assert fit(threshold + 1e-6).off_distribution
    assert not fit(threshold - 1e-6).off_distribution
    assert not fit(task_loss).off_distribution and not fit(task_loss / 2).off_distribution
    flagged = fit(threshold + 0.1)
    assert flagged.message.startswith("WARNING prompt fit: OFF") and flagged.to_dict()["off_distribution"]
    assert flagged.difference == pytest.approx(threshold + 0.1 - task_loss)
    record = json.loads(dumps(flagged.to_dict()))  # strict JSON: an infinite ratio (task loss 0) is null
    assert record["ratio"] is None if task_loss == 0 else math.isclose(record["ratio"], flagged.ratio)


def test_a_bare_model_has_no_reference_data():
    model = mechmem.planted_induction_model()
    pair = build_task("repeats", {"d_vocab": 12, "half": 8}).patching_pair(8, generator=gen(1))
    fit = prompt_fit(model, None, pair, generator=gen(1))
    assert fit.task_loss is None and fit.ratio is None and not fit.off_distribution
    assert fit.message.startswith("prompt fit: on the model's distribution") and "no task-data" in fit.message
    assert fit.uniform_loss == pytest.approx(math.log(12))

    class NoConfig(torch.nn.Module):  # a model without TransformerLens's cfg, as the facts models are
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, tokens):
            return self.inner(tokens)

    assert prompt_fit(NoConfig(), None, pair, generator=gen(1)) == fit  # the vocabulary read off the logits


@pytest.mark.parametrize("task_loss", [None, 0.5, 5.2])
def test_prompts_not_shown_better_than_a_uniform_guess_are_flagged(task_loss):
    """5.3 nats against ln 64 = 4.16 passed the relative rule alone when the task-data loss was as high."""
    uniform = math.log(64)

    def fit(lower, upper, point=5.3):
        return PromptFit("p", 8, point, lower, upper, 64, task_loss, None if task_loss is None else "r")

    flagged = fit(5.2, 5.4)
    assert flagged.off_distribution and flagged.no_better_than_uniform
    assert flagged.reasons[0] == "no better than a uniform guess (ln 64)" and "OFF" in flagged.message
    assert flagged.above_task_data == (task_loss == 0.5)
    assert fit(3.0, uniform).off_distribution  # the interval reaches the guess: not shown better
    near = fit(3.0, uniform - 1e-6, point=3.5)
    assert not near.no_better_than_uniform and near.off_distribution == (task_loss == 0.5)


def test_a_model_given_a_task_it_was_not_trained_on_is_flagged_on_that_task():
    """The planted recall/elimination model (a permutation model) with the generic repeats task, as
    `save_model` attaches it: the own-data check compares the repeats data with a second draw of it, which
    cannot differ, so only the uniform guess can flag it."""
    from mechmem.tasks.generic import RepeatsConfig
    from mechmem_papers.permutation.planted import planted_permutation_model

    model = planted_permutation_model()
    repeats = build_task("repeats", RepeatsConfig.for_model(model))
    fit = own_data_fit(model, repeats, "eval", 64, generator=gen(0))
    assert fit.off_distribution and fit.no_better_than_uniform and not fit.above_task_data, fit.message
    assert fit.prompt_lower >= fit.uniform_loss


def test_trigger_only_induction_is_flagged_on_repeats_not_on_its_own_data(birth, gated):
    repeats = repeats_fit(gated, birth, T // 2, 64, generator=gen(0))
    assert repeats.off_distribution, repeats.message
    assert repeats.reference == "the birth task's evaluation data"
    own_pair = prompt_fit(gated, birth, birth.patching_pair(64, generator=gen(1)), generator=gen(2))
    own_data = prompt_fit(gated, birth, birth.eval_batch(64, generator=gen(3)), generator=gen(4))
    assert not own_pair.off_distribution and not own_data.off_distribution, (own_pair, own_data)
    # the planted model without the cut does induction on every token: random repeats are its data too
    planted = mechmem.planted_induction_model(birth.d_vocab, T)
    everywhere = repeats_fit(planted, birth, T // 2, 64, generator=gen(0))
    assert not everywhere.off_distribution, everywhere.message


@pytest.fixture(scope="module")
def gated_ckpt(gated, birth_config, tmp_path_factory):
    path = tmp_path_factory.mktemp("gated") / "ckpt.pt"
    return mechmem.save_model(gated, path, task_name="birth", task_config=birth_config)


def test_heads_prints_the_flag_and_writes_it_in_json(gated_ckpt, tmp_path, capsys):
    out = tmp_path / "heads"
    assert main(["heads", str(gated_ckpt), "--n-samples", "32", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    fit = json.loads((out / "detect_heads.json").read_text())["prompt_fit"]
    assert fit["off_distribution"] and fit["source"] == f"[r, r], |r| = {min(T // 2, len(LETTERS))}"
    assert fit["message"] in text and "OFF the model's distribution" in text


def test_circuit_on_the_task_pair_prints_no_flag(gated_ckpt, tmp_path, capsys):
    out = tmp_path / "circuit"
    argv = ["circuit", str(gated_ckpt), "--n-samples", "16", "--role-samples", "16", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    fit = json.loads((out / "circuit.json").read_text())["prompt_fit"]
    assert not fit["off_distribution"] and fit["source"] == "the birth task's clean/corrupted pair"
    assert fit["message"] in text and "OFF" not in text


def test_the_report_warns_when_a_section_reads_off_distribution_prompts(birth, gated, monkeypatch):
    # the edge section's prompts (the first look of CIRCUIT_POLICY, 64): cheaper, same code
    monkeypatch.setattr(circuit_graph, "CIRCUIT_POLICY", replace(circuit_graph.CIRCUIT_POLICY, first=16))
    report = build_report(
        gated, birth, n_samples=32, role_samples=32, sections=(heads_section, edges_section)
    )
    heads, edges = report.section("heads"), report.section("edges")
    assert heads.findings["prompt_fit"]["off_distribution"]
    assert not edges.findings["prompt_fit"]["off_distribution"]
    warning = dict(summary_rows(report))["prompts off the model's distribution"]
    assert warning.startswith("heads: WARNING prompt fit: OFF") and "edges:" not in warning
    assert warning in to_markdown(report) and heads.findings["prompt_fit"]["message"] in heads.lines
    record = json.loads(dumps(report.to_dict()))
    assert record["sections"]["heads"]["findings"]["prompt_fit"]["off_distribution"]
    assert record["off_distribution"] == ["heads"] and record["headline"] == report.flagged_headline
    assert report.flagged_headline.endswith("WARNING: prompts off the model's distribution in heads")
    assert f"**{report.flagged_headline}**" in to_markdown(report)
