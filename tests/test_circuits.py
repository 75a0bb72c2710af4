"""Edge-level circuits: engine results equal a naive hooked reference; the planted induction circuit is found
exactly; random models give no confident circuit; EAP is exact where the metric is linear."""

import pytest
import torch
from engine_cases import naive_circuit_metric
from helpers import assert_no_hooks, build_model, trained_induction_model

from mechmem.analysis.circuits import EdgePatcher, build_graph, circuit_intervals
from mechmem.analysis.circuits.discovery import (
    CHECK_EDGES,
    attribution_agreement,
    circuit_pair,
    circuit_prompts,
    discover_circuit,
    edge_attribution,
    score_edges,
)
from mechmem.analysis.interventions import activation_grads
from mechmem.analysis.planted import planted_induction_model
from mechmem.analysis.stats import bootstrap_ratio, combine, verdict
from mechmem.tasks.base import PatchingPair


@pytest.fixture(scope="module")
def model():
    return build_model(3, normalization_type="LN", n_ctx=8)


@pytest.fixture(scope="module")
def pair(model):
    g = torch.Generator().manual_seed(5)
    clean, corrupted = (torch.randint(6, (6, 8), generator=g) for _ in range(2))
    return PatchingPair(clean, corrupted, torch.full((6,), 7), clean[:, 3].clone(), corrupted[:, 3].clone())


def test_graph_has_k_composition_and_no_same_layer_edges(model):
    g = build_graph(model)
    names = {e.name for e in g.edges}
    assert "L0H1->L1H0.k" in names and "L0H0->MLP0" in names and "MLP0->L1H1.q" in names
    assert not any(e.sender.depth >= e.port.node.depth for e in g.edges)
    # embed, pos -> all 15 ports; L0 heads -> 6 head ports of L1, MLP0, MLP1, logits;
    # MLP0 -> 6 + MLP1 + logits; L1 heads -> MLP1, logits; MLP1 -> logits
    assert len(g.edges) == 2 * 15 + 2 * 9 + 8 + 2 * 2 + 1


@pytest.mark.parametrize("ablation", ["corrupted", "mean", "zero"])
def test_circuit_evaluation_equals_naive_reference(model, pair, ablation):
    patcher = EdgePatcher(model, pair, ablation)
    keep = torch.rand(len(patcher.graph.edges), generator=torch.Generator().manual_seed(1)) < 0.5
    got = patcher.evaluate(keep[None])[0]
    torch.testing.assert_close(got, naive_circuit_metric(model, patcher, keep), atol=1e-5, rtol=1e-5)
    assert_no_hooks(model)


def test_invariants_full_empty_and_single_edge(model, pair):
    patcher = EdgePatcher(model, pair, "corrupted")
    model.set_use_attn_result(True)
    try:
        _, cache = model.run_with_cache(pair.clean, names_filter=lambda name: name.endswith("hook_result"))
    finally:
        model.set_use_attn_result(False)
    head = next(n for n in patcher.graph.nodes if n.name == "L1H1")
    torch.testing.assert_close(
        patcher.output(head, patcher.clean[head.hook]), cache["blocks.1.attn.hook_result"][:, :, 1]
    )
    n = len(patcher.graph.edges)
    full, empty = patcher.evaluate(
        torch.stack([torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)])
    )
    with torch.no_grad():
        torch.testing.assert_close(full, patcher.metric(model(pair.clean)), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(empty, patcher.metric(model(pair.corrupted)), atol=1e-4, rtol=1e-4)
    # path patching one edge = evaluating the circuit without that edge
    edges = patcher.graph.edges[::9]
    drop = torch.ones(len(edges), n, dtype=torch.bool)
    for row, e in enumerate(edges):
        drop[row, patcher.graph.edges.index(e)] = False
    torch.testing.assert_close(patcher.exact(edges), full - patcher.evaluate(drop), atol=1e-5, rtol=1e-5)
    assert_no_hooks(model)


def test_activation_grads_match_finite_differences(model, pair):
    hook = "blocks.1.hook_k_input"
    metric = lambda x: pair.logit_diff(x)
    value, grads = activation_grads(model, pair.clean, [hook], metric)
    direction = torch.randn(grads[hook].shape, generator=torch.Generator().manual_seed(2))
    eps = 1e-2
    from mechmem.analysis.interventions import Intervention, apply, intervene

    shifted = [[Intervention(hook, (), apply(lambda a, h, s=s: a + s * eps * direction))] for s in (1, -1)]
    up, down = intervene(model, pair.clean, shifted, metric)
    assert float((up - down) / (2 * eps)) == pytest.approx(float((grads[hook] * direction).sum()), rel=2e-2)
    with torch.no_grad():
        assert float(value) == pytest.approx(float(metric(model(pair.clean))), abs=1e-5)
    assert_no_hooks(model)


def test_eap_is_exact_on_edges_into_the_logits_without_final_norm():
    model = build_model(4, n_ctx=8)  # no LayerNorm: the logits are linear in the final residual stream
    pair, _ = circuit_pair(model, None, 8, generator=torch.Generator().manual_seed(0))
    circuit = discover_circuit(model, pair, ablation="mean", with_attribution=True)
    into_logits = torch.tensor([e.port.node.kind == "logits" for e in circuit.graph.edges])
    torch.testing.assert_close(
        circuit.attribution[into_logits], circuit.scores[into_logits], atol=1e-4, rtol=1e-4
    )
    assert attribution_agreement(circuit)["k"] == 10
    assert_no_hooks(model)


PLANTED = {"embed->L0H2.v", "L0H2->L1H1.k", "embed->L1H1.q", "embed->L1H1.v", "L1H1->logits"}


@pytest.mark.parametrize(
    ("ablation", "expected"),
    [
        ("mean", PLANTED),
        # the repeats pair changes only the answer's first copy: only the value path that carries it moves
        ("corrupted", {"embed->L1H1.v", "L1H1->logits"}),
    ],
)
def test_planted_induction_circuit_is_found_exactly(ablation, expected):
    model = planted_induction_model()
    # 32 prompts: the verdict's intervals need at least `min_units` (20) prompts (docs/decisions.md)
    pair, _ = circuit_pair(model, None, 32, generator=torch.Generator().manual_seed(0))
    circuit = discover_circuit(model, pair, ablation=ablation)
    assert set(circuit.edge_names()) == expected
    distractors = {"L0H0", "L0H1", "L1H0", "L1H2"}
    assert not any(name.split("->")[0] in distractors for name in circuit.edge_names())
    assert circuit.faithfulness == pytest.approx(1.0, abs=1e-3)
    assert circuit.completeness == pytest.approx(1.0, abs=1e-3)
    assert circuit.confident
    assert_no_hooks(model)


# Seed 0 runs by default; seeds 1 and 2 (the same property on other random models, ~20-45 s each) are slow.
@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_random_models_give_no_confident_circuit(seed):
    model = build_model(seed, n_ctx=24, d_vocab=12)
    pair, _ = circuit_pair(model, None, 32, generator=torch.Generator().manual_seed(seed))
    circuit = discover_circuit(model, pair, ablation="mean")
    assert not circuit.confident
    record = circuit.to_dict()
    assert record["confident"] is False and len(record["edges"]) == len(circuit.graph.edges)
    assert_no_hooks(model)


def test_large_graph_path_and_threshold_pruning(model, pair):
    full = discover_circuit(model, pair, ablation="corrupted")
    part = discover_circuit(model, pair, ablation="corrupted", max_exact=10, threshold=0.05)
    # the top 10 by EAP and CHECK_EDGES others are exact (61 edges > 4 x 10: no exact fallback)
    assert int(part.exact.sum()) == min(10 + CHECK_EDGES, len(part.exact)) and "EAP" in part.method
    top = part.attribution.abs().argsort(descending=True)[:10]
    assert bool(part.exact[top].all())
    torch.testing.assert_close(part.scores[part.exact], full.scores[part.exact], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(part.scores[~part.exact], part.attribution[~part.exact])
    assert torch.equal(part.kept, part.scores.abs() >= 0.05 * abs(part.gap)) and part.target is None
    assert_no_hooks(model)


def test_screened_edges_carry_the_estimates_standard_error(model, pair):
    patcher = EdgePatcher(model, pair, "corrupted")
    scored = score_edges(patcher, 10, False, steps=2)
    estimated = ~scored.exact
    each = edge_attribution(patcher, 2, per_prompt=True)
    torch.testing.assert_close(scored.scores[estimated], each.mean(1)[estimated])
    torch.testing.assert_close(scored.stderr[estimated], each.std(1)[estimated] / len(pair.clean) ** 0.5)
    assert bool(scored.stderr.isfinite().all())
    frame = scored.to_dataframe(patcher.graph)
    assert frame.loc[estimated.numpy(), ["lower", "upper"]].notna().all().all()
    assert_no_hooks(model)


# -- intervals and the verdict -------------------------------------------------------------------------------
def test_bootstrap_ratio_equals_a_naive_loop():
    g = torch.Generator().manual_seed(0)
    num, den = torch.randn(30, 2, 3, generator=g), torch.rand(30, generator=g) + 0.5
    low, high = bootstrap_ratio(num, den, generator=torch.Generator().manual_seed(1), resamples=50)
    idx = torch.randint(30, (50, 30), generator=torch.Generator().manual_seed(1))
    stats = torch.stack([num[i].sum(0) / den[i].sum() for i in idx]).double()
    q = torch.quantile(stats, torch.tensor([0.025, 0.975], dtype=torch.float64), dim=0)
    torch.testing.assert_close(low, q[0].float(), atol=1e-5, rtol=0)
    torch.testing.assert_close(high, q[1].float(), atol=1e-5, rtol=0)
    same = torch.ones(10)  # every unit equal: the interval collapses onto the value
    assert bootstrap_ratio(same * 3, same, generator=g) == (torch.tensor(3.0), torch.tensor(3.0))
    assert [verdict(0.9, 1.1, 0.8), verdict(0.5, 0.7, 0.8), verdict(0.7, 0.9, 0.8)] == [
        "yes",
        "no",
        "undecided",
    ]
    assert [combine(["yes", "yes"]), combine(["yes", "undecided"]), combine(["undecided", "no"])] == [
        "yes",
        "undecided",
        "no",
    ]


def test_circuit_intervals_hold_the_point_estimates(model, pair):
    circuit = discover_circuit(model, pair, ablation="mean")
    points = {"gap": circuit.gap, "faithfulness": circuit.faithfulness, "completeness": circuit.completeness}
    for name, value in points.items():
        low, high = circuit.intervals[name]
        assert low - 1e-5 <= value <= high + 1e-5, (name, low, value, high)
    # computed from per-prompt values: equal prompts give a zero-width interval at the point estimate
    ones = torch.ones(8)
    assert circuit_intervals(3 * ones, ones, 2 * ones, ones)["faithfulness"] == pytest.approx((0.5, 0.5))


@pytest.fixture(scope="module")
def trained_induction():
    return trained_induction_model()


@pytest.mark.parametrize("kind", [pytest.param("planted", marks=pytest.mark.slow), "trained"])
def test_verdict_is_stable_over_prompt_seeds(kind, trained_induction):
    model = planted_induction_model() if kind == "planted" else trained_induction
    circuits = [discover_circuit(model, circuit_prompts(model, None, 64, seed)[0]) for seed in range(5)]
    assert [c.verdict for c in circuits] == ["yes"] * 5, [(c.criteria(), c.intervals) for c in circuits]
    assert_no_hooks(model)


def test_binary_search_pruning_reaches_the_target_like_a_naive_scan(model, pair):
    """Above max_exact edges the prefix is found by binary search (at most ceil(log2 edges) circuit
    evaluations); a naive scan over every prefix of the same ranking says the kept prefix reaches the target
    and the one before it does not, and when the scan crosses the target once the two prefixes are equal."""
    import math

    circuit = discover_circuit(model, pair, ablation="mean", max_exact=10, target=0.9)
    n_edges = len(circuit.graph.edges)
    assert circuit.pruning["search"] == "binary search"
    assert 0 < circuit.pruning["evaluations"] <= math.ceil(math.log2(n_edges))
    patcher = EdgePatcher(model, pair, "mean")
    order = circuit.scores.abs().argsort(descending=True, stable=True)
    masks = torch.zeros(n_edges + 1, n_edges, dtype=torch.bool)
    for k in range(n_edges + 1):
        masks[k, order[:k]] = True
    values = patcher.evaluate(masks).mean(1)
    faith = (values - values[0]) / (values[-1] - values[0])
    k = int(circuit.kept.sum())
    assert bool(faith[k] >= 0.9) and bool(faith[k - 1] < 0.9)
    assert circuit.faithfulness == pytest.approx(float(faith[k]), abs=1e-4)
    crossings = [j for j in range(1, n_edges + 1) if faith[j] >= 0.9 and faith[j - 1] < 0.9]
    if len(crossings) == 1:
        assert k == crossings[0]
    small = discover_circuit(model, pair, ablation="mean")  # 61 edges <= 256: every edge exact, bisection
    assert small.pruning["search"].startswith("bisection") and bool(small.exact.all())
    assert_no_hooks(model)


@pytest.mark.parametrize("steps", [0, 4])
def test_edge_attribution_in_chunks_of_prompts_equals_the_whole_batch(steps):
    """EAP and EAP-IG contract each chunk's port gradients before the next (memory bound by memory_mb): one
    prompt per chunk gives the whole batch's scores."""
    from mechmem.analysis.circuits import EdgePatcher
    from mechmem.analysis.circuits.discovery import edge_attribution

    model = build_model(4, n_ctx=8, normalization_type="LN")
    pair, _ = circuit_pair(model, None, 6, generator=torch.Generator().manual_seed(1))
    whole = EdgePatcher(model, pair, "mean", memory_mb=1e6)
    single = EdgePatcher(model, pair, "mean", memory_mb=1e-6)
    assert len(whole.row_chunks()) == 1 and len(single.row_chunks()) == 6
    expected, got = (edge_attribution(p, steps) for p in (whole, single))
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert_no_hooks(model)
