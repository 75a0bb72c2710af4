"""Intervals over prompts and sequences: patching cells, ablation deltas, lens probabilities, sampled probes.

Each interval equals one computed by hand from a naive per-prompt (per-sequence) loop; the patching intervals
cover a planted truth at their nominal rate; a normalised effect is refused on runs that are not told apart.
"""

import dataclasses
import math
import statistics

import numpy as np
import pytest
import torch
from helpers import assert_no_hooks, build_model

import mechmem
from mechmem.analysis.ablation import SequenceMetric, ablate_heads, sequence_losses
from mechmem.analysis.interventions import Intervention, zero
from mechmem.analysis.interventions.reference import naive_intervene
from mechmem.analysis.logit_lens import logit_lens
from mechmem.analysis.patching import Patcher, patching_lines, patching_record, run_sweeps, sweep_intervals
from mechmem.analysis.probes import EXACT, BigramSample, builtin_probes, empirical_bigram, ffn_bigram_probe
from mechmem.analysis.stats import RESAMPLES, Z_95, covers, mean_interval
from mechmem.tasks.base import Batch, PatchingPair, masked_cross_entropy

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return build_model(seed=3, normalization_type="LN", d_vocab=11, n_heads=3, d_head=5)


def random_pair(n: int, vocab: int = 11, pos: int = 7, seed: int = 0) -> PatchingPair:
    g = torch.Generator().manual_seed(seed)
    clean = torch.randint(vocab, (n, pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, 2:] = torch.randint(vocab, (n, pos - 2), generator=g)
    answers = torch.randint(vocab, (2, n), generator=g)
    return PatchingPair(clean, corrupted, torch.randint(2, pos, (n,), generator=g), answers[0], answers[1])


def answered_pair(model, n: int) -> PatchingPair:
    """`random_pair` whose answers are the clean and the corrupted run's own top tokens, so the two runs'
    logit differences are told apart even on a random model."""
    pair = random_pair(n)
    rows = torch.arange(n)
    with torch.no_grad():
        top = [model(t)[rows, pair.answer_pos].argmax(-1) for t in (pair.clean, pair.corrupted)]
    keep = (top[0] != top[1]).nonzero().flatten()[:16]
    assert len(keep) >= 12
    return PatchingPair(
        pair.clean[keep], pair.corrupted[keep], pair.answer_pos[keep], top[0][keep], top[1][keep]
    )


def naive_bootstrap(num, den, seed=0):
    """The percentile bootstrap of sum(num) / sum(den) written as a loop over resamples, drawing the same
    indices as `stats.bootstrap_ratio` (one randint call of [resample, unit])."""
    n = len(num)
    draws = torch.randint(n, (RESAMPLES, n), generator=torch.Generator().manual_seed(seed))
    stats = np.array([num[d].sum(0).numpy() / den[d].sum(0).numpy() for d in draws])
    return np.nanquantile(stats, [0.025, 0.975], axis=0)


def by_hand_interval(values):
    """mean -+ 1.96 sample sd / sqrt(n), from the standard library."""
    m, sd = statistics.fmean(values), statistics.stdev(values)
    return m - Z_95 * sd / math.sqrt(len(values)), m + Z_95 * sd / math.sqrt(len(values))


def one_prompt_logit_diff(model, pair, i, tokens, hooks=()):
    logits = model.run_with_hooks(tokens[i : i + 1], fwd_hooks=list(hooks))
    at = logits[0, pair.answer_pos[i]]
    return float(at[pair.correct[i]] - at[pair.incorrect[i]])


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_patching_intervals_equal_a_naive_per_prompt_loop(model, direction):
    pair = answered_pair(model, 128)
    res = Patcher(model, pair.clean, pair.corrupted, pair=pair).sweep("attn_head_out_all_pos", direction)
    base, source = (pair.corrupted, pair.clean) if direction == "denoising" else (pair.clean, pair.corrupted)
    _, cache = model.run_with_cache(source)
    n, cfg = len(pair.clean), model.cfg
    clean = torch.tensor([one_prompt_logit_diff(model, pair, i, pair.clean) for i in range(n)])
    corrupted = torch.tensor([one_prompt_logit_diff(model, pair, i, pair.corrupted) for i in range(n)])
    per_prompt = torch.zeros(n, cfg.n_layers, cfg.n_heads)
    for i in range(n):
        for layer in range(cfg.n_layers):
            for head in range(cfg.n_heads):
                z = cache[f"blocks.{layer}.attn.hook_z"][i : i + 1, :, head]

                def put(act, hook, z=z, head=head):
                    act[:, :, head] = z
                    return act

                hook = (f"blocks.{layer}.attn.hook_z", put)
                per_prompt[i, layer, head] = one_prompt_logit_diff(model, pair, i, base, [hook])
    baseline = corrupted if direction == "denoising" else clean
    iv = res.intervals
    assert iv.n_prompts == n and not res.normalised_refused
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            cell = per_prompt[:, layer, head]
            assert float(res.values[layer, head]) == pytest.approx(float(cell.mean()), abs=1e-5)
            low, high = by_hand_interval(cell.tolist())
            assert (float(iv.lower[layer, head]), float(iv.upper[layer, head])) == pytest.approx(
                (low, high), abs=1e-4
            )
            low, high = by_hand_interval((cell - baseline).tolist())
            got = (float(iv.effect_lower[layer, head]), float(iv.effect_upper[layer, head]))
            assert got == pytest.approx((low, high), abs=1e-4)
    gap = by_hand_interval((clean - corrupted).tolist())
    assert iv.gap[1:] == pytest.approx(gap, abs=1e-4)
    want = naive_bootstrap(
        (per_prompt - corrupted[:, None, None]).double(), (clean - corrupted).double()[:, None, None]
    )
    torch.testing.assert_close(iv.normalised_lower.double(), torch.from_numpy(want[0]), atol=1e-4, rtol=0)
    torch.testing.assert_close(iv.normalised_upper.double(), torch.from_numpy(want[1]), atol=1e-4, rtol=0)
    assert_no_hooks(model)


def test_patching_intervals_cover_a_planted_truth():
    """The planted induction model's patching values are known exactly (every prompt the same: the induction
    head's output restores the clean logit difference, other heads change nothing). Per-prompt Gaussian noise
    of mean 0 is added to every run (clean, corrupted, each patch), then over 200 fresh draws of 100 prompts
    the 95% intervals of the value, the effect and the normalised effect cover the truth >= 93% of the
    time."""
    planted = mechmem.planted_induction_model()
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    pair = task.patching_pair(100, generator=torch.Generator().manual_seed(0))
    patcher = Patcher(planted, pair.clean, pair.corrupted, pair=pair)
    exact = patcher.per_prompt_values("attn_head_out_all_pos")  # [prompt layer head], identical rows
    clean, corrupted = patcher.prompt_values["clean"], patcher.prompt_values["corrupted"]
    assert float((exact - exact[0]).abs().max()) < 1e-5 and float(clean.std()) < 1e-5  # the truth is exact
    value, gap = exact[0].double(), float(clean[0] - corrupted[0])
    truth = {
        "": value,
        "effect_": value - float(corrupted[0]),
        "normalised_": (value - float(corrupted[0])) / gap,
    }
    assert truth["normalised_"].abs().max() == pytest.approx(1.0, abs=1e-4)  # one head restores the answer
    g = torch.Generator().manual_seed(1)
    hits = dict.fromkeys(truth, 0)
    for _ in range(200):
        noisy = exact + 6.0 * torch.randn(exact.shape, generator=g)
        iv = sweep_intervals(
            noisy,
            clean + 6.0 * torch.randn(100, generator=g),
            corrupted + 6.0 * torch.randn(100, generator=g),
            "denoising",
            generator=g,
        )
        for name, true in truth.items():
            low, high = getattr(iv, f"{name}lower").double(), getattr(iv, f"{name}upper").double()
            hits[name] += int(((low <= true) & (true <= high)).sum())
    coverage = {name: h / (200 * value.numel()) for name, h in hits.items()}
    assert all(c >= 0.93 for c in coverage.values()), coverage


def test_normalised_effect_refused_when_runs_are_not_told_apart(model):
    """Half of the pairs are the other half with clean and corrupted swapped (same answers), so clean and
    corrupted have the same mean logit difference up to rounding: the ratio would divide by noise."""
    half = random_pair(10)
    pair = PatchingPair(
        torch.cat([half.clean, half.corrupted]),
        torch.cat([half.corrupted, half.clean]),
        half.answer_pos.repeat(2),
        half.correct.repeat(2),
        half.incorrect.repeat(2),
    )
    results = run_sweeps(model, pair, ["attn_head_out_all_pos", "resid_pre"])
    res = results["attn_head_out_all_pos"]
    raw = (res.values - res.corrupted) / (res.clean - res.corrupted)
    assert abs(res.clean - res.corrupted) < 1e-4 and float(raw.abs().max()) > 1.5  # unguarded: nonsense
    assert res.normalised_refused and covers(*res.intervals.gap[1:])
    assert torch.isnan(res.normalised()).all() and torch.isnan(res.intervals.normalised_lower).all()
    assert res.to_dict()["normalised_refused"] is True
    assert patching_record(results)["normalised_refused"] is True
    lines = patching_lines(results, task="t", method="exact", direction="denoising", n=20)
    assert any(line.startswith("WARNING: the clean - corrupted gap") for line in lines)
    assert "normalised refused" in repr(res)
    assert not torch.isnan(res.lower).any()  # the values themselves keep their intervals
    same = run_sweeps(model, dataclasses.replace(half, corrupted=half.clean), ["resid_pre"])
    assert same["resid_pre"].normalised_refused  # identical runs: the gap is exactly 0
    planted = mechmem.planted_induction_model()
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    told_apart = task.patching_pair(16, generator=torch.Generator().manual_seed(0))
    assert not run_sweeps(planted, told_apart, ["resid_pre"])["resid_pre"].normalised_refused


def test_per_prompt_callable_gets_intervals_and_a_scalar_one_does_not(model):
    pair = random_pair(8)
    default = Patcher(model, pair.clean, pair.corrupted, pair=pair).sweep("resid_pre")
    per_prompt = Patcher(model, pair.clean, pair.corrupted, pair.logit_diff_per_prompt).sweep("resid_pre")
    torch.testing.assert_close(per_prompt.lower, default.lower, atol=1e-5, rtol=0)
    recognised = Patcher(model, pair.clean, pair.corrupted, pair.logit_diff).sweep("resid_pre")
    torch.testing.assert_close(
        recognised.upper, default.upper, atol=1e-5, rtol=0
    )  # pair.logit_diff: per prompt
    mean_only = Patcher(model, pair.clean, pair.corrupted, lambda x: pair.logit_diff(x) * 1.0).sweep(
        "resid_pre"
    )
    assert mean_only.intervals is None and mean_only.lower is None and not mean_only.normalised_refused
    assert mean_only.to_dict()["interval"] is None
    assert mean_only.to_dataframe()["lower"].isna().all()


def test_ablation_intervals_equal_a_naive_per_sequence_loop(model):
    g = torch.Generator().manual_seed(4)
    tokens = torch.randint(11, (16, 9), generator=g)
    batch = Batch(
        tokens, torch.randint(11, (16, 9), generator=g), (torch.rand(16, 9, generator=g) > 0.3).float()
    )
    metric = SequenceMetric(sequence_losses(batch), batch.loss_mask.sum(-1))
    with torch.no_grad():
        logits = model(tokens)
        assert float(metric(logits)) == pytest.approx(
            float(masked_cross_entropy(logits, batch.targets, batch.loss_mask)), abs=1e-5
        )
    result = ablate_heads(model, tokens, metric, methods=("zero",))
    cfg = model.cfg
    variants = [[]] + [
        Intervention(f"blocks.{l}.attn.hook_z", (slice(None), h), zero())
        for l in range(cfg.n_layers)
        for h in range(cfg.n_heads)
    ]
    parts = naive_intervene(
        model, tokens, variants, metric.parts
    ).double()  # [variant sequence], one run each
    deltas = (parts[1:] - parts[0]).T
    want = naive_bootstrap(deltas, batch.loss_mask.sum(-1).double()[:, None])
    shape = (cfg.n_layers, cfg.n_heads)
    torch.testing.assert_close(
        result.intervals.heads_lower[0].double(), torch.from_numpy(want[0]).reshape(shape), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(
        result.intervals.heads_upper[0].double(), torch.from_numpy(want[1]).reshape(shape), atol=1e-5, rtol=0
    )
    expected = parts[1:].sum(1) / batch.loss_mask.sum()
    torch.testing.assert_close(result.heads[0].double(), expected.reshape(shape), atol=1e-5, rtol=0)
    rows = [r for r in result.rows() if r["component"] == "head"]
    assert all(r["delta_lower"] <= r["delta"] + 1e-6 and r["delta"] - 1e-6 <= r["delta_upper"] for r in rows)
    frame = result.to_dataframe()
    assert {"lower", "upper"} <= set(frame.columns) and not frame["lower"].isna().any()
    assert result.to_dict()["interval"].startswith("95% percentile bootstrap over 16 sequences")


def test_task_loss_metric_equals_the_task_loss_and_gives_intervals():
    planted = mechmem.planted_induction_model()
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    tokens, metric, _ = mechmem.analysis.ablation.task_metric(
        task, "loss", 24, generator=torch.Generator().manual_seed(0)
    )
    batch = task.eval_batch(24, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float(metric(planted(tokens))) == pytest.approx(
            float(task.loss(planted(batch.tokens), batch)), abs=1e-6
        )
    result = ablate_heads(planted, tokens, metric, methods=("zero",))
    lower, upper = result.intervals.heads_lower[0], result.intervals.heads_upper[0]
    assert float(lower[1, 1]) > 1.0  # ablating the induction head raises the loss, interval well above 0
    assert covers(float(lower[0, 0]), float(upper[0, 0]))  # a distractor head: no change


def test_lens_interval_equals_a_naive_bootstrap_over_sequences(model):
    g = torch.Generator().manual_seed(5)
    tokens, targets = torch.randint(11, (20, 9), generator=g), torch.randint(11, (20, 9), generator=g)
    mask = (torch.rand(20, 9, generator=g) > 0.4).float()
    result = logit_lens(model, tokens, targets, mask)
    summary = result.summary()
    num = torch.stack(
        [(result.target_prob[:, b].double() * mask[b]).sum(-1) for b in range(20)]
    )  # [seq stage]
    den = mask.sum(-1).double()[:, None]
    want = naive_bootstrap(num, den)
    for i, stage in enumerate(result.stages):
        assert summary[stage]["target_prob_lower"] == pytest.approx(want[0][i], abs=1e-6)
        assert summary[stage]["target_prob_upper"] == pytest.approx(want[1][i], abs=1e-6)
        assert (
            summary[stage]["target_prob_lower"]
            <= summary[stage]["target_prob"]
            <= summary[stage]["target_prob_upper"]
        )
    assert "bootstrap over 20 sequences" in result.to_dict()["interval"]


def test_bigram_probe_interval_equals_recounting_resampled_sequences():
    model = build_model(seed=2, d_vocab=5)
    g = torch.Generator().manual_seed(6)
    seqs = torch.randint(5, (40, 12), generator=g)
    sample = BigramSample(seqs[:, :-1], seqs[:, 1:])
    probe = ffn_bigram_probe(model, 0, sample)
    table = empirical_bigram(sample.tokens, sample.targets, 5, 5)
    exact = ffn_bigram_probe(model, 0, table)
    assert (probe.recall, probe.extra["kl"]) == (exact.recall, exact.extra["kl"])
    draws = torch.randint(40, (RESAMPLES, 40), generator=torch.Generator().manual_seed(0))
    stats = []
    for d in draws:  # the resampled sequences themselves, each counted as often as drawn
        recount = ffn_bigram_probe(model, 0, empirical_bigram(sample.tokens[d], sample.targets[d], 5, 5))
        stats.append([recount.recall, recount.extra["kl"]])
    want = np.quantile(np.array(stats), [0.025, 0.975], axis=0)
    assert probe.intervals["recall"] == pytest.approx(tuple(want[:, 0]), abs=1e-6)
    assert probe.intervals["kl"] == pytest.approx(tuple(want[:, 1]), abs=1e-6)
    assert "bootstrap over the 40 sequences" in probe.to_dict()["interval"]
    weights = builtin_probes(mechmem.planted_induction_model()).probes
    assert all(p.interval == EXACT and not p.intervals for p in weights)


def test_mean_interval_and_covers():
    values = torch.tensor([[1.0, 2.0], [3.0, 2.0], [5.0, 2.0]])
    _, lower, upper = mean_interval(values)
    assert lower[0] == pytest.approx(by_hand_interval([1.0, 3.0, 5.0])[0]) and lower[1] == upper[1] == 2.0
    assert covers(lower, upper, 3.0).tolist() == [True, False]
    assert covers(float("nan"), float("nan")) and not covers(0.1, 0.2)
    assert torch.isnan(mean_interval(torch.ones(1, 3))[1]).all()
