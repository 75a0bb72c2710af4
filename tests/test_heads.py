"""Head detection: planted heads ranked first, patterns by hand, weights rebuild the cached attention."""

import pytest
import torch
from helpers import assert_no_hooks, build_transformer_cfg, load_script

from mechmem.analysis.heads import (
    BUILTIN_PATTERNS,
    HeadScores,
    attention_from_weights,
    attention_patterns,
    detect_heads,
    duplicate_token_pattern,
    induction_pattern,
    no_attention_reason,
    plot_attention,
    plot_head_scores,
    previous_token_pattern,
    probe_halves,
    repeated_random_tokens,
)
from mechmem.analysis.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_induction_model
from mechmem.models.backend import HookedRootModule
from mechmem.models.parts import Head
from mechmem.models.transformer import build_transformer


@pytest.fixture(scope="module")
def planted():
    return planted_induction_model()


@pytest.fixture(scope="module")
def repeated():
    return repeated_random_tokens(48, 10, 12, generator=torch.Generator().manual_seed(0))


def test_planted_heads_ranked_first(planted, repeated):
    result = detect_heads(planted, repeated)
    prev, ind = result.ranking("previous_token"), result.ranking("induction")
    assert prev[0][:2] == PREVIOUS_TOKEN_HEAD and prev[0][2] > 0.99 and prev[1][2] < 0.5
    assert ind[0][:2] == INDUCTION_HEAD and ind[0][2] > 0.99 and ind[1][2] < 0.5
    assert_no_hooks(planted)


def test_patterns_by_hand():
    tokens = torch.tensor([[5, 7, 5, 7]])
    assert previous_token_pattern(tokens)[0].nonzero().tolist() == [[1, 0], [2, 1], [3, 2]]
    assert duplicate_token_pattern(tokens)[0].nonzero().tolist() == [[2, 0], [3, 1]]
    # query 2 (token 5): key 1 follows the earlier 5; query 3 (token 7): key 2 follows the earlier 7
    assert induction_pattern(tokens)[0].nonzero().tolist() == [[2, 1], [3, 2]]


def test_scores_equal_naive_average_and_chunking(planted, repeated):
    patterns = attention_patterns(planted, repeated)  # [layer batch head q k]
    mask = induction_pattern(repeated)
    valid = mask.any(-1)
    on = (patterns * mask[None, :, None]).sum(-1)  # [layer batch head q]
    naive = (on * valid[None, :, None]).sum((1, 3)) / valid.sum()
    fast = detect_heads(planted, repeated, {"induction": induction_pattern}, chunk=7).scores["induction"]
    torch.testing.assert_close(fast, naive.float(), atol=1e-5, rtol=0)


def test_intervals_and_token_scores_equal_naive_loops(planted, repeated):
    patterns = attention_patterns(planted, repeated)  # [layer batch head q k]
    mask = induction_pattern(repeated)
    valid = mask.any(-1)
    on = (patterns * mask[None, :, None]).sum(-1) * valid[None, :, None]  # [layer batch head q]
    result = detect_heads(planted, repeated, {"induction": induction_pattern}, chunk=5)
    # per token: the mean over the rows whose query holds it, one token at a time
    for token in range(12):
        rows = valid & (repeated == token)
        naive = on.permute(1, 3, 0, 2)[rows].sum(0) / rows.sum()  # [layer head]
        torch.testing.assert_close(result.by_token["induction"][..., token], naive.float(), atol=1e-5, rtol=0)
    # the bootstrap interval: 200 resamples of the sequences drawn from the same generator, one at a time
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(len(repeated), (200, len(repeated)), generator=gen)
    per_seq, rows_per_seq = on.sum(-1).permute(1, 0, 2), valid.sum(-1).float()  # [batch layer head], [batch]
    stats = torch.stack([per_seq[i].sum(0) / rows_per_seq[i].sum() for i in idx])
    lower, upper = torch.quantile(stats.double(), torch.tensor([0.025, 0.975], dtype=torch.float64), dim=0)
    torch.testing.assert_close(result.lower["induction"], lower.float(), atol=1e-5, rtol=0)
    torch.testing.assert_close(result.upper["induction"], upper.float(), atol=1e-5, rtol=0)
    score = result.scores["induction"]
    assert bool(
        (result.lower["induction"] <= score + 1e-6).all()
        and (score <= result.upper["induction"] + 1e-6).all()
    )
    # the planted induction head is clear for every token; nothing else is
    assert result.selective_lower("induction")[INDUCTION_HEAD] > 0.9
    assert_no_hooks(planted)


def test_probe_halves_cover_the_context():
    assert probe_halves(64, 48) == [4, 8, 16, 32]
    assert probe_halves(24, 12) == [4, 8, 12]
    assert probe_halves(256, 100) == [4, 8, 16, 32, 64, 100]
    assert probe_halves(6, 12) == [3]


def test_custom_fixed_pattern_finds_first_token_head(planted, repeated):
    first = torch.zeros(24, 24, dtype=torch.bool)
    first[1:, 0] = True
    result = detect_heads(planted, repeated, {"first_token": first})
    assert result.ranking("first_token")[0][:2] == (0, 1)


def test_attention_rebuilt_from_weights_equals_cache():
    model = build_transformer(
        build_transformer_cfg(normalization_type="LN"), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        for block in model.blocks:  # non-zero biases so they are exercised too
            block.attn.b_Q.normal_(generator=torch.Generator().manual_seed(2))
            block.attn.b_K.normal_(generator=torch.Generator().manual_seed(3))
    tokens = torch.randint(6, (4, 9), generator=torch.Generator().manual_seed(4))
    _, cache = model.run_with_cache(tokens)
    for layer in range(2):
        rebuilt = attention_from_weights(model, cache[f"blocks.{layer}.ln1.hook_normalized"], layer)
        torch.testing.assert_close(rebuilt, cache[f"blocks.{layer}.attn.hook_pattern"], atol=1e-5, rtol=0)


def test_result_validation_serialisation_and_plots(planted, repeated):
    with pytest.raises(ValueError):
        HeadScores({"a": torch.zeros(2, 3), "b": torch.zeros(3, 2)})
    result = detect_heads(planted, repeated[:4])
    d = result.to_dict()
    assert set(d["scores"]) == set(BUILTIN_PATTERNS) and d["axes"] == ["layer", "head"]
    assert len(d["scores"]["induction"]) == 2 and len(d["scores"]["induction"][0]) == 3
    assert type(plot_head_scores(result)).__name__ == "Figure"
    fig = plot_attention(attention_patterns(planted, repeated[:1])[:, 0], repeated[0])
    assert type(fig).__name__ == "Figure"
    assert_no_hooks(planted)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_models_without_attention_are_named():
    assert no_attention_reason(HookedRootModule()) is not None
    assert no_attention_reason(planted_induction_model(4, 6)) is None


def test_script_probes_the_lengths_asked_for_and_rejects_impossible_ones(planted, tmp_path, capsys):
    import json

    from mechmem.analysis.planted import planted_config
    from mechmem.checkpoint import save_checkpoint
    from mechmem.cli import run_script
    from mechmem.tasks.generic import RepeatsConfig

    module = load_script("detect_heads")
    ckpt = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=planted,
        model_config=planted_config(),
        task_name="repeats",
        task_config=RepeatsConfig(d_vocab=12, half=6),
    )
    args = [str(ckpt), "--out", str(tmp_path), "--n-samples", "64"]  # one look: the first round
    assert run_script(module.main, args) == 0
    data = json.loads((tmp_path / "detect_heads.json").read_text())
    # the rule's lengths (4, 8, 12 for n_ctx 24, 12 tokens) plus the task's own (6), then the task's data
    assert data["probes"] == [
        "[r, r], |r| = 4",
        "[r, r], |r| = 6",
        "[r, r], |r| = 8",
        "[r, r], |r| = 12",
        "task data",
    ]
    patterns = data["patterns"]  # attention-pattern labels (the report names roles)
    assert patterns["L1H1"]["pattern"] == "induction" and patterns["L0H2"]["pattern"] == "previous-token"
    assert run_script(module.main, [*args, "--lengths", "5,3"]) == 0
    assert json.loads((tmp_path / "detect_heads.json").read_text())["probes"][:2] == [
        "[r, r], |r| = 3",
        "[r, r], |r| = 5",
    ]
    capsys.readouterr()
    assert run_script(module.main, [*args, "--half", "13"]) == 2  # 2 x 13 > n_ctx = 24
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_head_names_round_trip_and_bad_text_is_refused():
    assert str(Head(0, 1)) == Head(0, 1).name == "L0H1" and f"{Head(12, 3)}.OV" == "L12H3.OV"
    assert Head.parse("L12H3") == Head(12, 3) and Head.parse(Head(2, 0).name) == Head(2, 0)
    for bad in ("L1", "H1", "L1H", "LxH1", "L1H2.OV", "mlp"):
        with pytest.raises(ValueError, match="names no head"):
            Head.parse(bad)
