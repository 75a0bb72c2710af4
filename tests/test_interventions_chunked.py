"""The engine's row chunks (`Engine.cache_mb`): replaying the sequences in chunks gives the numbers of the
whole batch and of one run_with_hooks per variant, for every setter, for metrics that average over the batch
as well as per-sequence ones, and for the gradients."""

import json

import pytest
import torch
from engine_cases import last_logprob, make_model, make_setter
from helpers import assert_no_hooks, load_script

from mechmem.analysis.interventions import Engine, Intervention
from mechmem.analysis.interventions.engine import GRADIENT_FACTOR
from mechmem.analysis.interventions.reference import naive_intervene

ARCHS = {
    "ln3": {"normalization_type": "LN", "n_layers": 3},
    "attn_only2": {"normalization_type": "RMS", "n_layers": 2, "d_mlp": None},
}


def batch_mean_metric(logits):
    """One scalar for the whole batch, reading several positions: chunks must not average it on their own."""
    return logits[:, 3:].log_softmax(-1)[..., 1].mean() + logits[:, -1].softmax(-1)[:, 4].var()


@pytest.fixture(scope="module", params=list(ARCHS))
def model(request):
    return make_model(**ARCHS[request.param])


def rows_per_mb(model, pos):
    """Sequences whose cached run fits in one MiB, as the engine counts them."""
    huge = torch.zeros(1, pos, dtype=torch.long).expand(10**7, pos)
    return Engine(model, last_logprob, cache_mb=1.0).row_chunks(huge)[0].stop


def replayed_variants(model, setter):
    """One intervention per replayed stage and layer, two together at one stage, and the clean run."""
    out = []
    for layer in range(model.cfg.n_layers):
        out += [
            Intervention(f"blocks.{layer}.attn.hook_z", (slice(None), layer % 2), setter),
            Intervention(f"blocks.{layer}.hook_resid_pre", (3,), setter),
            Intervention(f"blocks.{layer}.attn.hook_pattern", (1, slice(2, None)), setter),
            Intervention(f"blocks.{layer}.hook_attn_out", (), setter),
            Intervention(f"blocks.{layer}.hook_resid_post", (slice(None), slice(0, 5)), setter),
        ]
        if not model.cfg.attn_only:
            out += [
                Intervention(f"blocks.{layer}.hook_mlp_out", (5,), setter),
                Intervention(f"blocks.{layer}.hook_resid_mid", (2,), setter),
            ]
    out.append(
        [
            Intervention("blocks.0.attn.hook_z", (slice(None), 1), setter),
            Intervention("blocks.0.attn.hook_z", (4, 0), setter),
        ]
    )
    out.append([])
    return out


ROW_CHUNK_CASES = [
    pytest.param(
        kind, metric, marks=[pytest.mark.slow] if (i + j) % 2 else [], id=f"{kind}-{metric.__name__}"
    )
    for i, kind in enumerate(["zero", "mean", "resample", "from_run", "apply"])
    for j, metric in enumerate([last_logprob, batch_mean_metric])
]
"""Every setter x metric; the default suite runs each setter with one metric, the metrics alternating (both
metrics, a per-row and a whole-batch one, meet chunking), the rest with the slow tests."""


@pytest.mark.parametrize("kind, metric", ROW_CHUNK_CASES)
def test_row_chunks_give_the_numbers_of_the_whole_batch(model, tokens, kind, metric):
    setter = make_setter(kind, model)
    variants = replayed_variants(model, setter)
    whole = Engine(model, metric, cache_mb=1e6)
    assert len(whole.row_chunks(tokens)) == 1
    expected = torch.stack(whole.run(tokens, variants))  # equal to naive_intervene: test_interventions.py
    four_rows = 4.5 / rows_per_mb(model, tokens.shape[1])
    for cache_mb in (1e-9, four_rows):  # one row per chunk and one variant per wave; chunks of 4 and 2
        engine = Engine(model, metric, cache_mb=cache_mb)
        sizes = [r.stop - r.start for r in engine.row_chunks(tokens)]
        assert sizes == ([1] * 6 if cache_mb < 1e-6 else [4, 2])
        got = torch.stack(engine.run(tokens, variants))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    moved = (expected - expected[-1]).reshape(len(variants), -1).abs().amax(1)
    assert int((moved > 1e-4).sum()) >= len(variants) // 3  # the interventions do act
    assert_no_hooks(model)


def test_row_chunks_with_a_different_reference_size_and_hooked_variants(model, tokens):
    """A mean over 11 reference sequences (not the 6 inputs) is the whole reference's, and variants the
    replay does not run (hook_post) go to hooks beside the chunked ones; all equal one run_with_hooks each."""
    setter = make_setter("mean", model)
    variants = [*replayed_variants(model, setter)[:4], replayed_variants(model, setter)[-2]]
    if not model.cfg.attn_only:
        variants.append(Intervention("blocks.0.mlp.hook_post", (slice(None), [1, 3]), setter))
    chunked = torch.stack(Engine(model, batch_mean_metric, cache_mb=1e-9).run(tokens, variants))
    naive = naive_intervene(model, tokens, variants, batch_mean_metric)
    torch.testing.assert_close(chunked, naive, atol=1e-5, rtol=0)


def test_chunked_gradients_equal_the_whole_batch(model, tokens):
    def metric(logits):
        return logits[:, -2:].log_softmax(-1)[..., 3].mean()

    whole = Engine(model, metric, cache_mb=1e6)
    chunked = Engine(model, metric, cache_mb=GRADIENT_FACTOR * 4.5 / rows_per_mb(model, tokens.shape[1]))
    assert [r.stop - r.start for r in chunked.row_chunks(tokens, factor=GRADIENT_FACTOR)] == [4, 2]
    embed = model.W_E[tokens].detach() * 0.7
    reference = whole.gradients(tokens)[2]
    for kwargs in ({}, {"embed": embed}):
        value, acts, grads = whole.gradients(tokens, **kwargs)
        got_value, got_acts, got_grads = chunked.gradients(tokens, **kwargs)
        assert abs(value - got_value) < 1e-5
        assert acts.keys() == got_acts.keys()
        for stage in acts:
            assert len(acts[stage]) == len(got_acts[stage])
            for a, b, g, h in zip(acts[stage], got_acts[stage], grads[stage], got_grads[stage]):
                torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
                torch.testing.assert_close(h, g, atol=1e-6, rtol=1e-4)
        assert any(g.abs().max() > 1e-4 for g in grads["z"])
    _, only, only_grads = chunked.gradients(tokens, stages=("z", "resid_pre"))
    assert {s for s, a in only.items() if a} == {"z", "resid_pre"}
    for a, b in zip(only_grads["z"], reference["z"]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    assert_no_hooks(model)


def test_gradient_sums_reduce_each_chunk_as_the_whole_batch_row_by_row(model, tokens):
    def metric(logits):
        return logits[:, -2:].log_softmax(-1)[..., 3].mean()

    def per_sequence(r, acts, grads):  # a reduction that reads every layer of both stages
        total = sum((a * g).sum((1, 2, 3)) for a, g in zip(acts["z"], grads["z"]))
        return total + sum((a * g).sum((1, 2)) for a, g in zip(acts["resid_pre"], grads["resid_pre"]))

    whole = Engine(model, metric, cache_mb=1e6)
    chunked = Engine(model, metric, cache_mb=GRADIENT_FACTOR * 4.5 / rows_per_mb(model, tokens.shape[1]))
    assert len(chunked.row_chunks(tokens, factor=GRADIENT_FACTOR)) == 2
    seen: list[slice] = []

    def recorded(r, acts, grads):
        seen.append(r)
        assert {s for s, a in acts.items() if a} == {"z", "resid_pre"}
        return per_sequence(r, acts, grads)

    value, acts, grads = whole.gradients(tokens, stages=("z", "resid_pre"))
    expected = per_sequence(slice(None), acts, grads)
    got_value, got = chunked.gradient_sums(tokens, ("z", "resid_pre"), recorded)
    assert seen == [slice(0, 4), slice(4, 6)] and got.shape == (len(tokens),)
    assert abs(value - got_value) < 1e-5 and bool(expected.abs().max() > 1e-4)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert_no_hooks(model)


def test_engine_memory_benchmark_gives_the_same_values_at_any_budget(tmp_path, capsys):
    bench = load_script("benchmarks/engine_memory.py")
    records = []
    for budget in ("0.01", "1e6"):
        out = tmp_path / f"{budget}.json"
        assert bench.main(["--size", "2x16x2@12", "--n", "5", "--cache-mb", budget, "--out", str(out)]) == 0
        records.append(json.loads(out.read_text()))
    assert records[0]["chunks"] == 5 and records[1]["chunks"] == 1
    assert records[0]["values"] == pytest.approx(records[1]["values"], abs=1e-5)
    capsys.readouterr()
    assert bench.main(["--size", "2x6x4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
