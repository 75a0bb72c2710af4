"""Attribution estimates with their 95% intervals over prompts: attribution patching (every cell of a sweep)
and attribution ablation (every delta). Each interval equals the one computed from per-prompt estimates made
one prompt at a time; where the estimate is exact its interval is exact patching's; intervals narrow with
more prompts, cover their value, and reach the frame and JSON."""

import json

import pytest
import torch
from engine_cases import random_pair
from helpers import build_model

from mechmem.analysis import ablation
from mechmem.analysis.ablation import attribution as ablation_attribution
from mechmem.analysis.ablation.exact import SequenceMetric, ablated_hooks, method_setter
from mechmem.analysis.interventions import Engine, setter_values
from mechmem.analysis.patching import Patcher
from mechmem.analysis.patching.attribution import Attributor
from mechmem.analysis.stats import bootstrap_ratio, mean_interval
from mechmem.models.transformer import build_transformer

BOUNDS = ("lower", "upper", "effect_lower", "effect_upper")


# -- attribution patching --------------------------------------------------------------------------------
def test_where_the_estimate_is_exact_its_intervals_are_exact_patchings():
    """1-layer attention-only, no norms: the logit difference is linear in the head outputs, so each prompt's
    estimate is its exact patched value and the intervals over prompts are the same."""
    model = build_model(1, n_layers=1, d_mlp=None, normalization_type=None, d_vocab=11, n_ctx=8)
    pair = random_pair(12, 6, 11, torch.Generator().manual_seed(1))
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    att = Attributor(model, pair.clean, pair.corrupted, pair=pair)
    for name in ("attn_head_out_all_pos", "attn_head_out_by_pos", "attn_out"):
        for direction in ("denoising", "noising"):
            exact, approx = patcher.sweep(name, direction), att.sweep(name, direction, check=False)
            assert approx.intervals is not None and approx.intervals.n_prompts == 12
            for bound in BOUNDS:
                torch.testing.assert_close(
                    getattr(approx.intervals, bound),
                    getattr(exact.intervals, bound).to(getattr(approx.intervals, bound).dtype),
                    atol=1e-4,
                    rtol=0,
                    msg=f"{name} {direction} {bound}",
                )


@pytest.fixture(scope="module")
def planted():
    import mechmem

    model = mechmem.planted_induction_model()
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    return model, task


def random_model():
    """2 layers with LayerNorm and MLPs: prompts differ, so intervals have width."""
    return build_model(2, n_layers=2, normalization_type="LN", d_vocab=11, n_ctx=8)


def test_patching_interval_is_the_mean_interval_of_one_prompt_estimates():
    """Each prompt estimated on its own (an Attributor of one prompt: its metric, gradient and query/key fix)
    gives that prompt's estimate; the batch's intervals are `mean_interval` of them."""
    model = random_model()
    pair = random_pair(10, 6, 11, torch.Generator().manual_seed(2))
    att = Attributor(model, pair.clean, pair.corrupted, pair=pair)
    for name in ("attn_head_out_all_pos", "resid_pre"):  # resid_pre: with the AtP* query/key fix
        result = att.sweep(name, check=False)
        one_by_one = []
        for i in range(len(pair.clean)):
            one = pair.rows(slice(i, i + 1))
            single = Attributor(model, one.clean, one.corrupted, pair=one)
            one_by_one.append(single.sweep(name, check=False).values.double())
        per_prompt = torch.stack(one_by_one)
        mean, lower, upper = mean_interval(per_prompt)
        torch.testing.assert_close(result.values.double(), mean.double(), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(result.lower.double(), lower.double(), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(result.upper.double(), upper.double(), atol=1e-4, rtol=1e-4)
        assert bool((result.upper - result.lower > 1e-3).any()), name  # not a degenerate interval


def test_patching_intervals_narrow_with_more_prompts_and_cover_the_value():
    model = random_model()
    widths = []
    for n in (16, 128):
        pair = random_pair(n, 6, 11, torch.Generator().manual_seed(3))
        att = Attributor(model, pair.clean, pair.corrupted, pair=pair)
        result = att.sweep("resid_pre", check=False)
        frame = result.to_dataframe()
        assert (frame["lower"] <= frame["value"] + 1e-5).all() and (
            frame["value"] <= frame["upper"] + 1e-5
        ).all()
        widths.append(float((result.upper - result.lower).mean()))
        out = json.loads(json.dumps(result.to_dict()))
        assert out["n_prompts"] == n and torch.equal(torch.tensor(out["lower"]), result.lower)
    assert widths[1] < widths[0] / 2  # about 1 / sqrt(8)


def test_a_scalar_metric_gives_no_intervals(planted):
    model, task = planted
    pair = task.patching_pair(8, generator=torch.Generator().manual_seed(0))
    att = Attributor(model, pair.clean, pair.corrupted, lambda logits: logits[:, -1, 0].mean())
    result = att.sweep("attn_head_out_all_pos", check=False)
    assert result.intervals is None and result.to_dataframe()["lower"].isna().all()


# -- attribution ablation --------------------------------------------------------------------------------
def masked_logprob(tokens, rows=None):
    """A ratio of sums over sequences with unequal weights: each sequence's next-token log-probabilities
    summed over its predicted positions, weighted by 1 + (i mod 5) (i: its row, `rows`), over the weights
    times the positions. Every sequence reads the same positions."""
    rows = torch.arange(len(tokens)) if rows is None else rows
    weight = (1 + rows % 5).double()

    def parts(logits):
        logp = logits[:, :-1].log_softmax(-1).gather(-1, tokens[:, 1:, None])[..., 0]
        return logp.sum(-1) * weight.to(logp)

    return SequenceMetric(parts, weight * (tokens.shape[1] - 1)), weight * (tokens.shape[1] - 1)


def flat_bounds(intervals):
    """(lower, upper) in `layer_variants` order: per layer each head, the attention layer, the MLP."""
    return [
        torch.cat(
            [getattr(intervals, f"heads_{s}")[0], getattr(intervals, f"attn_{s}")[0][:, None]]
            + [getattr(intervals, f"mlp_{s}")[0][:, None]],
            1,
        ).flatten()
        for s in ("lower", "upper")
    ]


@pytest.fixture(scope="module")
def ablation_setup():
    from helpers import build_transformer_cfg

    model = build_transformer(
        build_transformer_cfg(n_layers=3, n_heads=4, normalization_type="LN"),
        generator=torch.Generator().manual_seed(4),
    ).eval()
    tokens = torch.randint(6, (24, 9), generator=torch.Generator().manual_seed(5))
    reference = torch.randint(6, (24, 9), generator=torch.Generator().manual_seed(6))
    return model, tokens, reference


def test_ablation_interval_is_the_bootstrap_of_one_sequence_estimates(ablation_setup):
    """Each sequence's estimated change from a gradient pass on that sequence alone, with the exact changes
    of the exactly computed variants, bootstrapped as exact ablation bootstraps its deltas."""
    model, tokens, reference = ablation_setup
    metric, weights = masked_logprob(tokens)
    result = ablation_attribution.attribute_ablation(
        model, tokens, metric, reference=reference, fallback=False
    )
    assert result.intervals is not None and result.intervals.n_sequences == 24
    setter = method_setter("mean", reference)
    values = setter_values(model, tokens, setter, ablated_hooks(model))
    changes = []
    for i in range(len(tokens)):
        one, _ = masked_logprob(
            tokens[i : i + 1], torch.tensor([i])
        )  # this sequence's share, over its weight
        weight = float(weights[i])
        single = {hook: v[i : i + 1] for hook, v in values.items()}
        found = ablation_attribution.sequence_products(model, Engine(model, one), tokens[i : i + 1], single)
        changes.append(weight * found.products[0])
    changes = torch.stack(changes)  # [sequence variant]: each sequence's estimated change of the numerator
    names = ablation.variant_names(model)
    chosen = [names.index(n) for n in result.info["exact_variants"]]
    exact = ablation.ablate_heads(model, tokens, metric, methods=("mean",), reference=reference)
    lower, upper = flat_bounds(result.intervals)
    naive = bootstrap_ratio(changes, metric.weights, generator=torch.Generator().manual_seed(0))
    estimated = [i for i in range(len(names)) if i not in chosen]
    torch.testing.assert_close(lower[estimated], naive[0][estimated], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(upper[estimated], naive[1][estimated], atol=1e-5, rtol=1e-4)
    # the exactly computed variants: exact ablation's own intervals (the same resampled sequences)
    exact_lower, exact_upper = flat_bounds(exact.intervals)
    torch.testing.assert_close(lower[chosen], exact_lower[chosen], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(upper[chosen], exact_upper[chosen], atol=1e-5, rtol=1e-4)
    frame = result.to_dataframe()
    bounded = frame.dropna(subset=["lower"])
    assert len(bounded) == len(frame) == 18
    assert (
        (bounded["lower"] <= bounded["delta"] + 1e-5) & (bounded["delta"] <= bounded["upper"] + 1e-5)
    ).all()
    out = json.loads(json.dumps(result.to_dict()))
    assert "estimated change" in out["interval"] and out["results"][0]["delta_lower"] is not None


def test_ablation_intervals_narrow_with_more_sequences_and_not_for_a_scalar_metric(ablation_setup):
    model, _, reference = ablation_setup
    widths = []
    for n in (12, 192):
        tokens = torch.randint(6, (n, 9), generator=torch.Generator().manual_seed(7))
        metric, _ = masked_logprob(tokens)
        result = ablation_attribution.attribute_ablation(
            model, tokens, metric, reference=reference, fallback=False
        )
        widths.append(float((result.intervals.heads_upper - result.intervals.heads_lower).mean()))
    assert widths[1] < widths[0] / 2
    scalar = ablation_attribution.attribute_ablation(
        model, tokens, lambda logits: metric(logits), reference=reference, fallback=False
    )
    assert scalar.intervals is None and scalar.to_dataframe()["lower"].isna().all()
