"""The birth task's clean/corrupted pair: a trigger's second occurrence answered from its first, and the one
earlier output token changed; a planted induction head answers it and flips on the corruption."""

import pytest
import torch

import mechmem
from mechmem.analysis.circuits.discovery import circuit_pair
from mechmem.errors import MechmemError
from mechmem.tasks import build_task

T = 64


def birth(**kw):
    return build_task("birth", {"seq_len": T, **kw})


def check_pair(task, pair, n):
    """Invariants every birth pair holds (see `BirthTask.patching_pair`)."""
    assert pair.clean.shape == pair.corrupted.shape == (n, T)
    differ = pair.clean != pair.corrupted
    assert (differ.sum(1) == 1).all()  # one token changed
    changed = differ.float().argmax(1)
    rows = torch.arange(n)
    trigger = pair.clean[rows, pair.answer_pos]
    for i in range(n):
        seq, pos = pair.clean[i], int(pair.answer_pos[i])
        earlier = (seq[:pos] == trigger[i]).nonzero().flatten().tolist()
        assert len(earlier) == 1  # the answer position holds the trigger's second occurrence
        assert int(changed[i]) == earlier[0] + 1  # the token right after its first occurrence is changed
        after = (seq[:-1] == trigger[i]).nonzero().flatten() + 1
        assert (seq[after] == pair.correct[i]).all()  # a trigger: always followed by its output
    assert (pair.clean[rows, changed] == pair.correct).all()
    assert (pair.corrupted[rows, changed] == pair.incorrect).all()
    assert (pair.incorrect != pair.correct).all() and (pair.incorrect != trigger).all()


@pytest.mark.parametrize(
    "config",
    [
        {"fixed_triggers": True},
        {"fixed_triggers": False},
        {"fixed_triggers": False, "outputs": "bigram"},
        {"fixed_triggers": True, "outputs": "ood"},
    ],
)
def test_the_pair_answers_a_second_occurrence_from_the_first(config):
    task = birth(**config)
    pair = task.patching_pair(48, generator=torch.Generator().manual_seed(0))
    check_pair(task, pair, 48)
    if task.config.fixed_triggers:
        fixed = task.sampler.fixed
        assert torch.isin(pair.clean[torch.arange(48), pair.answer_pos], fixed).all()
        assert not torch.isin(pair.incorrect, fixed).any()  # the replacement is no trigger
        assert not torch.isin(pair.correct, fixed).any()  # nor is the output the pair reads
    if task.config.outputs == "ood":  # replacements come from the training split's outputs, as the answers do
        assert (pair.incorrect < task.sampler.n_train_tokens).all()
        assert (pair.correct < task.sampler.n_train_tokens).all()


def test_the_pair_is_reproducible_from_its_generator():
    task = birth(fixed_triggers=False)
    a, b = (task.patching_pair(16, generator=torch.Generator().manual_seed(3)) for _ in range(2))
    for name in ("clean", "corrupted", "answer_pos", "correct", "incorrect"):
        assert torch.equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("fixed", [True, False])
def test_a_planted_induction_head_answers_clean_and_flips_on_corrupted(fixed):
    model = mechmem.planted_induction_model(65, T)  # induction on every token, copies with logit 10
    task = birth(fixed_triggers=fixed)
    pair = task.patching_pair(64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        clean = pair.logit_diff_per_prompt(model(pair.clean))
        corrupted = pair.logit_diff_per_prompt(model(pair.corrupted))
    assert (clean > 9.0).all() and (corrupted < -9.0).all()


def test_circuit_pair_uses_the_birth_pair_and_names_the_generic_one_a_fallback():
    model = mechmem.planted_induction_model(65, T)
    task = birth(fixed_triggers=True)
    pair, words = circuit_pair(model, task, 8, generator=torch.Generator().manual_seed(0))
    assert words == "the birth task's clean/corrupted pair"
    check_pair(task, pair, 8)
    _, words = circuit_pair(model, None, 8, generator=torch.Generator().manual_seed(0))
    assert words.startswith("fallback (a bare model): the generic repeated-random-tokens pair")


def test_too_short_a_sequence_for_a_second_occurrence_is_one_line():
    task = build_task("birth", {"seq_len": 2, "n_triggers": 1, "fixed_triggers": True})
    with pytest.raises(MechmemError, match="too short for a clean/corrupted pair"):
        task.patching_pair(4, generator=torch.Generator().manual_seed(0))
