"""The permutation reproduction: Bayes table and probe against brute-force enumeration and a Bayes oracle,
counterfactual pairs and key sets, and the whole pipeline (train, measure, write the page) on tiny presets."""

import itertools
import math

import pytest
import torch

from mechmem.papers.permutation.experiments import (
    ReproConfig,
    bayes_table,
    last_step_groups,
    probe_stats,
    role_pairs,
    run_reproduction,
)
from mechmem.papers.permutation.task import PermutationConfig, PermutationTask, bayes_posterior
from mechmem.training.config import Preset, TrainConfig

V = 4


def brute_force_posterior(tokens: list[int], v: int) -> list[list[float]]:
    """Posterior of every answer by enumerating all v! permutations consistent with the pairs before it."""
    perms = list(itertools.permutations(range(1, v + 1)))
    out = []
    for k in range(0, len(tokens), 2):
        seen = [(tokens[i], tokens[i + 1]) for i in range(0, k, 2)]
        ok = [p for p in perms if all(p[x - 1] == y for x, y in seen)]
        row = [0.0] * (v + 1)
        for p in ok:
            row[p[tokens[k] - 1]] += 1.0 / len(ok)
        out.append(row)
    return out


class BayesOracle(torch.nn.Module):
    """Outputs log p_Bayes at the answer positions (a perfect model), or a fixed distortion of it."""

    def __init__(self, v: int, mix: float = 0.0):
        super().__init__()
        self.v, self.mix = v, mix
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, tokens):
        post = bayes_posterior(tokens, self.v)
        post = (1 - self.mix) * post + self.mix / (self.v + 1)
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], self.v + 1)
        logits[:, 0::2] = post.clamp_min(1e-12).log()
        return logits


@pytest.fixture(scope="module")
def task():
    return PermutationTask(PermutationConfig(vocab_size=V, repeat_ratio=0.5))


def test_posterior_matches_enumeration(task):
    seq, repeat = task.sequences(60, generator=torch.Generator().manual_seed(0), split="test")
    assert repeat.any() and not repeat.all()
    post = bayes_posterior(seq[:, :-1], V)
    for i in range(len(seq)):
        torch.testing.assert_close(post[i], torch.tensor(brute_force_posterior(seq[i, :-1].tolist(), V)))


def test_bayes_table_against_a_naive_loop(task):
    model = BayesOracle(V, mix=0.3)
    rows = bayes_table(model, task, 200, generator=torch.Generator().manual_seed(1))
    seq, repeat = task.sequences(200, generator=torch.Generator().manual_seed(1), split="test")
    steps = [str(k + 1) for k in range(V)] + [f"{V} elimination", f"{V} memorisation"]
    assert [r["step"] for r in rows] == steps
    for row in rows:
        k = int(row["step"].split()[0]) - 1
        keep = [i for i in range(200) if "elim" not in row["step"] and "memo" not in row["step"]
                or ("elim" in row["step"]) != bool(repeat[i])]
        errs, cands, losses = [], [], []
        for i in keep:
            exact = brute_force_posterior(seq[i, :-1].tolist(), V)[k]
            model_p = [0.7 * e + 0.3 / (V + 1) for e in exact]
            errs += [abs(a - b) for a, b in zip(model_p, exact)]
            cands.append(sum(e > 0 for e in exact))
            losses.append(-math.log(model_p[seq[i, 2 * k + 1]]))
        assert row["n"] == len(keep)
        assert row["mae"] == pytest.approx(sum(errs) / len(errs), abs=1e-5)
        assert row["max_err"] == pytest.approx(max(errs), abs=1e-5)
        assert row["bayes_acc"] == pytest.approx(sum(1 / c for c in cands) / len(cands), abs=1e-5)
        assert row["loss"] == pytest.approx(sum(losses) / len(losses), abs=1e-4)
    perfect = bayes_table(BayesOracle(V), task, 200, generator=torch.Generator().manual_seed(1))
    assert all(r["mae"] < 1e-6 and r["loss"] == pytest.approx(r["bayes_loss"], abs=1e-5) for r in perfect)
    assert perfect[-1]["acc"] == 1.0 and perfect[-2]["acc"] == 1.0  # both final-step subgroups are certain


def test_probe_of_the_bayes_oracle_recalls(task):
    stats = probe_stats(BayesOracle(V), task, 100, generator=torch.Generator().manual_seed(2))
    assert stats["p_recall"] == pytest.approx(1.0) and stats["p_elimination"] < 1e-6
    assert stats["argmax_recall"] == 1.0


def test_counterfactual_pairs_are_valid_and_change_the_answer(task):
    recall, elimination = role_pairs(task, 100, generator=torch.Generator().manual_seed(3))
    for pair in (recall, elimination):
        assert (pair.correct != pair.incorrect).all()
        for tokens, answer in ((pair.clean, pair.correct), (pair.corrupted, pair.incorrect)):
            post = bayes_posterior(tokens, V)[:, -1]
            # every input is a prefix of some permutation, and its answer is certain under the posterior
            assert torch.allclose(post[torch.arange(100), answer], torch.ones(100))
    assert (recall.clean[:, :-1] == recall.corrupted[:, :-1]).all()  # only the last x differs
    assert (elimination.clean[:, 0::2] == elimination.corrupted[:, 0::2]).all()  # same x's


def test_key_sets_partition_the_prefix_on_repeats(task):
    g = last_step_groups(task, 100, generator=torch.Generator().manual_seed(4))
    total = sum(g[k].long() for k in ("match", "bound", "other_y", "other_x", "self"))
    assert (total[g["repeat"]] == 1).all()
    assert (g["match"][g["repeat"]].sum(-1) == 1).all() and (g["match"][~g["repeat"]].sum(-1) == 0).all()
    matched = g["tokens"][g["match"]]
    assert (matched == g["tokens"][g["repeat"]][:, -1]).all()


def test_pipeline_end_to_end_on_tiny_presets(tmp_path, monkeypatch):
    from mechmem.models.adapter import TransformerConfig
    from mechmem.papers.permutation.page import write_page

    def tiny(v, heads, ratio, layers=1):
        model = TransformerConfig(n_layers=layers, d_model=8 * heads, n_heads=heads, d_mlp=16 * heads, d_vocab=v + 1,
                                  n_ctx=2 * v - 1)
        return Preset(model, PermutationConfig(vocab_size=v, repeat_ratio=ratio),
                      TrainConfig(steps=30, batch_size=32, eval_every=30, eval_samples=64))

    presets = dict(PermutationTask.presets)
    presets.update({"tiny1": tiny(5, 1, 0.0), "tiny2": tiny(5, 2, 0.3), "tiny10": tiny(10, 2, 0.3, layers=2)})
    monkeypatch.setattr(PermutationTask, "presets", presets)
    cfg = ReproConfig(task1_preset="tiny1", task2_preset="tiny2", task1_seeds=(0,), task2_seeds=(0, 1),
                      scale_presets=("tiny10",), n_eval=100, n_analysis=60, runs=str(tmp_path / "runs"), workers=1)
    res = run_reproduction(cfg, log=lambda msg: None)
    assert [r["seed"] for r in res["task2"]] == [0, 1] and res["scale"][0]["vocab_size"] == 10
    assert len(res["scale"][0]["circuit_attention"]["previous_token"]) == 2  # [layer][head]
    page = write_page(res, tmp_path / "doc" / "permutation.md", tmp_path / "doc" / "figures", "test")
    text = page.read_text()
    for heading in ("Published vs ours", "1. Bayesian evaluation", "2. The probe", "3. Head roles",
                    "4. The FFN rescue", "5. Larger vocabularies"):
        assert heading in text
    assert len(list((tmp_path / "doc" / "figures").glob("permutation_*.png"))) == 6
