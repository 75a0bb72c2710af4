"""QK attribution: the terms sum to the model's own attention scores (hook_attn_scores) on every architecture
either backend builds, the planted induction head's score is the embedding read against the previous-token
head's output, a held-out model trained with plain TransformerLens sums exactly too, and the command."""

import copy
import json

import pytest
import torch
from helpers import ROOT, assert_no_hooks, build_model, build_transformer_cfg

import mechmem
from mechmem.analysis.qk import qk_attribution, qk_patching_agreement, qk_unsupported, residual_sources
from mechmem.cli import run_script
from mechmem.cli.qk import main
from mechmem.errors import MechmemError
from mechmem.models.backend import BACKEND, hooked_transformer_config, raw_hooked_transformer
from mechmem.models.transformer_config import bridge_unsupported
from mechmem.tasks.base import AttentionSites

ARCHITECTURES = {
    "attention_only": {"d_mlp": None},
    "layernorm_mlp": {"normalization_type": "LN"},
    "rotary": {"positional_embedding_type": "rotary", "normalization_type": "LN", "rotary_dim": 4},
    "rms": {"normalization_type": "RMS", "positional_embedding_type": "rotary"},
    "lnpre": {"normalization_type": "LNPre"},
    "grouped_query": {"n_heads": 4, "n_key_value_heads": 2, "positional_embedding_type": "rotary"},
    "parallel": {"normalization_type": "LN", "parallel_attn_mlp": True},
    "local": {"attn_types": ("local", "global"), "window_size": 3, "normalization_type": "LN"},
}


def every_pair(tokens: torch.Tensor) -> AttentionSites:
    n = tokens.shape[1]
    return AttentionSites("all", tokens, torch.ones(len(tokens), n, n, dtype=torch.bool).tril())


def model_scores_per_prompt(model, sites: AttentionSites) -> dict[str, torch.Tensor]:
    """Per head, the model's own scores (hook_attn_scores) averaged over each prompt's unmasked pairs."""
    _, cache = model.run_with_cache(sites.tokens)
    out = {}
    for layer in range(model.cfg.n_layers):
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"].double()
        for head in range(model.cfg.n_heads):
            read = sites.pairs & scores[:, head].isfinite()  # a local window masks some pairs
            kept = scores[:, head].where(read, torch.zeros((), dtype=torch.float64))
            out[f"L{layer}H{head}"] = kept.sum((1, 2)) / read.sum((1, 2))
    return out


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_terms_sum_to_the_models_scores(name):
    overrides = ARCHITECTURES[name]
    if BACKEND == "bridge" and bridge_unsupported(build_transformer_cfg(**overrides)):
        pytest.skip("TransformerLens 4 does not build it (make test-tl3 runs it)")
    model = build_model(**overrides)
    tokens = torch.randint(
        model.cfg.d_vocab, (4, model.cfg.n_ctx), generator=torch.Generator().manual_seed(1)
    )
    sites = every_pair(tokens)
    result = qk_attribution(model, sites=sites)
    expected = model_scores_per_prompt(model, sites)
    assert len(result.entries) == model.cfg.n_layers * model.cfg.n_heads
    for entry in result.entries:
        torch.testing.assert_close(entry.per_prompt.sum((1, 2)), expected[entry.head], atol=1e-5, rtol=0)
        assert entry.max_error < 1e-5
    frozen = overrides.get("normalization_type") is not None
    assert result.convention == ("exact with each position's norm scale frozen" if frozen else "exact")
    assert bool(result.rotary) == (overrides.get("positional_embedding_type") == "rotary")
    assert_no_hooks(model)


def test_the_sources_sum_to_the_residual_stream():
    model = build_model(normalization_type="LN")
    _, cache = model.run_with_cache(torch.randint(6, (3, 9), generator=torch.Generator().manual_seed(2)))
    names, sources = residual_sources(model, cache, 1)
    assert names == ["embed", "pos", "L0H0", "L0H1", "MLP0", "bias"]
    torch.testing.assert_close(sources.sum(0), cache["blocks.1.hook_resid_pre"].double(), atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def planted():
    model = mechmem.planted_induction_model()
    task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    return model, task


def test_planted_heads_read_what_they_were_built_to_read(planted):
    """The induction head L1H1: its token against the previous-token head's output; L0H2: positions."""
    model, task = planted
    result = qk_attribution(model, task, heads=["L1H1", "L0H2"], n=16)
    assert result.top("L0H2", 1, "previous_token")[0][:2] == ("pos", "pos")
    entry = result.entry("L1H1", "induction")
    assert entry.note == ""  # the repeats task's own data repeats tokens
    mean = {side: entry.interval(side)[0] for side in ("key", "query")}
    assert entry.sources[int(mean["key"].abs().argmax())] == "L0H2"
    assert entry.sources[int(mean["query"].abs().argmax())] == "embed"
    assert result.top("L1H1", 1)[0][:2] == ("embed", "L0H2")
    frame = result.to_dataframe()
    assert {"head", "sites", "query_source", "key_source", "contribution", "lower", "upper"} <= set(
        frame.columns
    )
    frame = frame[(frame["head"] == "L1H1") & (frame.sites == "induction")]
    pairs = frame[(frame.query_source != "all") & (frame.key_source != "all")]
    by_key = pairs.groupby("key_source").contribution.sum()
    marginal = frame[frame.query_source == "all"].set_index("key_source").contribution
    torch.testing.assert_close(torch.tensor(by_key[marginal.index].values), torch.tensor(marginal.values))
    json.dumps(result.to_dict(), allow_nan=False)
    assert "QKAttribution(2 heads" in repr(result)
    assert type(mechmem.plot(result)).__name__ == "Figure"


def test_planted_attribution_agrees_with_path_patching(planted):
    model, task = planted
    key, query = qk_patching_agreement(model, task, "L1H1", n=8)
    assert (key.side, query.side) == ("key", "query")
    assert key.top_agrees and query.top_agrees
    assert key.sources[max(range(len(key.sources)), key=lambda i: abs(key.patching[i]))] == "L0H2"
    assert_no_hooks(model)


def test_a_heldout_model_sums_exactly():
    ckpt = mechmem.load_checkpoint(ROOT / "tests" / "data" / "heldout" / "split.pt")
    model = copy.deepcopy(ckpt.model).to(torch.float64)  # float64: the gap is the model's own rounding
    tokens = ckpt.task.eval_batch(8, generator=torch.Generator().manual_seed(0)).tokens
    sites = every_pair(tokens)
    result = qk_attribution(model, sites=sites, heads=["L1H1", "L1H2"])
    expected = model_scores_per_prompt(model, sites)
    for entry in result.entries:
        torch.testing.assert_close(entry.per_prompt.sum((1, 2)), expected[entry.head], atol=1e-5, rtol=0)


def test_role_probes_give_the_tasks_sites():
    task = mechmem.build_task("permutation", {"vocab_size": 4})
    sites = task.attention_sites(8, generator=torch.Generator().manual_seed(0))
    assert [s.name for s in sites] == ["recall", "elimination"]
    last = sites[0].tokens.shape[1] - 1
    assert bool(sites[0].pairs[:, :last].any()) is False and bool(sites[0].pairs[:, last].any())


def test_soft_capped_scores_are_refused():
    cfg = hooked_transformer_config(
        n_layers=1, d_model=8, n_heads=2, d_head=4, n_ctx=5, d_vocab=5, act_fn="relu", attn_only=True
    )
    cfg.attn_scores_soft_cap = 0.5
    model = raw_hooked_transformer(cfg)
    assert "soft-capped" in qk_unsupported(model)
    with pytest.raises(MechmemError, match="soft-capped"):
        qk_attribution(model, sites=every_pair(torch.zeros(1, 5, dtype=torch.long)))


@pytest.fixture(scope="module")
def planted_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("planted")
    with pytest.warns(UserWarning):
        return mechmem.save_model(mechmem.planted_induction_model(), folder / "ckpt.pt")


def test_the_command_writes_its_files(planted_checkpoint, tmp_path, capsys):
    assert main([str(planted_checkpoint), "--head", "L1H1", "--n-samples", "8", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "key side: L0H2" in out and "query side: embed" in out and "top source L0H2 by both" in out
    data = json.loads((tmp_path / "qk_attribution.json").read_text())
    assert {e["head"] for e in data["entries"]} == {"L1H1"} and len(data["agreement"]) == 2
    assert (tmp_path / "qk_attribution.png").exists()


@pytest.mark.parametrize(("head", "message"), [("L9H0", "is not in the model"), ("bogus", "names no head")])
def test_a_bad_head_is_one_line(planted_checkpoint, tmp_path, capsys, head, message):
    assert run_script(main, [str(planted_checkpoint), "--head", head, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert not (tmp_path / "x").exists()


def test_hooked_scores_give_transformerlens_own_pattern():
    """Caching the scores runs the model's own attention; its softmax is the pattern of a run that hooks
    only the pattern (TransformerLens's own forward under either backend)."""
    model = build_model(positional_embedding_type="rotary", normalization_type="LN", rotary_dim=4)
    tokens = torch.randint(
        model.cfg.d_vocab, (3, model.cfg.n_ctx), generator=torch.Generator().manual_seed(3)
    )
    _, own = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))
    logits, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(logits, model(tokens))
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_attn_scores"].softmax(-1)
        torch.testing.assert_close(pattern, own[f"blocks.{layer}.attn.hook_pattern"], atol=1e-6, rtol=0)


def test_the_report_says_why_each_circuit_head_attends(planted):
    from mechmem.report.circuit_graph import edges_section
    from mechmem.report.sections import ReportContext

    model, task = planted
    roles = mechmem.head_roles(model, task, n=64)
    section = edges_section(ReportContext(model, task, 64, 0, roles))
    reasons = {r["head"]: r for r in section.findings["attends"]["heads"]}
    assert set(reasons) == {"L0H2", "L1H1"}  # the circuit's heads
    induction = reasons["L1H1"]
    assert (induction["role"], induction["sites"]) == ("induction", "induction")
    assert (induction["key_top"], induction["query_top"]) == ("L0H2", "embed")
    assert induction["patching"]["top_agrees"]
    assert reasons["L0H2"]["sites"] == "previous_token"
    table = next(t for t in section.tables if t.caption.startswith("Why each circuit head attends"))
    assert [row[0] for row in table.rows] == ["L0H2", "L1H1"]
    nodes = {n["name"]: n for n in section.interactive["graph"]["nodes"]}
    assert nodes["L1H1"]["attends"] == "embed x L0H2"
