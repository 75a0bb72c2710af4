"""Triggered-bigram data: corpus counts, generator validity,
and the vectorised sampler against a per-token loop."""

import itertools

import numpy as np
import pytest
import torch

from mechmem.errors import MechmemError
from mechmem.tasks.birth.corpus import count_text, load_stats
from mechmem.tasks.birth.data import TriggerSampler, alias_tables, occurrence_counter, reference_sequences


@pytest.fixture(scope="module")
def stats():
    return load_stats()


def sampler(stats, **kw):
    args = {"seq_len": 64, "n_triggers": 3, "fixed_triggers": False, "outputs": "uniform"}
    args.update(kw)
    return TriggerSampler(stats, **args)


def test_count_text_matches_a_naive_count():
    text = "abracadabra, abba!"
    stats = count_text(text)
    assert stats.chars == "".join(sorted(set(text)))
    for a in set(text):
        assert int(stats.unigram[stats.chars.index(a)]) == text.count(a)
        for b in set(text):
            pairs = sum(1 for x, y in itertools.pairwise(text) if (x, y) == (a, b))
            assert int(stats.bigram[stats.chars.index(a), stats.chars.index(b)]) == pairs


def test_shipped_stats_are_tiny_shakespeare(stats):
    assert stats.n_tokens == 65
    assert int(stats.unigram.sum()) == 1115394
    assert int(stats.bigram.sum()) == 1115393
    assert torch.allclose(stats.bigram_probs().sum(-1), torch.ones(65, dtype=torch.float64))


def test_missing_corpus_is_a_user_error(tmp_path):
    with pytest.raises(MechmemError):
        load_stats(tmp_path / "nope.txt")


def test_alias_tables_reproduce_the_distribution(stats):
    probs = stats.bigram_probs()[:5]
    prob, index = alias_tables(probs)
    n = probs.shape[1]
    # Exact mass of each outcome: (1/n) * (keep prob at own column + alias mass pointing to it).
    mass = torch.zeros_like(probs)
    for i in range(probs.shape[0]):
        for j in range(n):
            mass[i, j] += prob[i, j] / n
            mass[i, index[i, j]] += (1 - prob[i, j]) / n
    assert torch.allclose(mass, probs, atol=1e-12)


@pytest.mark.parametrize("fixed", [True, False])
@pytest.mark.parametrize("outputs", ["uniform", "bigram", "ood"])
def test_generated_sequences_are_valid(stats, fixed, outputs):
    s = sampler(stats, fixed_triggers=fixed, outputs=outputs)
    g = torch.Generator().manual_seed(1)
    for split in ("train", "test"):
        batch = s.sample(64, generator=g, split=split)
        seq, trig, out = batch.seq, batch.triggers, batch.outputs
        assert seq.shape == (64, 65) and trig.shape == out.shape == (64, 3)
        assert all(len(set(row.tolist())) == 3 for row in trig)  # distinct triggers
        if fixed:
            top = stats.unigram.argsort(descending=True)[:3]
            assert set(trig[0].tolist()) == set(top.tolist())
        if outputs == "ood":
            ok = out < s.n_train_tokens if split == "train" else out >= s.n_train_tokens
            assert ok.all()
        # every trigger is followed by its output
        for b in range(64):
            follow = dict(zip(trig[b].tolist(), out[b].tolist()))
            for t in range(64):
                tok = int(seq[b, t])
                if tok in follow:
                    assert int(seq[b, t + 1]) == follow[tok]
        # occurrence counter equals a naive count
        for b in range(8):
            seen: dict[int, int] = {}
            for t in range(64):
                tok = int(seq[b, t])
                if tok in trig[b].tolist():
                    seen[tok] = seen.get(tok, 0) + 1
                    assert int(batch.counter[b, t]) == seen[tok]
                else:
                    assert int(batch.counter[b, t]) == 0


def test_occurrence_counter_on_a_worked_example():
    tokens = torch.tensor([[9, 1, 2, 5, 7, 4, 1, 2, 6, 7, 4]])
    triggers = torch.tensor([[1, 7]])
    assert occurrence_counter(tokens, triggers).tolist() == [[0, 1, 0, 0, 1, 0, 2, 0, 0, 2, 0]]


def test_sampler_is_deterministic_given_the_generator(stats):
    s = sampler(stats)
    a = s.sample(8, generator=torch.Generator().manual_seed(3))
    b = s.sample(8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.seq, b.seq) and torch.equal(a.triggers, b.triggers)


def _summary(batch, n_tokens):
    seq = batch.seq
    transitions = torch.bincount(
        seq[:, :-1].flatten() * n_tokens + seq[:, 1:].flatten(), minlength=n_tokens**2
    )
    return {
        "unigram": torch.bincount(seq.flatten(), minlength=n_tokens).double() / seq.numel(),
        "first": torch.bincount(seq[:, 0], minlength=n_tokens).double() / seq.shape[0],
        "trigger": torch.bincount(batch.triggers.flatten(), minlength=n_tokens).double()
        / batch.triggers.numel(),
        "transitions": transitions.double() / transitions.sum(),
        "counter": torch.bincount(batch.counter.flatten().clamp_max(6), minlength=7).double()
        / batch.counter.numel(),
    }


@pytest.mark.parametrize("outputs", ["uniform", "bigram"])
def test_vectorised_sampler_matches_the_reference_loop(stats, outputs):
    s = sampler(stats, outputs=outputs)
    n = 500
    fast_batch = s.sample(n, generator=torch.Generator().manual_seed(0))
    fast = _summary(fast_batch, 65)
    slow = _summary(reference_sequences(s, n, rng=np.random.default_rng(0)), 65)
    # ~32k tokens in 500 sequences; random trigger sets make whole sequences differ, so tolerances are a few
    # times the seed-to-seed spread we measured (0.007, 0.006, 0.019, 0.015, 0.025), far below what a wrong
    # trigger, output or counter rule produces.
    assert (fast["unigram"] - slow["unigram"]).abs().max() < 0.015
    assert (fast["transitions"] - slow["transitions"]).abs().max() < 0.01
    assert (fast["trigger"] - slow["trigger"]).abs().max() < 0.04
    assert (fast["counter"] - slow["counter"]).abs().max() < 0.03
    assert (fast["first"] - slow["first"]).abs().max() < 0.07
    # Non-trigger positions follow pi_b exactly: observed next tokens vs the expected mixture of bigram rows.
    cur, nxt, free = fast_batch.seq[:, :-1], fast_batch.seq[:, 1:], fast_batch.counter == 0
    observed = torch.bincount(nxt[free], minlength=65).double() / free.sum()
    expected = stats.bigram_probs()[cur[free]].mean(0)
    assert (observed - expected).abs().max() < 0.008


def test_reference_rejects_nothing_and_shares_the_counter(stats):
    s = sampler(stats, fixed_triggers=True)
    ref = reference_sequences(s, 4, rng=np.random.default_rng(1))
    assert torch.equal(ref.counter, occurrence_counter(ref.seq[:, :-1], ref.triggers))
