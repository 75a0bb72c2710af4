"""Activation patching equals TransformerLens's own `get_act_patch_*`, on random and trained models."""

import dataclasses
import json

import pytest
import torch
from engine_cases import MODELS, random_pair, tl_sweep
from helpers import assert_no_hooks, build_transformer_cfg, load_script

from mechmem.analysis.patching import (
    SWEEPS,
    Patcher,
    PatchingMetric,
    PatchingResult,
    plot_patching,
    run_sweeps,
)
from mechmem.analysis.patching.reference import TL_SWEEPS
from mechmem.models.transformer import build_transformer
from mechmem.tasks.base import PatchingPair

TL = TL_SWEEPS
assert set(TL) == set(SWEEPS)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=list(MODELS))
def random_case(request):
    g = torch.Generator().manual_seed(1)
    model = build_transformer(
        build_transformer_cfg(d_vocab=11, n_ctx=8, **MODELS[request.param]), generator=g
    )
    return model.eval(), random_pair(5, 6, 11, g)  # TransformerLens 4's patching needs evaluation mode


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_equals_transformer_lens_random(random_case, direction):
    model, pair = random_case
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    for name in SWEEPS:
        if model.cfg.attn_only and SWEEPS[name].stage in ("resid_mid", "mlp_out"):
            continue
        ours = patcher.sweep(name, direction)
        ref = tl_sweep(model, name, pair, direction, pair.logit_diff)
        assert ours.values.shape == ref.shape, name
        torch.testing.assert_close(ours.values, ref.cpu(), atol=1e-5, rtol=0, msg=name)
    assert_no_hooks(model)


def sparse_pair(n: int, pos: int, vocab: int, generator: torch.Generator) -> PatchingPair:
    """Inputs that differ in one token each, at a different position per prompt, read at varying positions
    (the shape of a triggered-bigram pair): most cells change only some prompts, many none."""
    clean = torch.randint(vocab, (n, pos), generator=generator)
    answer_pos = torch.randint(2, pos, (n,), generator=generator)
    changed = (torch.rand(n, generator=generator) * answer_pos).long()  # in [0, answer_pos)
    corrupted = clean.clone()
    corrupted[torch.arange(n), changed] = (clean[torch.arange(n), changed] + 1) % vocab
    answers = torch.randint(vocab, (2, n), generator=generator)
    return PatchingPair(clean, corrupted, answer_pos, answers[0], answers[1])


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_sparse_pair_equals_transformer_lens(random_case, direction):
    """Cells that change some prompts only: those are resumed, the others keep the base run's logits; every
    sweep still equals TransformerLens's, with the batch-mean and a per-prompt callable metric."""
    model, _ = random_case
    pair = sparse_pair(6, 8, 11, torch.Generator().manual_seed(3))
    rows = torch.arange(len(pair.clean))
    checked = rows[::2]  # the per-prompt reference costs one TransformerLens sweep per prompt

    def per_prompt(logits):
        return logits[rows, pair.answer_pos, pair.correct] - logits[rows, pair.answer_pos, pair.incorrect]

    for metric in (pair.logit_diff, per_prompt) if direction == "denoising" else (pair.logit_diff,):
        patcher = Patcher(
            model, pair.clean, pair.corrupted, metric if metric is per_prompt else None, pair=pair
        )
        for name in SWEEPS:
            if model.cfg.attn_only and SWEEPS[name].stage in ("resid_mid", "mlp_out"):
                continue
            ours = (
                patcher.per_prompt_values(name, direction)[checked]
                if metric is per_prompt
                else patcher.sweep(name, direction).values
            )
            if metric is per_prompt:  # one TransformerLens sweep per checked prompt, each reading its prompt
                ref = torch.stack(
                    [tl_sweep(model, name, pair, direction, lambda x, b=b: per_prompt(x)[b]) for b in checked]
                )
            else:
                ref = tl_sweep(model, name, pair, direction, metric)
            torch.testing.assert_close(ours, ref.cpu().float(), atol=1e-5, rtol=0, msg=name)
    assert_no_hooks(model)


def answer_logprob(pair):
    """A plain callable metric, the way TransformerLens users write one:
    log-prob of the answer, per prompt."""
    rows = torch.arange(len(pair.clean))

    def metric(logits):
        return logits.log_softmax(-1)[rows, pair.answer_pos, pair.correct].mean()

    return metric


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_callable_metric_equals_transformer_lens(random_case, direction):
    """A callable metric: vmapped over patches,
    read-out positions found by the dependency check; every sweep."""
    model, pair = random_case
    metric = answer_logprob(pair)
    patcher = Patcher(model, pair.clean, pair.corrupted, metric)
    assert patcher.metric.mode == "vmap"
    assert torch.equal(patcher.metric.readout, pair.answer_pos[:, None])  # found, per prompt
    for name in SWEEPS:
        if model.cfg.attn_only and SWEEPS[name].stage in ("resid_mid", "mlp_out"):
            continue
        ref = tl_sweep(model, name, pair, direction, metric)
        torch.testing.assert_close(
            patcher.sweep(name, direction).values, ref.cpu(), atol=1e-5, rtol=0, msg=name
        )
    assert_no_hooks(model)


def test_generic_callable_metric_equals_transformer_lens(random_case):
    """A metric that reads every position (no skips by read-out),
    one that cannot be vmapped (`.item()`), and one that edits its logits in place."""
    model, pair = random_case

    def mean_logprob(logits):
        return logits.log_softmax(-1)[:, :, 0].mean()

    def not_vmappable(logits):
        # No gradient either: its read-out is found by perturbation.
        return torch.tensor(logits[:, -2, 1].sum().item())

    def edits_its_input(logits):
        # Scales the logits in place, every position: the engine reuses its logits buffer between calls.
        logits *= 2
        return logits[:, -2, 1].sum()

    cases = ((mean_logprob, "vmap", range(6)), (not_vmappable, "loop", [4]), (edits_its_input, None, [4]))
    for metric, mode, reads in cases:
        patcher = Patcher(model, pair.clean, pair.corrupted, metric)
        assert patcher.metric.mode == (mode or patcher.metric.mode) and patcher.metric.name == metric.__name__
        assert patcher.metric.readout.unique().tolist() == list(reads)
        for name in ("resid_pre", "attn_head_out_by_pos", "attn_head_pattern_all_pos"):
            ref = tl_sweep(model, name, pair, "denoising", metric)
            torch.testing.assert_close(patcher.sweep(name).values, ref.cpu(), atol=1e-5, rtol=0, msg=name)


def test_dependency_check_and_declared_readout(random_case):
    from mechmem.analysis.interventions.metric import find_readout
    from mechmem.errors import MechmemError

    model, pair = random_case
    probe = torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0))
    # Different positions per prompt; rows padded with their first position.
    got = find_readout(lambda x: x[0, 2, 1] + x[1, 5].logsumexp(-1) + x[2, [1, 6]].sum(), probe)
    assert got.tolist() == [[2, 2], [5, 5], [1, 6]]
    # Positions read through a non-differentiable function are found by perturbation.
    assert find_readout(lambda x: x[:, 3].argmax(-1).sum().item(), probe).unique().tolist() == [3]
    # Accuracy at confident positions: no small move changes an argmax there, a swamping one does.
    confident = probe.clone()
    confident[:, :, 0] += 1e3
    hits = lambda x: (x[:, [1, 4]].argmax(-1) == 0).float().sum()
    assert find_readout(hits, confident).unique().tolist() == [1, 4]
    with pytest.raises(MechmemError):
        find_readout(lambda x: torch.tensor(1.0), probe)
    # A declared read-out is used as given (negative = from the end) and gives TL's numbers.
    metric = answer_logprob(pair)
    declared = Patcher(model, pair.clean, pair.corrupted, metric, readout=pair.answer_pos[:, None])
    assert torch.equal(declared.metric.readout, pair.answer_pos[:, None])
    last = Patcher(model, pair.clean, pair.corrupted, lambda x: x[:, -1, 0].mean(), readout=[-1])
    assert last.metric.readout.unique().tolist() == [pair.clean.shape[1] - 1]
    ref = tl_sweep(model, "resid_pre", pair, "denoising", metric)
    torch.testing.assert_close(declared.sweep("resid_pre").values, ref.cpu(), atol=1e-5, rtol=0)
    with pytest.raises(MechmemError):
        Patcher(model, pair.clean, pair.corrupted, metric, readout=[99])
    # run_sweeps passes a declared read-out on.
    swept = run_sweeps(model, pair, ["resid_pre"], metric=metric, readout=pair.answer_pos[:, None])
    torch.testing.assert_close(swept["resid_pre"].values, ref.cpu(), atol=1e-5, rtol=0)
    with pytest.raises(MechmemError):
        run_sweeps(model, pair, ["resid_pre"], metric=metric, readout=[99])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A permutation Task 2 model after a short training run, saved as a checkpoint."""
    from mechmem.checkpoint import load_checkpoint
    from mechmem.models import build_model
    from mechmem.tasks import build_task, get_preset
    from mechmem.training import train

    preset = get_preset("permutation", "task2-quick")
    cfg = dataclasses.replace(preset.train, steps=300, eval_every=300, eval_samples=256)
    out = tmp_path_factory.mktemp("perm")
    model = build_model(preset.model, generator=torch.Generator().manual_seed(0))
    task = build_task("permutation", preset.task)
    train(model, task, cfg, model_config=preset.model, out_dir=out, progress=False)
    return load_checkpoint(out / "ckpt.pt")


@pytest.mark.parametrize("direction", ["denoising", "noising"])
def test_equals_transformer_lens_trained(trained, direction):
    pair = trained.task.patching_pair(64, generator=torch.Generator().manual_seed(3))
    results = run_sweeps(trained.model, pair, direction=direction)
    for name, res in results.items():
        ref = tl_sweep(trained.model, name, pair, direction, pair.logit_diff)
        torch.testing.assert_close(res.values, ref.cpu(), atol=1e-5, rtol=0, msg=name)
    assert_no_hooks(trained.model)


def test_models_the_replay_cannot_run_equal_transformer_lens():
    """Shortformer positions: the engine runs the sweeps on hooks, with TL's numbers."""
    from engine_cases import unsupported_model

    model = unsupported_model()
    pair = random_pair(4, 6, 6, torch.Generator().manual_seed(2))
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    assert patcher.engine.strategy == "hooks"
    for name in ("resid_pre", "attn_head_out_by_pos", "attn_head_pattern_all_pos", "mlp_out"):
        ref = tl_sweep(model, name, pair, "noising", pair.logit_diff)
        torch.testing.assert_close(patcher.sweep(name, "noising").values, ref.cpu(), atol=1e-5, rtol=0)
    assert_no_hooks(model)


def test_one_pass_per_start_position_equals_transformer_lens(random_case):
    """Passes that resume at different positions (no merging of start groups) give the same numbers."""
    model, pair = random_case
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    patcher.engine.pass_overhead = 0
    for name in ("resid_pre", "attn_out", "attn_head_out_by_pos", "attn_head_pattern_by_pos"):
        ref = tl_sweep(model, name, pair, "denoising", pair.logit_diff)
        torch.testing.assert_close(patcher.sweep(name).values, ref.cpu(), atol=1e-5, rtol=0, msg=name)


def test_invariants(random_case):
    model, pair = random_case
    # Patching a run into itself changes nothing.
    same = Patcher(model, pair.clean, pair.clean, pair=pair).sweep("resid_pre")
    assert torch.all(same.values == same.clean)
    # Positions before the first difference and after the last read-out keep the unpatched metric.
    res = run_sweeps(model, pair, ["resid_pre"])["resid_pre"]
    assert torch.all(res.values[:, :3] == res.corrupted)
    assert torch.all(res.values[:, int(pair.answer_pos.max()) + 1 :] == res.corrupted)
    # Chunking (one patch per pass, the cached run whole; row chunks: test_interventions_chunked.py) does not
    # change the numbers.
    small = Patcher(model, pair.clean, pair.corrupted, pair=pair, memory_mb=1e-6)
    small.engine.cache_mb = 256.0
    torch.testing.assert_close(
        small.sweep("attn_head_out_by_pos").values,
        Patcher(model, pair.clean, pair.corrupted, pair=pair).sweep("attn_head_out_by_pos").values,
        atol=1e-6,
        rtol=0,
    )
    # The batched logit difference equals the pair's own metric on the unpatched runs.
    torch.testing.assert_close(torch.tensor(res.clean), pair.logit_diff(model(pair.clean)), atol=1e-5, rtol=0)
    # Denoising layer-0 resid_pre at every differing position at once would give the clean run; the last
    # layer's resid_post at the read-out position alone does (nothing after it).
    # One shared read-out position, so the cell (last layer, that position) patches every prompt's read-out.
    last, at = model.cfg.n_layers - 1, int(pair.answer_pos.max())
    shared = PatchingPair(
        pair.clean, pair.corrupted, torch.full_like(pair.answer_pos, at), pair.correct, pair.incorrect
    )
    post = Patcher(model, shared.clean, shared.corrupted, pair=shared).sweep("resid_post")
    assert abs(float(post.values[last, at]) - post.clean) < 1e-5
    assert abs(post.clean - post.corrupted) > 1e-3  # the check is not vacuous


def test_result_contract_and_plot(random_case):
    model, pair = random_case
    res = Patcher(model, pair.clean, pair.corrupted, pair=pair).sweep("attn_head_out_by_pos", "noising")
    d = res.to_dict()
    assert (
        d["axes"] == ["layer", "pos", "head"] and d["direction"] == "noising" and d["metric"] == "logit_diff"
    )
    assert torch.tensor(d["values"]).shape == res.values.shape
    json.dumps(d)
    with pytest.raises(ValueError):
        PatchingResult("x", ("layer",), torch.zeros(2, 2), "denoising", "m", 0.0, 1.0)
    fig = plot_patching(res)
    assert type(fig).__name__ == "Figure"
    fig2 = plot_patching(Patcher(model, pair.clean, pair.corrupted, pair=pair).sweep("resid_pre"))
    assert type(fig2).__name__ == "Figure"
    metric = PatchingMetric.logit_diff(pair)
    assert metric.readout.shape == (len(pair.clean), 1)


def test_bad_input_raises(random_case):
    from mechmem.errors import MechmemError

    model, pair = random_case
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    with pytest.raises(MechmemError):
        patcher.sweep("nonsense")
    with pytest.raises(MechmemError):
        patcher.sweep("resid_pre", "sideways")
    if model.cfg.attn_only:
        with pytest.raises(MechmemError):
            patcher.sweep("mlp_out")


def test_script_writes_patching_json(trained, tmp_path, capsys):
    from mechmem.cli import run_script

    script = load_script("patch")
    argv = [
        str(trained.path),
        "--out",
        str(tmp_path),
        "--n-samples",
        "16",
        "--sweeps",
        "resid_pre",
        "attn_head_out_by_pos",
        "--direction",
        "noising",
    ]
    assert run_script(script.main, argv) == 0
    data = json.loads((tmp_path / "patching.json").read_text())
    assert data["metric"] == "logit_diff" and data["direction"] == "noising"
    assert data["sweeps"]["attn_head_out_by_pos"]["axes"] == ["layer", "pos", "head"]
    assert torch.tensor(data["sweeps"]["resid_pre"]["values"]).shape == (1, 9)
    assert (tmp_path / "patching_resid_pre.png").exists()
    assert "resid_pre" in capsys.readouterr().out
    att = tmp_path / "attribution"
    argv = [str(trained.path), "--out", str(att), "--n-samples", "16", "--sweeps", "resid_pre"]
    assert run_script(script.main, [*argv, "--method", "attribution"]) == 0
    got = json.loads((att / "patching.json").read_text())
    assert got["method"] == "attribution"
    assert torch.tensor(got["sweeps"]["resid_pre"]["values"]).shape == (1, 9)
    for bad in (
        [str(tmp_path / "missing.pt")],
        [str(trained.path), "--n-samples", "0", "--out", str(tmp_path)],
    ):
        assert run_script(script.main, bad) == 2
        assert capsys.readouterr().err.startswith("error: ")
    assert_no_hooks(trained.model)


def test_start_groups_and_metric_recognition(random_case):
    from mechmem.analysis.interventions.replay.schedule import start_groups

    starts = torch.tensor([5, 0, 5, 0, 7])
    # Large batches: extra positions cost more than a pass, so one pass per start position.
    assert [sorted(g.tolist()) for g in start_groups(starts, batch=200)] == [[1, 3], [0, 2], [4]]
    # A single prompt: everything joins the first pass.
    assert [sorted(g.tolist()) for g in start_groups(starts, batch=1)] == [[0, 1, 2, 3, 4]]
    model, pair = random_case
    patcher = Patcher(model, pair.clean, pair.corrupted, pair.logit_diff)  # recognised: batched, answer-only
    assert patcher.metric.name == "logit_diff" and patcher.metric.readout.shape == (len(pair.clean), 1)
