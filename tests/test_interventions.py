"""The intervention engine equals one run_with_hooks per variant, for every setter, hook and architecture, on
both of its execution strategies (the hook-free replay and hooks)."""

import itertools

import pytest
import torch
from engine_cases import last_logprob, make_model, make_setter, unsupported_model
from helpers import assert_no_hooks, random_tokens

from mechmem.analysis.interventions import (
    Engine,
    Intervention,
    activation_grads,
    apply,
    from_run,
    intervene,
    intervened_logits,
    mean,
    resample,
    setter_values,
    zero,
)
from mechmem.analysis.interventions.metric import PatchingMetric
from mechmem.analysis.interventions.reference import naive_intervene
from mechmem.analysis.interventions.replay import STAGE_HOOKS

ARCHS = {
    "ln3": {"normalization_type": "LN", "n_layers": 3},
    "rms1": {"normalization_type": "RMS", "n_layers": 1},
    "nonorm2": {"normalization_type": None, "n_layers": 2},
    "attn_only3": {"normalization_type": "LN", "n_layers": 3, "d_mlp": None},
}
EVERY_ARCH = ARCHS | {  # every other kind TransformerConfig builds: pre-norms, GELU, scale, output vocabulary
    "lnpre_gelu2": {"normalization_type": "LNPre", "act_fn": "gelu", "n_layers": 2},
    "rmspre_noscale2": {
        "normalization_type": "RMSPre",
        "use_attn_scale": False,
        "n_layers": 2,
        "d_vocab_out": 5,
    },
    "attn_only_rms1": {"normalization_type": "RMS", "n_layers": 1, "d_mlp": None},
}
SETTERS = ("zero", "mean", "resample", "from_run", "apply")


def hooks_of(model):
    """(hook, index) pairs covering z, mlp_out, mlp.hook_post,
    resid_pre, hook_mlp_in and pattern, every layer."""
    out = []
    for layer in range(model.cfg.n_layers):
        out += [
            (f"blocks.{layer}.attn.hook_z", (slice(None), layer % 2)),
            (f"blocks.{layer}.hook_resid_pre", (3,)),
            (f"blocks.{layer}.attn.hook_pattern", (1, slice(2, None))),
        ]
        if not model.cfg.attn_only:
            out += [
                (f"blocks.{layer}.hook_mlp_out", (5,)),
                (f"blocks.{layer}.mlp.hook_post", (slice(None), [2, 7])),
                (f"blocks.{layer}.hook_mlp_in", (slice(4, None),)),
            ]
    return out


@pytest.fixture(scope="module", params=list(ARCHS))
def model(request):
    return make_model(**ARCHS[request.param])


@pytest.mark.parametrize("kind", SETTERS)
def test_engine_equals_naive_for_every_setter(model, tokens, kind):
    setter = make_setter(kind, model)
    variants = [Intervention(hook, index, setter) for hook, index in hooks_of(model)]
    last = model.cfg.n_layers - 1
    variants.append(  # several interventions across two layers, applied together
        [
            Intervention("blocks.0.attn.hook_z", (slice(None), 1), setter),
            Intervention(f"blocks.{last}.hook_resid_pre", (slice(None), slice(0, 8)), setter),
            Intervention("blocks.0.attn.hook_z", (4, 0), setter),
        ]
    )
    fast = intervene(model, tokens, variants, last_logprob)
    naive = naive_intervene(model, tokens, variants, last_logprob)
    assert fast.shape == (len(variants), tokens.shape[0])
    torch.testing.assert_close(fast, naive, atol=1e-5, rtol=0)
    clean = last_logprob(model(tokens))
    assert (fast - clean).abs().amax(1).gt(1e-4).sum() >= len(variants) // 2  # the interventions do act
    assert not model.cfg.use_hook_mlp_in
    assert_no_hooks(model)


def test_chunking_gives_identical_results(model, tokens):
    setter = make_setter("mean", model)
    variants = [Intervention(hook, index, setter) for hook, index in hooks_of(model)]
    whole = intervene(model, tokens, variants, last_logprob, memory_mb=1024)
    # one variant per pass, the sequences' cached run whole (row chunks: test_interventions_chunked.py)
    one_by_one = torch.stack(Engine(model, last_logprob, memory_mb=1e-6, cache_mb=1024).run(tokens, variants))
    torch.testing.assert_close(whole, one_by_one, atol=1e-6, rtol=0)
    assert_no_hooks(model)


def test_patching_the_same_run_changes_nothing(model, tokens):
    setter = from_run(tokens)
    variants = [Intervention(hook, (), setter) for hook, _ in hooks_of(model)]
    out = intervene(model, tokens, variants, last_logprob)
    clean = last_logprob(model(tokens))
    torch.testing.assert_close(out, clean.expand_as(out), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["from_run", "mean", "resample"])
def test_pattern_cells_equal_naive_and_an_unchanged_row_is_not_run(model, tokens, kind):
    """Pattern cells (whole rows of a head, a head at every query, single entries), patched from another run:
    the replay equals one hooked run per variant. Patched from the run itself, every variant keeps the
    unpatched metric exactly, so no pass ran."""
    n_pos = tokens.shape[1]
    rows, entries = [(1, n_pos - 1), (0, 3), (1,)], [(0, n_pos - 1, 2), (1, 4, 4)]  # run apart, and together
    for (source, exact), cells in itertools.product(
        ((make_setter(kind, model), False), (from_run(tokens), True)), (rows, entries, rows + entries)
    ):
        variants = [
            Intervention(f"blocks.{layer}.attn.hook_pattern", cell, source)
            for layer in range(model.cfg.n_layers)
            for cell in cells
        ]
        engine = Engine(model, last_logprob)
        fast = torch.stack(engine.run(tokens, variants)).cpu()
        clean = last_logprob(model(tokens)).cpu()
        if exact:
            assert torch.equal(fast, clean.expand_as(fast))
            continue
        naive = naive_intervene(model, tokens, variants, last_logprob)
        torch.testing.assert_close(fast, naive, atol=1e-5, rtol=0)
        assert (fast - clean).abs().amax(1).gt(1e-4).sum() >= len(variants) // 3  # the patches do act
    assert_no_hooks(model)


def test_an_mlp_hook_of_an_attention_only_model_is_refused_in_one_line(tokens):
    """TransformerLens 3 keeps MLP hook points on attention-only blocks (they never fire); TransformerLens 4
    has none. Either way an intervention there gets a one-line error instead of an IndexError or a silent
    no-op."""
    from helpers import build_model

    attn_only = build_model(d_mlp=None)
    for hook in ("blocks.0.hook_mlp_out", "blocks.1.mlp.hook_post"):
        with pytest.raises(ValueError, match="attention-only|unknown hook") as err:
            intervene(attn_only, tokens, [[], Intervention(hook, (), zero())], lambda x: x[:, -1, 0].mean())
        assert "\n" not in str(err.value)
    assert_no_hooks(attn_only)


def test_positions_after_the_read_out_have_no_effect(model, tokens):
    def at_4(logits):
        return logits[:, 4].log_softmax(-1)[:, 1].mean()

    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(model.cfg.n_layers)]
    names += [f"blocks.{layer}.attn.hook_z" for layer in range(model.cfg.n_layers)]
    after = [Intervention(name, (slice(5, None),), zero()) for name in names]
    at = [Intervention(name, (4,), zero()) for name in names]
    out = intervene(model, tokens, after + at, at_4)
    clean = float(at_4(model(tokens).detach()))
    torch.testing.assert_close(out[: len(after)], torch.full((len(after),), clean), atol=1e-5, rtol=0)
    assert (out[len(after) :] - clean).abs().min() > 1e-4


def test_mean_is_per_position_over_the_reference_and_resample_picks_other_rows():
    model = make_model(normalization_type="LN")
    tokens = random_tokens(model, 6)
    _, cache = model.run_with_cache(tokens)
    z = cache["blocks.1.attn.hook_z"]  # [batch pos head d_head]
    by_hand = [
        Intervention(
            "blocks.1.attn.hook_z", (slice(None), 0), apply(lambda a, h: z.mean(0)[:, 0].expand_as(a))
        ),
        Intervention("blocks.1.attn.hook_z", (slice(None), 0), apply(lambda a, h: z[:, :, 0].roll(1, 0))),
    ]
    shifted = resample(tokens)
    shifted.draw(6, 6).copy_((torch.arange(6) - 1) % 6)  # a known draw: sequence i gets sequence i - 1
    engine = [
        Intervention("blocks.1.attn.hook_z", (slice(None), 0), mean(tokens)),
        Intervention("blocks.1.attn.hook_z", (slice(None), 0), shifted),
    ]
    torch.testing.assert_close(
        intervene(model, tokens, engine, last_logprob), intervene(model, tokens, by_hand, last_logprob)
    )
    values = setter_values(model, tokens, mean(tokens), ["blocks.1.attn.hook_z"])["blocks.1.attn.hook_z"]
    torch.testing.assert_close(values, z.mean(0, keepdim=True).expand_as(z))
    draw = resample(tokens, torch.Generator().manual_seed(3)).draw(6, 6)
    assert (draw != torch.arange(6)).all() and draw.max() < 6


def test_hooks_before_the_first_block_and_on_request_hooks(tokens):
    model = make_model(normalization_type="RMS")
    ref = random_tokens(model, 9, seed=2)
    variants = [
        Intervention("hook_embed", (2,), mean(ref)),
        Intervention("hook_pos_embed", (), zero()),
        Intervention("blocks.1.hook_q_input", (slice(None), 1), from_run(ref[:6])),
        Intervention("blocks.0.attn.hook_result", (3, 0), zero()),
        Intervention("ln_final.hook_normalized", (8,), zero()),
        [],
    ]
    torch.testing.assert_close(
        intervene(model, tokens, variants, last_logprob),
        naive_intervene(model, tokens, variants, last_logprob),
        atol=1e-5,
        rtol=0,
    )
    attn_in = [Intervention("blocks.1.hook_attn_in", (slice(None), 0), mean(ref))]
    torch.testing.assert_close(
        intervene(model, tokens, attn_in, last_logprob), naive_intervene(model, tokens, attn_in, last_logprob)
    )
    assert not (model.cfg.use_split_qkv_input or model.cfg.use_attn_result or model.cfg.use_attn_in)
    assert_no_hooks(model)


@pytest.mark.parametrize("mixing", ["2emb", "attn"])
def test_hooked_root_modules_without_start_at_layer(mixing):
    from mechmem.models.facts import FactsModelConfig, build_facts_model

    cfg = FactsModelConfig(n_in=8, n_out=5, d_model=8, d_mlp=12, mixing=mixing, mlp_residual=False)
    model = build_facts_model(cfg, generator=torch.Generator().manual_seed(0))
    tokens = torch.randint(8, (7, 2), generator=torch.Generator().manual_seed(1))
    ref = torch.randint(8, (10, 2), generator=torch.Generator().manual_seed(2))
    variants = [
        Intervention("blocks.0.mlp.hook_post", (slice(None), [0, 3]), mean(ref)),
        Intervention("blocks.0.hook_resid_pre", (1,), resample(ref)),
        [
            Intervention("hook_embed", (0,), zero()),
            Intervention("blocks.0.hook_mlp_out", (1,), from_run(ref[:7])),
        ],
    ]
    fast = intervene(model, tokens, variants, last_logprob, memory_mb=1e-6)
    torch.testing.assert_close(
        fast, naive_intervene(model, tokens, variants, last_logprob), atol=1e-5, rtol=0
    )
    assert_no_hooks(model)


def test_batched_metric_and_logits(tokens):
    """The metric in batched form (`PatchingMetric`) gives the callable's numbers; logits under a variant."""
    model = make_model(normalization_type="LN")
    variants = [Intervention(f"blocks.{layer}.hook_mlp_out", (slice(None),), zero()) for layer in range(2)]
    per_variant = intervene(model, tokens, variants, lambda x: x[:, -1].mean())
    last = torch.full((len(tokens), 1), tokens.shape[1] - 1)
    batched = PatchingMetric("last", last, lambda x: x[:, :, 0].mean((1, 2)))
    torch.testing.assert_close(per_variant, intervene(model, tokens, variants, batched))

    def zero_mlp(x, hook):
        return torch.zeros_like(x)

    expected = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_mlp_out", zero_mlp)])
    torch.testing.assert_close(intervened_logits(model, tokens, variants[1]), expected, atol=1e-5, rtol=0)


def test_no_hooks_or_flags_left_after_errors(tokens):
    model = make_model(normalization_type="LN")

    def boom(act, hook):
        raise RuntimeError("hook failed")

    for run in (intervene, naive_intervene):
        with pytest.raises(RuntimeError, match="hook failed"):
            run(model, tokens, [Intervention("blocks.1.hook_mlp_in", (), apply(boom))], last_logprob)
        assert_no_hooks(model)
        assert not model.cfg.use_hook_mlp_in
        with pytest.raises(ZeroDivisionError):
            run(model, tokens, [Intervention("blocks.0.hook_q_input", (), zero())], lambda x: 1 / 0)
        assert_no_hooks(model)
        assert not model.cfg.use_split_qkv_input
    with pytest.raises(ValueError, match="unknown hook"):
        intervene(model, tokens, [Intervention("blocks.9.hook_nothing")], last_logprob)
    with pytest.raises(ValueError, match="shape"):
        intervene(
            model, tokens, [Intervention("blocks.0.hook_mlp_out", (), mean(tokens[:, :5]))], last_logprob
        )
    assert_no_hooks(model)


def stage_variants(model, setter):
    """One intervention at every hook the replay resumes from, every layer: slices, heads, pattern rows."""
    index = {"pattern": (1, slice(2, None)), "z": (slice(None), 1), "resid_pre": (slice(3, 6),)}
    out = []
    for layer in range(model.cfg.n_layers):
        for stage, template in STAGE_HOOKS.items():
            no_mlp = model.cfg.attn_only and stage in ("resid_mid", "mlp_out")
            if template.format(layer) in model.hook_dict and not no_mlp:  # parallel blocks: no resid_mid
                out.append(Intervention(template.format(layer), index.get(stage, (4,)), setter))
    return out


@pytest.mark.parametrize("arch", list(EVERY_ARCH))
def test_replay_strategy_equals_hooks_at_every_stage(tokens, arch):
    """The engine picks the replay for single-activation variants on every architecture, for every setter; it
    equals one hooked run per variant."""
    model = make_model(**EVERY_ARCH[arch])
    engine = Engine(model, last_logprob)
    assert engine.strategy == "replay"
    variants = [[]]
    for kind in SETTERS:
        variants += stage_variants(model, make_setter(kind, model))
    assert all(engine.replay_key([v] if isinstance(v, Intervention) else v) for v in variants)
    fast = torch.stack(engine.run(tokens, variants)).cpu()
    torch.testing.assert_close(
        fast, naive_intervene(model, tokens, variants, last_logprob), atol=1e-5, rtol=0
    )
    # the interventions do act (in a 1-layer model, a last-layer patch after attention at position 4 cannot)
    assert (fast - fast[0]).abs().amax(1).gt(1e-4).sum() >= len(variants) // 3
    assert_no_hooks(model)


def test_replay_reads_only_up_to_the_metric_and_leaking_patterns_go_to_hooks(tokens):
    """A metric reading position 4: later positions are cut, except where a pattern row attends past them."""
    model = make_model(normalization_type="LN")

    def at_4(logits):
        return logits[:, 4].log_softmax(-1)[:, 1]

    leak = apply(lambda a, h: torch.full_like(a, 1.0 / a.shape[-1]))  # uniform, future keys included
    variants = stage_variants(model, zero()) + [Intervention("blocks.1.attn.hook_pattern", (0,), leak)]
    engine = Engine(model, at_4)
    torch.testing.assert_close(
        torch.stack(engine.run(tokens, variants)).cpu(),
        naive_intervene(model, tokens, variants, at_4),
        atol=1e-5,
        rtol=0,
    )
    assert engine.compiled(tokens).readout.unique().tolist() == [4]


def test_unsupported_models_fall_back_to_hooks(tokens):
    model = unsupported_model()
    engine = Engine(model, last_logprob)
    assert engine.strategy == "hooks" and engine.replay is None
    variants = stage_variants(model, from_run(random_tokens(model, 6, seed=3))) + [[]]
    torch.testing.assert_close(
        torch.stack(engine.run(tokens, variants)).cpu(),
        naive_intervene(model, tokens, variants, last_logprob),
        atol=1e-5,
        rtol=0,
    )
    assert_no_hooks(model)


def test_gradients_on_both_strategies_equal_autograd_through_hooks(tokens):
    """`Engine.gradients` (replay) and the hook path give the same activations and gradients."""
    model = make_model(normalization_type="LN", n_layers=2)

    def metric(logits):
        return logits[:, -1].log_softmax(-1)[:, 2].mean()

    value, acts, grads = Engine(model, metric).gradients(tokens)
    names = [STAGE_HOOKS[s].format(l) for s in ("z", "resid_mid", "pattern") for l in range(2)]
    hook_value, by_hook = activation_grads(model, tokens, names, metric)
    _, cache = model.run_with_cache(tokens)
    assert value == pytest.approx(float(hook_value), abs=1e-5)
    for name in names:
        layer, stage = int(name.split(".")[1]), name.split(".")[-1].removeprefix("hook_")
        torch.testing.assert_close(acts[stage][layer], cache[name], atol=1e-5, rtol=0)
        torch.testing.assert_close(grads[stage][layer], by_hook[name], atol=1e-5, rtol=1e-4)
    assert_no_hooks(model)


@pytest.mark.parametrize("strategy", ["replay", "replay in chunks of rows", "hooks"])
def test_activations_are_those_of_gradients_and_of_the_cache(tokens, strategy):
    """`Engine.activations` (no gradients) gives `gradients`'s metric and activations, which are the cached
    run's, on both strategies, whole or chunked by rows."""
    model = unsupported_model() if strategy == "hooks" else make_model(normalization_type="LN", n_layers=2)
    cache_mb = 1e-9 if "chunks" in strategy else 256.0

    def metric(logits):
        return logits[:, -1].log_softmax(-1)[:, 2].mean()

    engine = Engine(model, metric, cache_mb=cache_mb)
    assert engine.strategy == strategy.split()[0]
    assert len(engine.row_chunks(tokens)) == (len(tokens) if "chunks" in strategy else 1)
    stages = ("resid_pre", "pattern", "z", "mlp_out")
    value, acts = engine.activations(tokens, stages=stages)
    grad_value, grad_acts, _ = engine.gradients(tokens, stages=stages)
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        assert value == pytest.approx(grad_value, abs=1e-6)
        assert value == pytest.approx(float(metric(model(tokens))), abs=1e-5)
    assert [s for s in acts if acts[s]] == list(stages)
    for stage in stages:
        assert len(acts[stage]) == model.cfg.n_layers
        for layer, act in enumerate(acts[stage]):
            assert not act.requires_grad
            torch.testing.assert_close(act, grad_acts[stage][layer], atol=1e-6, rtol=0)
            torch.testing.assert_close(act, cache[STAGE_HOOKS[stage].format(layer)], atol=1e-5, rtol=0)
    assert_no_hooks(model)
