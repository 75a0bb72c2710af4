"""Exact patching, attribution patching and circuits on every architecture TransformerLens can express.

Each architecture is a tiny random model with non-zero biases. Exact patching must equal TransformerLens's own
`transformer_lens.patching.get_act_patch_*` on every sweep the model has, and the engine must take its replay
strategy on every architecture the backend builds but shortformer (hooks), on HookedTransformer and
TransformerLens 4's native bridge alike; the replay's gradients must equal those of a hooked backward pass;
and circuit discovery's path patching must equal a naive hooked run per edge.
"""

import pytest
import torch
from engine_cases import ARCHITECTURES, BASE, arch_model, random_pair, tl_sweep
from helpers import assert_no_hooks, build_transformer_cfg

from mechmem.analysis.circuits import EdgePatcher, build_graph
from mechmem.analysis.interventions import Engine, Intervention, apply
from mechmem.analysis.interventions.reference import naive_intervene
from mechmem.analysis.interventions.replay import replay_unsupported
from mechmem.analysis.patching import SWEEPS, Patcher, model_sweeps
from mechmem.analysis.patching.attribution import Attributor
from mechmem.errors import MechmemError
from mechmem.models.backend import BACKEND
from mechmem.models.transformer_config import bridge_unsupported

ATOL = 1e-5
"""Float tolerance against TransformerLens (float32, the same arithmetic in another order)."""

HOOKS_ONLY = {"shortformer"}
"""Architectures the replay does not reimplement: the engine runs them on hooks."""


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def case(request):
    torch.set_num_threads(1)  # tiny models: one intra-op thread is fastest on shared cores
    reason = bridge_unsupported(build_transformer_cfg(**(BASE | ARCHITECTURES[request.param])))
    if BACKEND == "bridge" and reason:
        pytest.skip(f"TransformerLens 4 does not build it: {reason}")
    model = arch_model(request.param)
    vocab = model.cfg.d_vocab_out  # answers must be output tokens
    pair = random_pair(4, 7, vocab, torch.Generator().manual_seed(5), first_diff=2)
    return request.param, model, pair


def test_exact_patching_equals_transformer_lens(case):
    """Every sweep the model has, denoising; two sweeps noising."""
    name, model, pair = case
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    replayed = replay_unsupported(model) is None
    assert patcher.engine.strategy == ("replay" if replayed else "hooks")
    assert replayed == (name not in HOOKS_ONLY)  # under either backend, every architecture it builds
    runs = [(s, "denoising") for s in model_sweeps(model)]
    runs += [("resid_pre", "noising"), ("attn_head_out_by_pos", "noising")]
    for sweep, direction in runs:
        ours = patcher.sweep(sweep, direction).values
        ref = tl_sweep(model, sweep, pair, direction, pair.logit_diff).cpu()
        assert ours.shape == ref.shape, sweep
        torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0, msg=f"{name} {sweep} {direction}")
    # the patches do act: some cell of every sweep moves the metric
    assert (ours - patcher.values["clean"]).abs().max() > 1e-3
    assert_no_hooks(model)


def test_missing_activations_are_refused_in_one_line(case):
    """A sweep of an activation the model does not compute: one line naming why (TL raises on it too)."""
    _, model, pair = case
    missing = [s for s in SWEEPS if s not in model_sweeps(model)]
    assert ("resid_mid" in missing) == (model.cfg.parallel_attn_mlp or model.cfg.attn_only)
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    for sweep in missing:
        with pytest.raises(MechmemError, match=f"sweep '{sweep}' patches .*: ") as err:
            patcher.sweep(sweep)
        assert "\n" not in str(err.value)


def test_replay_gradients_equal_hooked_gradients(case):
    """Attribution patching's gradients (every stage, every layer) are the same on the replay and on hooks,
    and the attribution estimate runs, checked against exact patching on sampled cells."""
    name, model, pair = case
    att = Attributor(model, pair.clean, pair.corrupted, pair=pair)
    assert att.engine.strategy == ("hooks" if name in HOOKS_ONLY else "replay")
    hooks = Engine(model, att.metric)
    hooks.replay = None  # as on a model the replay cannot run
    value, acts, grads = att.engine.gradients(pair.corrupted)
    value_h, acts_h, grads_h = hooks.gradients(pair.corrupted)
    assert value == pytest.approx(value_h, abs=ATOL)
    for stage in grads:
        assert len(grads[stage]) == len(grads_h[stage]), stage
        for g, g_h, a, a_h in zip(grads[stage], grads_h[stage], acts[stage], acts_h[stage]):
            torch.testing.assert_close(a, a_h, atol=ATOL, rtol=0, msg=stage)
            torch.testing.assert_close(g, g_h, atol=ATOL, rtol=0, msg=stage)
    result = att.sweep("attn_head_out_all_pos")
    assert result.check["cells"] > 0 and result.values.shape == (model.cfg.n_layers, model.cfg.n_heads)
    assert_no_hooks(model)


def naive_path_patch(model, patcher, edges):
    """metric(full) - metric(edge ablated) per prompt and edge, one `run_with_hooks` per edge (the engine's
    plain reference loop): the port gets its clean value plus the sender's (ablated - clean) output."""
    deltas = {u.name: patcher.delta(u) for u in patcher.senders}
    variants = [[]] + [
        [Intervention(e.port.hook, e.port.index, apply(lambda a, h, d=deltas[e.sender.name]: a + d))]
        for e in edges
    ]
    values = naive_intervene(model, patcher.tokens, variants, patcher.metric)
    return values[0] - values[1:]


def test_circuit_edges_equal_naive_path_patching(case):
    """Every edge's path-patching score equals one hooked run per edge; GQA ports are per key/value head,
    parallel heads do not feed their own layer's MLP, models without a learned position embedding have no
    position node."""
    _, model, pair = case
    graph = build_graph(model)
    senders = {e.sender.name for e in graph.edges}
    assert ("pos" in senders) == (model.cfg.positional_embedding_type == "standard")
    if model.cfg.parallel_attn_mlp:
        assert not [
            e for e in graph.edges if e.port.node.kind == "mlp" and e.sender.depth == e.port.node.layer
        ]
    kv = model.cfg.n_key_value_heads or model.cfg.n_heads
    assert len([p for p in graph.ports if p.port == "k"]) == kv * model.cfg.n_layers
    patcher = EdgePatcher(model, pair, "corrupted")
    exact = patcher.exact(graph.edges)
    naive = naive_path_patch(model, patcher, graph.edges)
    torch.testing.assert_close(exact, naive, atol=ATOL, rtol=0)
    assert exact.abs().max() > 1e-3
    # a circuit of every edge but one (the ACDC evaluation) loses exactly that edge's path-patching score
    every = torch.ones(1, len(graph.edges), dtype=torch.bool)
    all_but_one = ~torch.eye(len(graph.edges), dtype=torch.bool)
    full = patcher.evaluate(every)[0]
    torch.testing.assert_close(full - patcher.evaluate(all_but_one), exact, atol=ATOL, rtol=0)
    assert_no_hooks(model)


@pytest.mark.parametrize("kind", ["neox", "llama"])
def test_models_from_hugging_face_patch_exactly(tmp_path, kind):
    """Held-out: tiny random GPT-NeoX (partial rotary, parallel blocks) and Llama (grouped-query attention,
    gated MLP, RMSNorm) models from `transformers` configs, loaded by path, patch as TransformerLens does."""
    from hf_models import tiny_hf_model, tiny_tokenizer

    from mechmem.models.huggingface import load_pretrained

    torch.set_num_threads(1)
    tiny_hf_model(kind).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    model = load_pretrained(str(tmp_path)).eval()
    pair = random_pair(4, 10, model.cfg.d_vocab_out, torch.Generator().manual_seed(5), first_diff=2)
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    if BACKEND == "hooked":  # a TransformerLens 4 bridge from Hugging Face runs on hooks
        assert patcher.engine.strategy == "replay"
    moved = 0.0
    for sweep in model_sweeps(model):
        ours = patcher.sweep(sweep).values
        ref = tl_sweep(model, sweep, pair, "denoising", pair.logit_diff).cpu()
        torch.testing.assert_close(ours, ref, atol=ATOL, rtol=0, msg=f"{kind} {sweep}")
        moved = max(moved, float((ours - patcher.values["corrupted"]).abs().max()))
    assert moved > 1e-3
    assert_no_hooks(model)
