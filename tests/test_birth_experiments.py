"""Birth experiments and statements: run definitions,
run caching, history records, the rules on known histories."""

import json

import torch
from helpers import ROOT

from mechmem.models.transformer import build_transformer
from mechmem.tasks import build_task
from mechmem.tasks.birth.models import simplified_config
from mechmem.tasks.birth.task import BirthConfig
from mechmem.training import TrainConfig
from mechmem_papers.birth.experiments import (
    QUICK,
    WK1,
    WK2,
    WO2,
    Run,
    at_step,
    compact_history,
    expand_history,
    experiment_runs,
    final,
    first_step,
    run_experiment,
)
from mechmem_papers.birth.statements import FIRST_RULES, LADDER_KEYS, RULES, Context, judge, load_published

DATA = ROOT / "docs" / "reproductions" / "data"


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


def test_history_helpers_and_compact_round_trip():
    h = fake_history({"acc": lambda s: s / 100})
    assert first_step(h, "acc", 0.5) == 50
    assert first_step(h, "acc", 0.05, below=True) == 0
    assert at_step(h, "acc", 55) == 0.5
    assert abs(final(h, "acc") - 0.9) < 1e-9
    ragged = h[:-1] + [{"step": 100, "eval": 0.25}]  # the end record lacks training-batch metrics
    back = expand_history(json.loads(json.dumps(compact_history(ragged))))
    assert back == ragged and final(back, "acc") == final(ragged, "acc")


def judged(h, freeze_step=40, shifted=None):
    published = load_published()
    return {s["key"]: s for s in judge(published, Context(h, freeze_step, 65, shifted or {}))}


def test_published_file_covers_every_rule_with_its_source():
    published = load_published()
    assert (
        published["source"] and published["preset_targets"]["source"] and published["speed_target"]["source"]
    )
    for s in published["statements"]:
        assert (
            s["key"] in RULES
            and s["rule"].format_map({"text": "-", **s["params"]})
            and s["since"]
            and s["where"]
        )
        assert ("first_rule" in s) == (s["key"] in FIRST_RULES)
    authors = json.loads((DATA / "birth_authors_code.json").read_text())
    assert authors["source"] and set(authors["results"]) <= {
        "icl_acc",
        "wo2_recall",
        "wk2_recall",
        "wk1_recall",
        "wk1_recall_64",
    }


def test_statements_follow_their_rules():
    up = lambda s: min(1.0, s / 50)
    h = {
        "freeze_none": fake_history(
            {"icl_acc": up, "wk1_recall_64": up, "wk1_recall": lambda s: s / 100, "wo2_recall": up}
        ),
        "freeze_wo2": fake_history({"icl_acc": lambda s: 0.0}),
        "freeze_wk1": fake_history({"wk2_recall": up, "icl_acc": lambda s: 0.1}),
        "freeze_wk2": fake_history({"wk1_recall_64": lambda s: 0.1, "icl_acc": lambda s: 0.2}),
        "freeze_wk1_wk2": fake_history({"wo2_recall": lambda s: 0.7}),
        "depth_2l_fixed": fake_history({"eval_icl_acc": lambda s: 0.995}),
        "depth_2l_random": fake_history({"eval_icl_acc": lambda s: 0.95}),
        "depth_1l_fixed": fake_history({"eval_icl_acc": lambda s: 0.5}),
        "depth_1l_random": fake_history({"eval_icl_acc": lambda s: 0.55}),
        "ffn_joint": fake_history({"global_loss": lambda s: 1 + 3 * (s < 20), "icl_acc": up}),
    }
    rows = judged(h)
    ran = {k: s for k, s in rows.items() if s["outcome"] is not None}
    assert len(ran) == 5 and all(s["holds"] for s in ran.values())
    assert all(rows[k]["outcome"] is None for k in LADDER_KEYS)  # judged on the ladder, absent here
    assert all(rows[k]["first_rule"]["holds"] for k in LADDER_KEYS)  # the first rules read the depth runs
    assert rows["random_slower"]["holds"] is None and rows["random_slower"]["outcome"] is None
    assert rows["wo2_alone"]["first_rule"]["holds"] is False  # 0.7 < 0.9, the first rule
    assert rows["wk2_before_wk1"]["first_rule"]["outcome"] == "0.100 vs 0.200"
    assert rows["one_layer_random"]["first_rule"]["outcome"] == "fixed 0.500, random 0.550"
    h["depth_1l_fixed"] = fake_history({"eval_icl_acc": lambda s: 0.99})
    h["freeze_wo2"] = h["freeze_none"]
    again = judged(h)
    assert [s["holds"] for s in again.values()].count(False) == 1
    assert again["one_layer_fixed"]["first_rule"]["holds"] is False


def test_data_statements_and_shifted_outputs():
    fast, slow = (fake_history({"eval_icl_acc": (lambda s, t=t: float(s >= t))}) for t in (30, 60))
    h = {
        "freeze_none": fast,
        "data_k1_fixed": slow,
        "data_k3_fixed": slow,
        "data_k5_random": slow,
        "data_k5_bigram": fast,
    }
    shifted = {"bigram_on_uniform": 0.5, "uniform_on_bigram": 1.0}
    rows = judged(h, shifted=shifted)
    assert rows["fewer_triggers_slower"]["outcome"] == "K=1: 60, K=3: 60, K=5: 30"
    assert rows["fewer_triggers_slower"]["holds"] and rows["random_slower"]["holds"]
    assert rows["bigram_ood"]["holds"]
    h["data_k1_fixed"] = fake_history({"eval_icl_acc": lambda s: 1.0})
    assert not judged(h, shifted=shifted)["fewer_triggers_slower"]["holds"]


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


def test_any_corpus_drives_the_task_and_the_runs(tmp_path):
    text = tmp_path / "tiny.txt"
    text.write_text("the cat sat on the mat; a bat ate the hat.\n" * 20)
    n = len(set(text.read_text()))
    task = build_task("birth", BirthConfig(seq_len=16, n_triggers=2, fixed_triggers=False, corpus=str(text)))
    batch = task.train_batch(4, generator=torch.Generator().manual_seed(0))
    assert task.d_vocab == n and int(batch.tokens.max()) < n
    runs = experiment_runs(QUICK, str(text))
    assert all(r.model.d_vocab == n and r.task.corpus == str(text) for r in runs)
    assert build_transformer(runs[0].model).cfg.d_vocab == n
