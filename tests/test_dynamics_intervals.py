"""Training dynamics' intervals: every curve at every step carries the 95% interval over the evaluation units
of the analysis that measured it. Checked against naive per-sequence loops and the analyses themselves, the
table, JSON and figure forms, coverage of the value, and the width shrinking with more sequences."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_no_hooks

from mechmem.analysis import ablation, heads, patching
from mechmem.analysis.dynamics import (
    QUANTITIES,
    EvalData,
    event_rows,
    iter_models,
    plot_dynamics,
    run_dynamics,
    step_files,
)
from mechmem.analysis.stats import Z_95, mean_interval

N = 32


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """Two step checkpoints: a random model (step 10) and the planted induction model (step 20)."""
    from mechmem.analysis import planted
    from mechmem.checkpoint import save_checkpoint
    from mechmem.models import build_model
    from mechmem.models.weights import canonical_state_dict, load_canonical_state_dict
    from mechmem.tasks.generic import RepeatsConfig

    out, config = tmp_path_factory.mktemp("series"), planted.planted_config()
    random = canonical_state_dict(build_model(config, generator=torch.Generator().manual_seed(1)))
    for step, state in ((10, random), (20, None)):
        model = planted.planted_induction_model()
        if state is not None:
            load_canonical_state_dict(model, state)
        save_checkpoint(
            out / "checkpoints" / f"step_{step}.pt",
            model=model,
            model_config=config,
            task_name="repeats",
            task_config=RepeatsConfig(d_vocab=12, half=11),
        )
    return out


@pytest.fixture(scope="module")
def result(series):
    return run_dynamics(series, ("loss", "heads", "probes"), n=N)


def models(series):
    """(step, model) of every checkpoint, each a copy (the loader reuses one model object)."""
    import copy

    return [(step, copy.deepcopy(ckpt.model), ckpt.task) for step, ckpt in iter_models(step_files(series))]


@torch.no_grad()
def naive_sequence_losses(model, batch):
    """Per sequence, one forward pass each: (summed masked cross-entropy, hits, masked positions)."""
    losses, hits, counts = [], [], []
    for i in range(len(batch.tokens)):
        logits = model(batch.tokens[i : i + 1])[0]
        mask = batch.loss_mask[i].float()
        ce = F.cross_entropy(logits.float(), batch.targets[i], reduction="none")
        losses.append(float((ce * mask).sum()))
        hits.append(float(((logits.argmax(-1) == batch.targets[i]).float() * mask).sum()))
        counts.append(float(mask.sum()))
    return torch.tensor(losses), torch.tensor(hits), torch.tensor(counts)


def test_loss_interval_equals_the_mean_interval_of_per_sequence_losses(series, result):
    """Every sequence of the repeats task has as many masked positions, so the interval of the loss is the
    normal interval of the mean of the per-sequence mean losses."""
    for i, (step, model, task) in enumerate(models(series)):
        batch = EvalData(task, N, 0, torch.device("cpu")).batch
        losses, hits, counts = naive_sequence_losses(model, batch)
        assert len(set(counts.tolist())) == 1
        for curve, per_seq in (("loss", losses / counts), ("acc", hits / counts)):
            mean, lower, upper = (float(x) for x in mean_interval(per_seq))
            assert result.curves[curve][i] == pytest.approx(mean, abs=1e-5), (step, curve)
            assert result.lower[curve][i] == pytest.approx(lower, abs=1e-5), (step, curve)
            assert result.upper[curve][i] == pytest.approx(upper, abs=1e-5), (step, curve)
        # the random model's sequences differ in loss, so its interval has width; the planted model may give
        # every sequence the same loss to the last bit, and then its interval is a point
        assert result.upper["loss"][i] >= result.lower["loss"][i]
        assert step != 10 or result.upper["loss"][i] > result.lower["loss"][i]


def test_loss_interval_with_unequal_masks_is_the_delta_method(series):
    """With a different number of masked positions per sequence the loss is a ratio of sums; its interval is
    the delta method's, written out here by hand."""
    _, model, task = models(series)[0]  # the random model: a loss far from 0
    data = EvalData(task, N, 0, torch.device("cpu"))
    batch = data.batch
    keep = torch.arange(batch.tokens.shape[1])[None, :] < torch.arange(N)[:, None] % 7 + 14
    batch.loss_mask = batch.loss_mask * keep
    losses, _, counts = naive_sequence_losses(model, batch)
    assert len(set(counts.tolist())) > 1
    ratio = losses.double().sum() / counts.double().sum()
    spread = ((losses.double() - ratio * counts.double()) ** 2).sum() / (N * (N - 1))
    stderr = float(spread.sqrt() / counts.double().mean())
    point = QUANTITIES["loss"].fn(model, data)["loss"]
    assert point.value == pytest.approx(float(ratio), abs=1e-5)
    assert (point.lower, point.upper) == pytest.approx(
        (float(ratio) - Z_95 * stderr, float(ratio) + Z_95 * stderr), abs=1e-5
    )
    # not the mean of per-sequence means: that is another estimator and another interval
    assert float(mean_interval(losses / counts)[1]) != pytest.approx(point.lower, rel=1e-4)


def test_head_intervals_are_the_detection_bootstrap(series, result):
    for i, (_, model, task) in enumerate(models(series)):
        batch = EvalData(task, N, 0, torch.device("cpu")).batch
        found = heads.detect_heads_on_task(model, batch.tokens, batch.loss_mask > 0)
        for name in found.scores:
            curve = f"L1H1.{name}"
            assert result.lower[curve][i] == pytest.approx(float(found.lower[name][1, 1]))
            assert result.upper[curve][i] == pytest.approx(float(found.upper[name][1, 1]))


def test_ablation_lens_and_patching_points_carry_their_analysis_intervals(series):
    _, model, task = models(series)[-1]
    data = EvalData(task, 16, 0, torch.device("cpu"))
    b = data.batch
    loss = ablation.SequenceMetric(ablation.sequence_losses(b), b.loss_mask.float().sum(-1))
    direct = ablation.ablate_heads(model, b.tokens, loss, methods=("mean",), reference=data.reference)
    point = QUANTITIES["ablation"].fn(model, data)["ablation.L1H1"]
    assert point.value == pytest.approx(float(direct.heads[0, 1, 1] - direct.baseline), abs=1e-5)
    assert point.lower == pytest.approx(float(direct.intervals.heads_lower[0, 1, 1]), abs=1e-5)
    assert point.upper == pytest.approx(float(direct.intervals.heads_upper[0, 1, 1]), abs=1e-5)
    assert point.lower > 0  # mean-ablating the planted induction head raises the loss on every draw
    sweep = patching.run_sweeps(model, data.pair, ("attn_head_out_all_pos",))["attn_head_out_all_pos"]
    point = QUANTITIES["patching"].fn(model, data)["patching.L1H1"]
    assert point.lower == pytest.approx(float(sweep.intervals.normalised_lower[1, 1]))
    assert point.upper == pytest.approx(float(sweep.intervals.normalised_upper[1, 1]))
    for quantity in ("lens", "ablation", "patching"):
        points = QUANTITIES[quantity].fn(model, data).values()
        # bounds come back in float32 from the bootstrap: compared at its precision
        assert all(p.lower - 1e-6 <= p.value <= p.upper + 1e-6 for p in points if not math.isnan(p.lower)), (
            quantity
        )
        assert any(not math.isnan(p.lower) for p in points), quantity
        assert_no_hooks(model)


def test_frame_covers_the_value_and_marks_exact_probes(result):
    frame = result.to_dataframe()
    assert list(frame.columns) == ["quantity", "curve", "step", "value", "lower", "upper", "exact"]
    bounded = frame.dropna(subset=["lower"])
    assert len(bounded) and (bounded["lower"] <= bounded["value"] + 1e-6).all()
    assert (bounded["value"] <= bounded["upper"] + 1e-6).all()
    probes = frame[frame["quantity"] == "probes"]
    assert len(probes) and probes["exact"].all() and probes["lower"].isna().all()
    assert set(bounded["quantity"]) == {"loss", "heads"}
    assert not frame[frame["quantity"] != "probes"]["exact"].any()


def test_json_carries_the_intervals(result):
    out = json.loads(json.dumps(result.to_dict()))
    assert out["lower"]["loss"] == pytest.approx(result.lower["loss"])
    assert out["upper"]["L1H1.induction"] == pytest.approx(result.upper["L1H1.induction"])
    assert set(out["exact"]) == set(result.groups["probes"])
    assert "bootstrap" in out["quantities"]["heads"]["interval"]
    assert "exact" in out["quantities"]["probes"]["interval"]


def test_intervals_shrink_with_more_sequences(series):
    small, large = (run_dynamics(series, ("loss",), n=n) for n in (16, 256))
    for curve in ("loss", "acc"):
        widths = [[u - lo for lo, u in zip(r.lower[curve], r.upper[curve])] for r in (small, large)]
        assert all(w_large < w_small for w_small, w_large in zip(*widths) if w_small > 0), curve
    assert small.upper["loss"][0] - small.lower["loss"][0] > 0


def test_table_prints_the_last_value_with_its_interval_and_the_figure_draws_bands(result):
    rows = {row[0]: row for row in event_rows(result)}
    loss = rows["loss"]
    assert loss[4] == pytest.approx(result.curves["loss"][-1])
    assert loss[5] == f"[{result.lower['loss'][-1]:.3f}, {result.upper['loss'][-1]:.3f}]"
    assert all(rows[c][5] == "exact" for c in result.groups["probes"] if c in rows)
    from matplotlib.collections import PolyCollection

    fig = plot_dynamics(result, "loss")
    bands = [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2  # loss and acc
    fig = plot_dynamics(result, "probes")
    assert not [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
    assert any("(exact)" in t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts())
