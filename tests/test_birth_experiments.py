"""Birth experiments and report: run definitions, run caching, statement rules and figures on known histories."""

import torch

from mechmem.papers.birth import page, plots
from mechmem.papers.birth.experiments import (
    QUICK,
    WK1,
    WK2,
    WO2,
    Run,
    at_step,
    experiment_runs,
    final,
    first_step,
    run_experiment,
)
from mechmem.papers.birth.models import simplified_config
from mechmem.tasks import build_task
from mechmem.papers.birth.task import BirthConfig
from mechmem.training import TrainConfig


def test_runs_cover_every_experiment():
    runs = {r.name: r for r in experiment_runs(QUICK)}
    assert {r.group for r in runs.values()} == {"freezing", "ffn", "data", "depth"}
    assert runs["freeze_wk1_wk2"].train.frozen_until == ((WK1, 300), (WK2, 300))
    assert runs["freeze_wo2"].train.frozen_until == ((WO2, 300),)
    assert runs["ffn_joint"].model.d_mlp == QUICK.d_model and not runs["ffn_joint"].task.head_only_loss
    assert {r.task.n_triggers for r in runs.values() if r.group == "data"} == {1, 3, 5}
    assert runs["data_k5_ood"].task.outputs == "ood" and runs["data_k5_bigram"].task.outputs == "bigram"
    assert {r.model.n_layers for r in runs.values() if r.group == "depth"} == {1, 2}
    assert all(r.model.normalization_type == "LN" for r in runs.values() if r.group == "depth")


def fake_history(curve, steps=range(0, 101, 10), **extra):
    return [{"step": s, **{k: float(f(s)) for k, f in curve.items()}, **extra} for s in steps]


def test_history_helpers():
    h = fake_history({"acc": lambda s: s / 100})
    assert first_step(h, "acc", 0.5) == 50
    assert first_step(h, "acc", 0.05, below=True) == 0
    assert at_step(h, "acc", 55) == 0.5
    assert abs(final(h, "acc") - 0.9) < 1e-9


def test_statements_follow_their_rules():
    up = lambda s: min(1.0, s / 50)
    h = {
        "freeze_none": fake_history(
            {"icl_acc": up, "wk1_recall_64": up, "wk1_recall": lambda s: s / 100, "wo2_recall": up}
        ),
        "freeze_wo2": fake_history({"icl_acc": lambda s: 0.0}),
        "freeze_wk1": fake_history({"wk2_recall": up}),
        "freeze_wk2": fake_history({"wk1_recall_64": lambda s: 0.1}),
        "freeze_wk1_wk2": fake_history({"wo2_recall": lambda s: 0.7}),
        "depth_2l_fixed": fake_history({"eval_icl_acc": lambda s: 0.995}),
        "depth_2l_random": fake_history({"eval_icl_acc": lambda s: 0.95}),
        "depth_1l_fixed": fake_history({"eval_icl_acc": lambda s: 0.5}),
        "depth_1l_random": fake_history({"eval_icl_acc": lambda s: 0.55}),
        "ffn_joint": fake_history({"global_loss": lambda s: 1 + 3 * (s < 20), "icl_acc": up}),
    }
    scale = QUICK.__class__(**{**QUICK.__dict__, "freeze_step": 40})
    results = page.statements(h, scale)
    assert len(results) == 8 and all(ok for _, _, ok in results)
    h["depth_1l_fixed"] = fake_history({"eval_icl_acc": lambda s: 0.99})
    h["freeze_wo2"] = h["freeze_none"]
    flags = [ok for _, _, ok in page.statements(h, scale)]
    assert flags.count(False) == 2


def test_figures_and_markdown():
    h = fake_history(
        {
            "icl_acc": lambda s: s / 100,
            "wo2_recall": lambda s: 1.0,
            "global_loss": lambda s: 3.0,
            "wf_kl": lambda s: 1.0,
            "eval_icl_acc": lambda s: 0.9,
        }
    )
    figs = [
        plots.plot_training(h, "t"),
        plots.plot_freezing({"a": h}, {"a": "A"}, 30),
        plots.plot_ffn(h),
        plots.plot_final_bars([("a", 0.5), ("b", 0.9)], "acc"),
    ]
    assert all(hasattr(f, "savefig") for f in figs)
    runs = [r for r in experiment_runs(QUICK) if r.name == "freeze_none"]
    text = page.markdown(
        runs, {"freeze_none": h}, QUICK, command="cmd", figures={"x.png": "X"}, wall_s=60.0
    )
    assert "| all trained jointly | freezing |" in text and "figures/x.png" in text and "`cmd`" in text


def test_attention_figure_on_a_tiny_model():
    from mechmem.models.adapter import build_transformer

    model = build_transformer(simplified_config(d_vocab=65, n_ctx=16, d_model=16))
    task = build_task("birth", BirthConfig(seq_len=16, n_triggers=2, fixed_triggers=True))
    assert hasattr(plots.plot_attention(model, task, n_pos=12), "savefig")


def test_run_experiment_trains_once_then_reuses(tmp_path):
    model = simplified_config(
        d_vocab=65, n_ctx=16, d_model=16, freeze_embeddings=True, freeze_unembedding=True
    )
    task = BirthConfig(seq_len=16, n_triggers=2, fixed_triggers=True)
    cfg = TrainConfig(steps=2, batch_size=4, lr=0.1, optimizer="sgd", eval_every=1, eval_samples=4)
    run = Run("tiny", "freezing", "tiny", model, task, cfg)
    first = run_experiment(run, tmp_path)
    stamp = (tmp_path / "tiny" / "ckpt.pt").stat().st_mtime_ns
    again = run_experiment(run, tmp_path)
    assert first == again and (tmp_path / "tiny" / "ckpt.pt").stat().st_mtime_ns == stamp
    assert [r["step"] for r in first] == [0, 1, 2]


def load_script(name):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "analyses" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"analyses_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_reproduce_script_end_to_end_on_a_tiny_scale(tmp_path, monkeypatch):
    from mechmem.papers.birth.experiments import SCALES, Scale

    tiny = Scale(
        d_model=16,
        seq_len=16,
        batch_size=4,
        steps=4,
        full_steps=4,
        freeze_step=2,
        eval_every=2,
        eval_samples=8,
        depth_seq_len=16,
    )
    monkeypatch.setitem(SCALES, "quick", tiny)
    main = load_script("reproduce_birth")
    doc = tmp_path / "docs" / "birth.md"
    assert (
        main(
            [
                "--quick",
                "--only",
                "freezing",
                "ffn",
                "--runs",
                str(tmp_path / "runs"),
                "--doc",
                str(doc),
                "--skip-speed",
            ]
        )
        == 0
    )
    text = doc.read_text()
    assert "W_O^2 alone until 2" in text and "figures/birth_freezing.png" in text
    assert (tmp_path / "docs" / "figures" / "birth_attention.png").exists()


def test_reproduce_script_rejects_unknown_experiments(tmp_path, capsys):
    from mechmem.cli import run_script

    main = load_script("reproduce_birth")
    assert run_script(main, ["--quick", "--only", "nope", "--runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_any_corpus_drives_the_task_and_the_runs(tmp_path):
    text = tmp_path / "tiny.txt"
    text.write_text("the cat sat on the mat; a bat ate the hat.\n" * 20)
    n = len(set(text.read_text()))
    task = build_task("birth", BirthConfig(seq_len=16, n_triggers=2, fixed_triggers=False, corpus=str(text)))
    batch = task.train_batch(4, generator=torch.Generator().manual_seed(0))
    assert task.d_vocab == n and int(batch.tokens.max()) < n
    runs = experiment_runs(QUICK, str(text))
    assert all(r.model.d_vocab == n and r.task.corpus == str(text) for r in runs)
