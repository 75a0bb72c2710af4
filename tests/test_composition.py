"""Composition scores: equal to TransformerLens's own `all_composition_scores` (mechmem, plain TransformerLens
and grouped-query models, a model trained with plain TransformerLens) and to a dense loop; the planted
previous-token -> induction pair is the top K-composition; the baseline is deterministic given a generator."""

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import build_model

from mechmem.analysis.composition import (
    MODES,
    CompositionScores,
    composition_scores,
    no_pairs_reason,
    plot_composition,
    random_baseline,
)
from mechmem.analysis.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_induction_model
from mechmem.checkpoint import load_checkpoint
from mechmem.errors import MechmemError
from mechmem.models.backend import hooked_transformer_config, raw_hooked_transformer

DRAWS = 100
HELDOUT = Path(__file__).parent / "data" / "heldout" / "rotary.pt"


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def planted():
    return planted_induction_model()


@pytest.fixture(scope="module")
def result(planted):
    return composition_scores(planted, baseline_draws=DRAWS, generator=gen())


def assert_matches_transformer_lens(model, result: CompositionScores) -> None:
    for mode in MODES:
        ref = model.all_composition_scores(mode)
        ref = getattr(ref, "scores", ref)  # TransformerLens 4 wraps the tensor
        torch.testing.assert_close(
            result.scores[mode], ref.float().cpu(), equal_nan=True, atol=1e-5, rtol=1e-4
        )


def test_planted_model_equals_transformer_lens(planted, result):
    assert_matches_transformer_lens(planted, result)


@pytest.mark.parametrize("n_key_value_heads", [None, 2])
def test_plain_transformer_lens_model_equals_its_own_scores(n_key_value_heads):
    torch.manual_seed(0)  # TransformerLens's own initialisation draws from the global generator
    cfg = hooked_transformer_config(
        n_layers=3, d_model=32, n_heads=4, d_head=8, d_vocab=10, n_ctx=8, act_fn="relu",
        normalization_type="LN", n_key_value_heads=n_key_value_heads,
    )  # fmt: skip
    model = raw_hooked_transformer(cfg)
    assert_matches_transformer_lens(model, composition_scores(model, baseline_draws=DRAWS, generator=gen()))


def test_model_trained_with_plain_transformer_lens_equals_its_own_scores():
    model = load_checkpoint(HELDOUT).model
    assert_matches_transformer_lens(model, composition_scores(model, baseline_draws=DRAWS, generator=gen()))


def test_dense_loop_agrees(planted, result):
    w_q, w_k, w_v, w_o = (w.detach() for w in (planted.W_Q, planted.W_K, planted.W_V, planted.W_O))
    ov = lambda l, h: w_v[l, h] @ w_o[l, h]
    qk = lambda l, h: w_q[l, h] @ w_k[l, h].T
    reads = {"Q": qk, "K": lambda l, h: qk(l, h).T, "V": ov}
    for mode, read in reads.items():
        for h1 in range(planted.cfg.n_heads):
            for h2 in range(planted.cfg.n_heads):
                a, b = ov(0, h1), read(1, h2)
                expected = (a @ b).norm() / a.norm() / b.norm()
                got = result.scores[mode][0, h1, 1, h2]
                assert torch.isclose(got, expected, atol=1e-5, equal_nan=True), (mode, h1, h2)
        assert (result.scores[mode][1, :, 0] == 0).all() and (result.scores[mode][0, :, 0] == 0).all()


def test_planted_previous_token_to_induction_is_the_top_k_composition(result):
    (best,) = result.top("K", 1)
    assert (best.sender.layer, best.sender.head) == PREVIOUS_TOKEN_HEAD
    assert (best.receiver.layer, best.receiver.head) == INDUCTION_HEAD
    assert best.above_baseline and best.score > result.baseline.upper
    others = result.top("K", 9)[1:]
    assert all(p.score < best.score and not p.above_baseline for p in others)


def test_baseline_is_deterministic_given_a_generator_and_near_one_over_sqrt_d_model():
    a, b = (random_baseline(32, 8, draws=DRAWS, generator=gen(1)) for _ in range(2))
    c = random_baseline(32, 8, draws=DRAWS, generator=gen(2))
    assert a == b and a != c
    assert a.lower < a.mean < a.upper
    assert abs(a.mean - 1 / math.sqrt(32)) < 0.1 / math.sqrt(
        32
    )  # E||AB||^2 / (E||A||^2 E||B||^2) = 1/d_model
    with pytest.raises(ValueError, match="baseline_draws"):
        random_baseline(32, 8, draws=1, generator=gen())


def test_tables_json_repr_and_plot(result):
    frame = result.to_dataframe()
    n_heads = result.scores["K"].shape[1]
    assert len(frame) == 3 * n_heads * n_heads  # one later layer: every (L0, L1) pair per mode
    assert {"mode", "sender", "receiver", "score", "baseline_mean", "baseline_upper"} <= set(frame.columns)
    row = frame[(frame["mode"] == "K") & (frame["sender"] == "L0H2") & (frame["receiver"] == "L1H1")]
    assert bool(row["above_baseline"].item()) and row["score"].item() == pytest.approx(
        result.top("K", 1)[0].score
    )
    json.dumps(result.to_dict(), allow_nan=False)
    assert "L0H2->L1H1" in repr(result) and len(repr(result)) < 200
    assert len(plot_composition(result).axes) == 4  # three heatmaps and the colour bar
    with pytest.raises(ValueError, match="mode"):
        result.top("X")


def test_one_layer_and_headless_models():
    one = build_model(n_layers=1)
    assert "one layer" in no_pairs_reason(one)
    found = composition_scores(one, baseline_draws=DRAWS, generator=gen())
    assert found.top("K") == [] and len(found.to_dataframe()) == 0
    json.dumps(found.to_dict(), allow_nan=False)
    with pytest.raises(MechmemError, match="must be a TransformerLens model"):
        composition_scores(torch.nn.Linear(2, 2))


def test_report_and_heads_command_use_the_same_scores(planted, capsys):
    from mechmem.cli.heads import composition_outputs
    from mechmem.report.document import Section
    from mechmem.report.sections import add_composition

    section = Section("heads", "")
    add_composition(section, planted, gen(14))
    expected = composition_scores(planted, generator=gen(14)).to_dict()
    assert section.findings["composition"] == expected
    assert section.tables[0].rows == [["K", "L0H2", "L1H1", expected["top"]["K"][0]["score"], True]]
    assert "composition" in section.figures
    files = composition_outputs(planted, seed=3)
    assert files["composition.json"] == composition_scores(planted, generator=gen(3)).to_dict()
    assert "L1H1" in capsys.readouterr().out
    one = build_model(n_layers=1)
    assert "one layer" in composition_outputs(one, seed=0)["composition.json"]["skipped"]
    add_composition(section := Section("heads", ""), one, gen())
    assert "one layer" in section.findings["composition"]["skipped"] and not section.tables
