"""Bring your own model: the one-call conversion, the config check at save, the generic task and the warning
that says it was attached, and the docs example (with TransformerLens 4's path and an own task)."""

import re
import shlex
import warnings

import pytest
import torch
from helpers import ROOT, assert_no_hooks

from mechmem.analysis.heads import detect_heads, detect_heads_on_task, task_patterns
from mechmem.analysis.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_induction_model
from mechmem.checkpoint import load_checkpoint, save_checkpoint, save_model
from mechmem.cli import run_script
from mechmem.cli.main import COMMANDS
from mechmem.errors import MechmemError
from mechmem.models.backend import BACKEND, TL_VERSION, hooked_transformer_config, raw_hooked_transformer
from mechmem.models.transformer_config import TransformerConfig, config_from_hooked_transformer
from mechmem.tasks import build_task
from mechmem.tasks.generic import RepeatsConfig

DOC = ROOT / "docs" / "bring-your-own-model.md"


def tl_model(seed=0, **overrides):
    kw = {
        "n_layers": 2,
        "d_model": 16,
        "n_heads": 2,
        "d_head": 8,
        "n_ctx": 10,
        "d_vocab": 14,
        "attn_only": True,
    }
    kw.update(overrides)
    torch.manual_seed(seed)  # TransformerLens initialises from the global RNG; tests only
    return raw_hooked_transformer(hooked_transformer_config(**kw)).eval()


ARCHITECTURES = {
    "plain": {},
    "no_attn_scale": {"use_attn_scale": False},
    "ln_gelu_mlp": {"attn_only": False, "d_mlp": 24, "act_fn": "gelu", "normalization_type": "LN"},
    "odd_head_rms": {"d_head": 5, "normalization_type": "RMSPre", "d_vocab_out": 9},
    "rotary": {"positional_embedding_type": "rotary", "rotary_dim": 8},
    "rotary_unset_dim": {"positional_embedding_type": "rotary"},  # TransformerLens: the whole head
    "partial_rotary": {"positional_embedding_type": "rotary", "rotary_dim": 4, "rotary_base": 500},
    "shortformer": {"positional_embedding_type": "shortformer"},
    "grouped_query": {"n_key_value_heads": 1, "normalization_type": "RMS"},
    "gated_mlp": {"attn_only": False, "d_mlp": 24, "gated_mlp": True, "act_fn": "silu"},
    "lnpre_eps": {"normalization_type": "LNPre", "eps": 1e-3},
    "parallel": {"attn_only": False, "d_mlp": 24, "parallel_attn_mlp": True, "normalization_type": "LN"},
    "local": {"attn_types": ["global", "local"], "window_size": 3, "use_local_attn": True},
    "attn_scale": {"attn_scale": 2.0},
    "vocab_out": {"d_vocab_out": 20, "attn_only": False, "d_mlp": 24, "act_fn": "gelu_new"},
}
"""Settings of TransformerLens models that bring-your-own-model saves and reloads exactly (and the table in
the docs lists)."""

TL4_UNBUILDABLE = {"shortformer", "parallel"}
"""Settings TransformerLens 4's native model refuses to build."""
TL4_NOT_AS_CONFIGURED = {"no_attn_scale", "local"}
"""Settings TransformerLens 4's native model accepts but does not compute (it scales attention by sqrt(d_head)
without use_attn_scale and ignores attn_types): mechmem refuses to save such a model in one line, since no
config it writes would rebuild what the model computes on both backends."""
WRITTEN_WITH_A_WARNING = {"shortformer", "parallel", "local"}
"""Settings TransformerLens 3.9 saves with a warning: the line TransformerLens 4 refuses their files with."""


def randomised(model):
    """Give every weight (biases and norm scales too) random values, so no setting hides behind a zero."""
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(
                torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if p.ndim == 1 and p.shape[0] == 16 else 0)
            )
    return model


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_converted_models_reload_with_identical_logits(tmp_path, name):
    overrides = ARCHITECTURES[name]
    if BACKEND == "bridge" and name in TL4_UNBUILDABLE:
        pytest.skip(f"TransformerLens {TL_VERSION} cannot build a {name} model")
    model = randomised(tl_model(**overrides))
    if BACKEND == "bridge" and name in TL4_NOT_AS_CONFIGURED:
        with pytest.raises(MechmemError, match="cannot compute|does not match"):
            save_model(model, tmp_path / "ckpt.pt")
        return
    if name in WRITTEN_WITH_A_WARNING:
        with pytest.warns(UserWarning, match="TransformerLens 4 cannot compute this model"):
            ckpt = load_checkpoint(save_model(model, tmp_path / "ckpt.pt"))
    else:
        ckpt = load_checkpoint(save_model(model, tmp_path / "ckpt.pt"))
    tokens = torch.randint(14, (3, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(ckpt.model(tokens), model(tokens), rtol=0, atol=1e-6)
    vocab = min(
        14, overrides.get("d_vocab_out", 14)
    )  # targets are inputs: a smaller output vocabulary bounds it
    assert ckpt.task_config == {"d_vocab": vocab, "half": 5, "distinct": True}


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"normalization_type": "LN", "final_rms": True}, "final_rms"),
        ({"positional_embedding_type": "rotary", "rotary_dim": 8, "rotary_adjacent_pairs": True}, "adjacent"),
        ({"use_qk_norm": True, "normalization_type": "RMS"}, "use_qk_norm"),
    ],
)
def test_settings_mechmem_cannot_rebuild_are_refused_by_name(tmp_path, overrides, field):
    with pytest.raises(MechmemError, match=f"cannot reproduce.*{field}"):
        save_model(tl_model(**overrides), tmp_path / "ckpt.pt")
    assert not (tmp_path / "ckpt.pt").exists()


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"use_attn_scale": False}, "use_attn_scale"),
        ({"positional_embedding_type": "shortformer"}, "positional"),
    ],
)
def test_save_checkpoint_refuses_a_config_that_does_not_match_the_model(tmp_path, overrides, field):
    if BACKEND == "bridge" and overrides.get("positional_embedding_type") == "shortformer":
        pytest.skip(f"TransformerLens {TL_VERSION} cannot build a shortformer model")
    model = tl_model(**overrides)
    default = TransformerConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=14, n_ctx=10)
    with pytest.raises(MechmemError, match=f"does not match model_config: .*{field}"):
        save_checkpoint(
            tmp_path / "c.pt",
            model=model,
            model_config=default,
            task_name="repeats",
            task_config=RepeatsConfig.for_model(model),
        )
    assert not (tmp_path / "c.pt").exists()


def test_save_checkpoint_refuses_weights_of_the_wrong_shape(tmp_path):
    model = tl_model()
    wrong = config_from_hooked_transformer(model).replace(d_vocab=15)
    with pytest.raises(MechmemError, match="does not match model_config: d_vocab"):
        save_checkpoint(
            tmp_path / "c.pt",
            model=model,
            model_config=wrong,
            task_name="repeats",
            task_config=RepeatsConfig(d_vocab=14, half=5),
        )


def test_repeats_task_matches_its_docstring_and_the_planted_circuit_solves_it():
    model = planted_induction_model()
    task = build_task("repeats", RepeatsConfig.for_model(model))
    batch = task.train_batch(32, generator=torch.Generator().manual_seed(0))
    h = task.config.half
    assert torch.equal(batch.tokens[:, :h], batch.tokens[:, h:])
    masked = batch.loss_mask.bool()
    assert masked.sum(1).eq(h - 1).all() and torch.equal(batch.targets[:, :-1], batch.tokens[:, 1:])
    assert task.evaluate(model, generator=torch.Generator().manual_seed(1), n=64)["eval_acc"] == 1.0
    pair = task.patching_pair(16, generator=torch.Generator().manual_seed(2))
    assert (pair.logit_diff_per_prompt(model(pair.clean)) > 0).all()
    assert (pair.logit_diff_per_prompt(model(pair.corrupted)) < 0).all()
    assert_no_hooks(model)


def test_task_scores_find_the_planted_heads_with_one_definition():
    model = planted_induction_model()
    batch = build_task("repeats", RepeatsConfig.for_model(model)).eval_batch(32, generator=torch.Generator())
    scores = detect_heads_on_task(model, batch.tokens, batch.loss_mask > 0)
    reference = detect_heads(model, batch.tokens, task_patterns(batch.loss_mask > 0), chunk=32)
    for name, (layer, head) in (("induction", INDUCTION_HEAD), ("previous_token", PREVIOUS_TOKEN_HEAD)):
        assert scores.scores[name][layer, head] > 0.99
        torch.testing.assert_close(scores.scores[name], reference.scores[name])
    assert_no_hooks(model)


def _run_the_docs_example(tmp_path, monkeypatch, capsys, *, skip: tuple[str, ...] = ()) -> None:
    """The docs' Python blocks in one session, then its `mechmem ...` commands on byom/ (those whose
    subcommand is named in `skip` left out)."""
    text = DOC.read_text()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}  # one session, as a reader would run the blocks
    warned: list[bool] = []
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
        if "boot_native" in block and BACKEND == "hooked":
            continue  # the TransformerLens 4 path
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the docs' own example, run as a reader would
        attached = any("attached the generic repeats task" in str(w.message) for w in caught)
        warned += [attached]
        assert not (attached and "task_name=" in block), block  # a task given: no warning
    assert sum(warned) == (2 if BACKEND == "bridge" else 1)  # the worked example's save (and boot_native's)
    out = capsys.readouterr().out
    assert "scale_attn_by_inverse_layer_idx" in out
    assert "'eval_acc': 1.0" in out and "L0H2 previous-token, L1H1 induction" in out  # the own-task example
    commands = [
        line.split("#")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
        for line in block.splitlines()
        if line.startswith("mechmem ") and "byom/" in line
    ]
    assert len(commands) == 3
    for command in commands:
        name, *argv = shlex.split(command)[1:]
        if name not in skip:
            assert run_script(lambda args, name=name: COMMANDS[name][0].main(args), argv) == 0, command


def test_the_docs_worked_example_runs(tmp_path, monkeypatch, capsys):
    """Everything but the report command, which alone takes a minute (analyses/report.py runs by default in
    test_report_cli.py::test_demo_writes_index_and_reuses_checkpoints); the whole example is slow."""
    _run_the_docs_example(tmp_path, monkeypatch, capsys, skip=("report",))


@pytest.mark.slow
def test_the_docs_worked_example_runs_with_its_report(tmp_path, monkeypatch, capsys):
    _run_the_docs_example(tmp_path, monkeypatch, capsys)
    assert "L1H1" in (tmp_path / "byom" / "report" / "report.md").read_text()


def test_save_model_without_a_task_says_which_it_attached(tmp_path, monkeypatch):
    with pytest.warns(UserWarning, match="no task given: attached the generic repeats task"):
        path = save_model(planted_induction_model(), tmp_path / "ckpt.pt")
    ckpt = load_checkpoint(path)
    assert (
        ckpt.task_name == "repeats"
        and "its own data only if it was trained on repeats" in (ckpt.extra["task_attached"])
    )
    from mechmem.report import checkpoint_report as module
    from mechmem.report.document import Report

    monkeypatch.setattr(module, "build_report", lambda *args, **kwargs: Report("", "", kwargs["meta"], []))
    assert ckpt.extra["task_attached"] in module.checkpoint_report(ckpt, n_samples=8).meta["task"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a task given: no warning, no note
        named = load_checkpoint(
            save_model(planted_induction_model(), tmp_path / "named.pt", task_name="repeats")
        )
    assert "task_attached" not in named.extra and named.task_config == ckpt.task_config
