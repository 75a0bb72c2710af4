"""Results as tables: every result's `to_dataframe` holds each of its cells exactly once, with the value, the
interval and the token name the result stores (checked cell by cell against its tensors), and its repr is
short; tasks name their tokens and figures use the names."""

import itertools
import math

import pytest
import torch
from helpers import build_model

from mechmem.analysis import heads, logit_lens, probes, roles
from mechmem.analysis.ablation import ablate_heads
from mechmem.analysis.circuits.discovery import ScoredEdges, discover_circuit
from mechmem.analysis.dynamics.measure import Dynamics
from mechmem.analysis.frames import grid_frame, token_labels
from mechmem.analysis.patching import run_sweeps
from mechmem.analysis.planted import planted_induction_model
from mechmem.analysis.stats import Z_95
from mechmem.analysis.transitions import level
from mechmem.tasks import build_task
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask
from mechmem.training.run import train_preset


@pytest.fixture(scope="module")
def planted():
    return planted_induction_model()


@pytest.fixture(scope="module")
def pair(planted):
    task = RepeatsTask(RepeatsConfig.for_model(planted, half=6))
    return task.patching_pair(8, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def repeats(planted):
    return heads.repeated_random_tokens(
        16, 6, planted.cfg.d_vocab, generator=torch.Generator().manual_seed(1)
    )


@pytest.fixture(scope="module")
def birth():
    return build_task("birth", {"seq_len": 32})


def by_key(frame, keys):
    """{tuple of the key columns: row}, failing when a key occurs twice."""
    rows = {}
    for row in frame.to_dict("records"):
        key = tuple(None if _missing(row[k]) else row[k] for k in keys)
        assert key not in rows, f"cell {key} occurs twice"
        rows[key] = row
    return rows


def _missing(x):
    return x is None or (isinstance(x, float) and math.isnan(x)) or str(x) == "<NA>"


def same(a, b, tol=1e-6):
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=tol, abs_tol=tol)


def cells(shape):
    return itertools.product(*(range(n) for n in shape))


def assert_short_repr(result, name):
    text = repr(result)
    assert text.startswith(f"{name}(") and len(text) < 400 and "tensor(" not in text, text


def test_patching_frame_holds_every_cell(planted, pair):
    for result in run_sweeps(planted, pair, ("resid_pre", "attn_head_out_by_pos")).values():
        frame = result.to_dataframe()
        axes = list(result.axes)
        bounds = ["lower", "upper", "effect_lower", "effect_upper"]
        tail = ["value", *bounds, "normalised", "normalised_lower", "normalised_upper"]
        assert list(frame.columns) == ["sweep", "stage", "direction", "method", *axes, *tail]
        rows = by_key(frame, axes)
        assert len(rows) == result.values.numel()
        normalised = result.normalised()
        for cell in cells(result.values.shape):
            row = rows[cell]
            assert same(row["value"], result.values[cell]) and same(row["normalised"], normalised[cell])
            for name in [*bounds, "normalised_lower", "normalised_upper"]:
                assert same(row[name], getattr(result.intervals, name)[cell])
            assert (row["sweep"], row["direction"], row["method"]) == (result.sweep, "denoising", "exact")
        assert_short_repr(result, "PatchingResult")


def test_ablation_frame_holds_heads_and_layers():
    model = build_model()
    tokens = torch.randint(model.cfg.d_vocab, (6, 9), generator=torch.Generator().manual_seed(0))
    result = ablate_heads(
        model,
        tokens,
        lambda logits: logits.logsumexp(-1).mean(),
        methods=("zero", "mean"),
        metric_name="logsumexp",
    )
    frame = result.to_dataframe()
    assert list(frame.columns) == ["method", "component", "layer", "head", "value", "delta", "lower", "upper"]
    assert frame["lower"].isna().all() and frame["upper"].isna().all()  # a scalar metric: no intervals
    rows = by_key(frame, ["method", "component", "layer", "head"])
    n_methods, n_layers, n_heads = result.heads.shape
    assert len(rows) == n_methods * n_layers * (n_heads + 2)
    for m, layer in cells((n_methods, n_layers)):
        method = result.methods[m]
        for head in range(n_heads):
            row = rows[(method, "head", layer, head)]
            assert same(row["value"], result.heads[m, layer, head])
            assert same(row["delta"], result.heads[m, layer, head] - result.baseline)
        assert same(rows[(method, "attn", layer, None)]["value"], result.attn_layers[m, layer])
        assert same(rows[(method, "mlp", layer, None)]["value"], result.mlp_layers[m, layer])
    assert_short_repr(result, "AblationResult")


def test_head_scores_frame_carries_intervals_and_tokens(planted, repeats):
    result = heads.detect_heads(planted, repeats)
    frame = result.to_dataframe()
    assert list(frame.columns) == ["pattern", "layer", "head", "value", "lower", "upper"]
    rows = by_key(frame, ["pattern", "layer", "head"])
    assert len(rows) == sum(s.numel() for s in result.scores.values())
    for name, scores in result.scores.items():
        for cell in cells(scores.shape):
            row = rows[(name, *cell)]
            assert same(row["value"], scores[cell])
            assert same(row["lower"], result.lower[name][cell]) and same(
                row["upper"], result.upper[name][cell]
            )

    names = [f"t{i}" for i in range(planted.cfg.d_vocab)]
    frame = result.to_dataframe(by_token=True, token_names=names)
    assert list(frame.columns) == ["pattern", "layer", "head", "token_id", "token", "value", "lower", "upper"]
    rows = by_key(frame, ["pattern", "layer", "head", "token_id"])
    assert len(rows) == sum(s.numel() for s in result.by_token.values())
    for name, values in result.by_token.items():
        for cell in cells(values.shape):
            row, low = rows[(name, *cell)], result.by_token_lower[name][cell]
            assert row["token"] == names[cell[2]]
            assert same(row["value"], values[cell]) and same(row["lower"], low)
            assert same(row["upper"], 2 * values[cell] - low)
    assert_short_repr(result, "HeadScores")


def test_head_scores_without_intervals_have_no_interval_columns():
    result = heads.HeadScores({"induction": torch.rand(2, 3)}, data="by hand")
    assert list(result.to_dataframe().columns) == ["pattern", "layer", "head", "value"]
    assert_short_repr(result, "HeadScores")


def test_logit_lens_frames(planted, repeats):
    mask = torch.zeros(repeats.shape)
    mask[:, repeats.shape[1] // 2 :] = 1.0
    result = logit_lens.logit_lens(planted, repeats[:, :-1], repeats[:, 1:], mask[:, :-1], k=3)
    frame = result.to_dataframe()
    assert list(frame.columns) == ["stage", "batch", "pos", "weight", "value", "rank"]
    assert list(frame["stage"].cat.categories) == list(result.stages) and frame["stage"].cat.ordered
    rows = by_key(frame, ["stage", "batch", "pos"])
    assert len(rows) == result.target_prob.numel()
    for s, b, p in cells(result.target_prob.shape):
        row = rows[(result.stages[s], b, p)]
        assert same(row["value"], result.target_prob[s, b, p]) and row["rank"] == result.target_rank[s, b, p]
        assert same(row["weight"], result.mask[b, p])

    names = [f"t{i}" for i in range(planted.cfg.d_vocab)]
    frame = result.to_dataframe(top_tokens=True, token_names=names)
    assert list(frame.columns) == ["stage", "batch", "pos", "k", "token_id", "token", "value"]
    rows = by_key(frame, ["stage", "batch", "pos", "k"])
    assert len(rows) == result.top_probs.numel()
    for s, b, p, k in cells(result.top_probs.shape):
        row = rows[(result.stages[s], b, p, k + 1)]
        assert row["token_id"] == result.top_tokens[s, b, p, k]
        assert row["token"] == names[int(result.top_tokens[s, b, p, k])]
        assert same(row["value"], result.top_probs[s, b, p, k])
    assert_short_repr(result, "LogitLensResult")


def test_probe_frames(planted):
    result = probes.builtin_probes(planted)
    frame = result.to_dataframe()
    assert list(frame.columns) == probes.PROBE_COLUMNS
    rows = by_key(frame, ["probe", "measure"])
    for probe in result.probes:
        numbers = {k: v for k, v in probe.extra.items() if isinstance(v, float)}
        expected = {"recall": probe.recall, "chance": probe.chance, **numbers}
        assert {m for p, m in rows if p == probe.name} == set(expected)
        for measure, value in expected.items():
            row = rows[(probe.name, measure)]
            assert same(row["value"], value) and row["matrix"] == probe.matrix
            assert (row["n_inputs"], row["n_outputs"]) == (probe.n_inputs, probe.n_outputs)
        assert probe.to_dataframe().equals(frame[frame["probe"] == probe.name].reset_index(drop=True))
        assert_short_repr(probe, "ProbeResult")
    assert len(frame) == sum(len(p.to_dataframe()) for p in result.probes)
    assert_short_repr(result, "MemoryProbes")


@pytest.fixture(scope="module")
def circuit(planted, pair):
    return discover_circuit(planted, pair, ablation="mean", with_attribution=True)


def test_circuit_frame_holds_every_edge(circuit):
    frame = circuit.to_dataframe()
    assert list(frame.columns) == [
        "edge",
        *("name", "sender", "receiver", "port"),
        *("value", "stderr", "lower", "upper", "exact", "attribution", "kept", "joint"),
        *("decision", "share", "share_lower", "share_upper", "n_needed"),
    ]
    rows = by_key(frame, ["edge"])
    assert len(rows) == len(circuit.graph.edges)
    for i, edge in enumerate(circuit.graph.edges):
        row, score, err = rows[(i,)], circuit.scores[i], circuit.stderr[i]
        assert (row["name"], row["sender"], row["receiver"]) == (
            edge.name,
            edge.sender.name,
            edge.port.node.name,
        )
        assert same(row["value"], score) and same(row["stderr"], err)
        assert same(row["lower"], score - Z_95 * err) and same(row["upper"], score + Z_95 * err)
        assert row["exact"] == bool(circuit.exact[i]) and row["kept"] == bool(circuit.kept[i])
        assert same(row["attribution"], circuit.attribution[i])
    assert sorted(frame.loc[frame["kept"], "name"]) == sorted(circuit.edge_names())
    assert list(frame["decision"]) == ["in" if k else "out" for k in circuit.kept.tolist()]
    assert not frame["joint"].any()  # a circuit pruned on one draw keeps no edge jointly
    assert_short_repr(circuit, "Circuit")


def test_decided_circuit_frame_holds_each_edge_test():
    from mechmem import planted_induction_model
    from mechmem.analysis.circuits import decided_circuit

    circuit, _ = decided_circuit(planted_induction_model(), None)
    frame, family = circuit.to_dataframe(), circuit.edge_decision["edge"]
    assert list(frame["decision"]) == [{"yes": "in", "no": "out"}.get(v, v) for v in family.verdicts()]
    assert frame["share"].to_numpy() == pytest.approx(family.mean.numpy())
    assert frame["share_lower"].to_numpy() == pytest.approx(family.lower.numpy())
    assert sorted(frame.loc[frame["decision"] == "in", "name"]) == sorted(
        circuit.edge_names(circuit.kept & ~circuit.joint)
    )
    assert list(frame["joint"]) == circuit.joint.tolist()
    rows = {r["name"]: r for r in circuit.to_dict()["edges"]}
    for name in circuit.edge_names(circuit.kept & ~circuit.joint):
        row = rows[name]
        assert row["decision"] == "in"
        assert row["share_corrected_lower"] >= 0.05 or row["share_corrected_upper"] <= -0.05


def test_scored_edges_frame(circuit):
    edges = ScoredEdges(circuit.scores, circuit.stderr, circuit.exact, None, {}, None, "by hand")
    frame = edges.to_dataframe()
    assert list(frame.columns) == ["edge", "value", "stderr", "lower", "upper", "exact", "attribution"]
    assert frame["attribution"].isna().all()
    rows = by_key(frame, ["edge"])
    for i in range(len(circuit.scores)):
        assert same(rows[(i,)]["value"], circuit.scores[i]) and rows[(i,)]["exact"] == bool(circuit.exact[i])
    named = edges.to_dataframe(circuit.graph)
    assert list(named["name"]) == [e.name for e in circuit.graph.edges]
    assert_short_repr(edges, "ScoredEdges")


def test_role_frames(planted):
    result = roles.head_roles(planted, None, n=16)
    frame = result.to_dataframe()
    assert list(frame.columns) == roles.ROLE_COLUMNS
    rows = by_key(frame, ["layer", "head", "evidence"])
    assert len(rows) == sum(len(h.evidence) for h in result.heads)
    for head in result.heads:
        for key, value in head.evidence.items():
            row = rows[(head.layer, head.head, key)]
            assert same(row["value"], value) and row["role"] == head.role
        assert len(head.to_dataframe()) == len(head.evidence)
        assert_short_repr(head, "HeadRole")
    assert_short_repr(result, "RoleResult")


def test_dynamics_frame():
    curves = {"loss": [2.0, 1.0, 0.5], "acc": [0.1, None, 0.9], "L1H1.induction": [0.0, 0.6, 0.9]}
    groups = {"loss": ["loss", "acc"], "heads": ["L1H1.induction"]}
    lower, upper = {"loss": [1.8, None, 0.4]}, {"loss": [2.2, None, 0.6]}
    rules = {"acc": level(0.5), "L1H1.induction": level(0.5)}
    result = Dynamics([10, 20, 30], curves, groups, rules, lower=lower, upper=upper, exact=["L1H1.induction"])
    frame = result.to_dataframe()
    assert list(frame.columns) == ["quantity", "curve", "step", "value", "lower", "upper", "exact"]
    rows = by_key(frame, ["curve", "step"])
    assert len(rows) == 9
    for quantity, names in groups.items():
        for curve in names:
            for i, (step, value) in enumerate(zip(result.steps, curves[curve])):
                row = rows[(curve, step)]
                assert row["quantity"] == quantity
                assert same(row["value"], math.nan if value is None else value)
                for side, bounds in (("lower", lower), ("upper", upper)):
                    bound = bounds.get(curve, [None] * 3)[i]
                    assert same(row[side], math.nan if bound is None else bound)
                assert row["exact"] == (curve == "L1H1.induction")
    with pytest.raises(ValueError):
        Dynamics([10, 20, 30], curves, groups, rules, lower=lower, upper={})
    assert_short_repr(result, "Dynamics")


def test_train_result_frame():
    result = train_preset(
        "permutation", "task1-quick", steps=4, batch_size=8, eval_every=2, eval_samples=16, progress=False
    )
    frame = result.to_dataframe()
    assert list(frame.columns) == ["step", "metric", "value"]
    rows = by_key(frame, ["step", "metric"])
    expected = [
        (r["step"], k, v)
        for r in result.history
        for k, v in r.items()
        if k != "step" and isinstance(v, float)
    ]
    assert len(rows) == len(expected) > 0
    for step, key, value in expected:
        assert same(rows[(step, key)]["value"], value)
    assert_short_repr(result, "TrainResult")


def test_frame_helpers_refuse_mismatches():
    with pytest.raises(ValueError, match="axis names"):
        grid_frame(torch.zeros(2, 3), ("layer",))
    with pytest.raises(ValueError, match="token names"):
        token_labels([0, 3], ["a", "b"])
    assert token_labels([0, 3], None) == ["0", "3"]


# -- token names ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["permutation", "birth"])
def test_tasks_name_every_token(name, birth):
    task = birth if name == "birth" else build_task("permutation", None)
    names = task.token_names()
    assert len(names) == task.d_vocab and len(set(names)) == len(names)
    assert all(isinstance(n, str) and n and n.isprintable() and not n.isspace() for n in names)


def test_birth_names_are_its_characters(birth):
    names, chars = birth.token_names(), birth.stats.chars
    assert [n for n, c in zip(names, chars) if c.isprintable() and c != " "] == [
        c for c in chars if c.isprintable() and c != " "
    ]
    assert names[chars.index(" ")] == "␣" and names[chars.index("\n")] == "\\n"


def test_tasks_without_names_give_none():
    assert build_task("facts", None).token_names() is None
    assert RepeatsTask(RepeatsConfig(d_vocab=6, half=3)).token_names() is None


def test_attention_figure_labels_tokens_by_name(birth):
    tokens = birth.eval_batch(1, generator=torch.Generator().manual_seed(0)).tokens[0, :16]
    patterns = torch.rand(1, 2, 16, 16).softmax(-1)
    names = birth.token_names()
    fig = heads.plot_attention(patterns, tokens, token_names=names)
    ax = fig.axes[0]
    ticks = [int(t) for t in ax.get_xticks()]
    expected = [f"{i}:{names[int(tokens[i])]}" for i in ticks]
    assert [t.get_text() for t in ax.get_xticklabels()] == expected
    assert [t.get_text() for t in ax.get_yticklabels()] == expected
    plain = heads.plot_attention(patterns, tokens).axes[0]
    assert [t.get_text() for t in plain.get_xticklabels()] == [f"{i}:{int(tokens[i])}" for i in ticks]


def test_report_labels_the_attention_figure_with_the_tasks_names(monkeypatch):
    from mechmem.report import sections

    task, model = build_task("permutation", None), build_model()
    seen, draw = {}, heads.plot_attention

    def spy(patterns, tokens=None, *, token_names=None):
        seen["names"] = token_names
        return draw(patterns, tokens, token_names=token_names)

    monkeypatch.setattr(sections.heads, "plot_attention", spy)
    ctx = sections.ReportContext(model, task, 16, 0, roles.head_roles(model, task, n=16))
    section = sections.heads_section(ctx)
    assert "attention" in section.figures and seen["names"] == task.token_names()
