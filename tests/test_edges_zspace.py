"""Edges with heads' changes kept in z space equal the same edges computed in d_model space.

`EdgePatcher` stores a head's output change per head in z space and projects it through W_O where a port uses
it. The references here work in d_model throughout, from TransformerLens's own per-head outputs
(`attn.hook_result`, every head's z @ W_O): path patching one `run_with_hooks` per edge, the attribution
contraction as a loop over edges, and a circuit evaluated by hand (`naive_circuit_metric`). Models: several
heads, grouped-query attention, attention only and rotary, built by `build_transformer`, and Hugging Face
GPT-2 and Llama (grouped-query) models loaded with `load_pretrained` (TransformerLens 4 bridges them another
way).
"""

import pytest
import torch
from engine_cases import naive_circuit_metric, random_pair
from helpers import assert_no_hooks, build_model

from mechmem.analysis.circuits import EdgePatcher
from mechmem.analysis.interventions import Intervention, apply
from mechmem.analysis.interventions.reference import naive_intervene

BASE = {"n_layers": 3, "d_model": 16, "n_heads": 4, "d_vocab": 11, "n_ctx": 8, "d_mlp": 24}
BUILT = {
    "heads": {"normalization_type": "LN"},
    "grouped_query": {"n_key_value_heads": 2, "normalization_type": "RMS"},
    "attn_only": {"d_mlp": None, "normalization_type": "LN"},
    "rotary": {"positional_embedding_type": "rotary", "normalization_type": "LN"},
}


def loaded(kind: str, folder):
    """A tiny random Hugging Face model (test_hf) saved to `folder` and loaded with `load_pretrained`."""
    from hf_models import tiny_hf_model, tiny_tokenizer

    from mechmem.models.huggingface import load_pretrained

    tiny_hf_model(kind).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return load_pretrained(str(folder)).eval()


@pytest.fixture(scope="module", params=[*BUILT, "hf_gpt2", "hf_llama"])
def case(request, tmp_path_factory):
    torch.set_num_threads(1)
    if request.param.startswith("hf_"):
        model = loaded(request.param[3:], tmp_path_factory.mktemp(request.param))
    else:
        model = build_model(seed=2, **(BASE | BUILT[request.param]))
    pair = random_pair(4, 7, model.cfg.d_vocab_out, torch.Generator().manual_seed(5), first_diff=2)
    return model, EdgePatcher(model, pair, "corrupted")


def d_model_deltas(model, patcher) -> dict[str, torch.Tensor]:
    """Every sender's ablated - clean output in d_model, from TransformerLens's caches of the clean and
    corrupted runs (a head's from attn.hook_result)."""
    names = {u.hook.replace("hook_z", "hook_result") for u in patcher.senders}
    model.set_use_attn_result(True)
    try:
        with torch.no_grad():
            caches = [
                model.run_with_cache(t, names_filter=lambda n: n in names)[1]
                for t in (
                    patcher.pair.clean,
                    patcher.pair.corrupted,
                )
            ]
    finally:
        model.set_use_attn_result(False)
    out = {}
    for u in patcher.senders:
        hook = u.hook.replace("hook_z", "hook_result")
        clean, corrupted = (c[hook][(slice(None), *u.index)] for c in caches)
        out[u.name] = corrupted - clean
    return out


def test_deltas_and_path_patching_equal_the_d_model_path(case):
    model, patcher = case
    deltas = d_model_deltas(model, patcher)
    for u in patcher.senders:
        torch.testing.assert_close(patcher.delta(u), deltas[u.name], atol=1e-5, rtol=1e-5, msg=u.name)
    edges = patcher.graph.edges
    variants = [[]] + [
        [Intervention(e.port.hook, e.port.index, apply(lambda a, h, d=deltas[e.sender.name]: a + d))]
        for e in edges
    ]
    values = naive_intervene(model, patcher.tokens, variants, patcher.metric)
    naive = values[0] - values[1:]
    exact = patcher.exact(edges)
    torch.testing.assert_close(exact, naive, atol=1e-5, rtol=0)
    assert exact.abs().max() > 1e-3
    assert_no_hooks(model)


def test_attribution_contraction_equals_a_loop_over_edges(case):
    """`edge_products` (each sender hook projected through W_O once, contracted per port hook) equals
    -delta_u . g[port] summed edge by edge, for arbitrary port tensors g, on all prompts and on a chunk."""
    model, patcher = case
    deltas = d_model_deltas(model, patcher)
    gen = torch.Generator().manual_seed(3)
    heads: dict[str, int] = {}  # port hook -> its head axis, 0 for none
    for p in patcher.graph.ports:
        heads[p.hook] = max(heads.get(p.hook, 0), p.index[-1] + 1 if p.index else 0)
    n, pos, d = *patcher.tokens.shape, model.cfg.d_model
    grads = {h: torch.randn((n, pos, r, d) if r else (n, pos, d), generator=gen) for h, r in heads.items()}
    for rows in (slice(None), slice(1, 3)):
        expected = torch.stack(
            [
                -(deltas[e.sender.name][rows] * grads[e.port.hook][rows][(slice(None), *e.port.index)]).sum()
                for e in patcher.graph.edges
            ]
        )
        chunk = {h: g[rows] for h, g in grads.items()}
        torch.testing.assert_close(patcher.edge_products(chunk, rows), expected, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("density", [0.0, 0.1, 0.5, 0.9])
def test_circuits_equal_the_d_model_path(case, density):
    """Circuits keeping a random share of the edges (0: every edge ablated; mostly kept and mostly dropped
    rows take the two ways of writing a port's change) equal the hand-written d_model evaluation; a circuit
    that drops only edges of the last layer reuses the stored changes of every earlier sender."""
    model, patcher = case
    n = len(patcher.graph.edges)
    keep = torch.rand(n, generator=torch.Generator().manual_seed(int(10 * density))) < density
    late = torch.tensor(
        [e.port.node.kind == "logits" and e.sender.kind == "embed" for e in patcher.graph.edges]
    )
    rows = torch.stack([keep, ~late])
    got = patcher.evaluate(rows)
    for row, value in zip(rows, got):
        torch.testing.assert_close(value, naive_circuit_metric(model, patcher, row), atol=1e-5, rtol=1e-5)
    assert not any(patcher.changed(patcher.dropped(~late)))
    assert_no_hooks(model)


def test_per_prompt_attribution_averages_to_the_estimate_and_equals_one_prompt_runs(case):
    """Per-prompt EAP values: their mean is the batch estimate, and each equals the estimate of a patcher
    built on that prompt alone (same clean and ablated outputs: the "corrupted" ablation of a prompt does not
    depend on the other prompts)."""
    from mechmem.analysis.circuits.edges import EdgePatcher

    model, patcher = case
    alphas = (None, 0.5)
    whole = patcher.attribution(alphas)
    each = patcher.attribution(alphas, per_prompt=True)
    assert each.shape == (len(patcher.graph.edges), len(patcher.tokens))
    torch.testing.assert_close(each.mean(1), whole, atol=1e-5, rtol=1e-4)
    for i in (0, len(patcher.tokens) - 1):
        single = EdgePatcher(model, patcher.pair.rows(slice(i, i + 1)), "corrupted")
        torch.testing.assert_close(each[:, i], single.attribution(alphas), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("ablation", ["corrupted", "mean", "zero"])
def test_every_edge_ablated_in_one_edit_equals_the_forked_pass(case, ablation):
    """The empty circuit, computed as one edit of the logits' input, equals the circuit pass that drops every
    edge at every port (biases stay, every sender's output is its ablated one)."""
    model, patcher = case
    patcher = EdgePatcher(model, patcher.pair, ablation)
    none = torch.zeros(len(patcher.graph.edges), dtype=torch.bool)
    forked = patcher.run([patcher.circuit_variant(none)])[0]
    assert not torch.allclose(forked, patcher.run([[]])[0], atol=1e-3)  # the edit changes the metric
    torch.testing.assert_close(patcher.evaluate(none[None])[0], forked, atol=1e-5, rtol=1e-5)
    assert_no_hooks(model)
