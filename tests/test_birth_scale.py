"""The birth scale ladder: rule verdicts, the climb (stops at the first rung that meets a rule, resumes from
its records), the metric against a one-batch reference,
the committed rules file and the page's ladder numbers."""

import copy
import itertools
import json

import pytest
import torch
from helpers import ROOT

from mechmem.cli import run_script
from mechmem.models.transformer import build_transformer
from mechmem.tasks import build_task
from mechmem.tasks.birth.models import full_config
from mechmem.tasks.birth.task import BirthConfig
from mechmem_papers.birth import page as birth_page
from mechmem_papers.birth import scale
from mechmem_papers.birth.statements import LADDER_KEYS

DATA = ROOT / "docs" / "reproductions" / "data"
AT_LEAST = {"kind": "at_least", "threshold": 0.99}
WITHIN = {"kind": "within", "target": 0.55, "tolerance": 0.05}


def tiny_rules(steps=(2, 4, 6)):
    rules = copy.deepcopy(scale.load_rules(DATA / "birth_rules.json"))
    rules["ladder"]["rungs"] = [
        {"name": f"T{i}", "d_model": 8, "seq_len": 8, "batch_size": 2, "steps": s, "why": "tiny"}
        for i, s in enumerate(steps)
    ]
    rules["ladder"]["curve_points"] = 2
    rules["metric"]["final_sequences"] = 4
    return rules


def test_verdicts_and_gaps_at_the_band_edges():
    assert scale.verdict(AT_LEAST, 0.99) == "met" and scale.verdict(AT_LEAST, 0.9899) == "below"
    assert [scale.verdict(WITHIN, v) for v in (0.4999, 0.5, 0.6, 0.6001)] == ["below", "met", "met", "above"]
    assert scale.gap(AT_LEAST, 0.979) == pytest.approx(0.011) and scale.gap(AT_LEAST, 1.0) == 0
    assert scale.gap(WITHIN, 0.44) == pytest.approx(0.06) and scale.gap(WITHIN, 0.7) == pytest.approx(0.1)
    assert scale.late_rise([0.0] * 6 + [1.0] * 2) == 1 and scale.late_rise([0.5] * 8) == 0
    assert scale.late_rise([0.1] * 7) is None and scale.late_rise([None] + [0.2] * 8) == 0


def test_ladder_climbs_until_met_and_resumes(tmp_path, monkeypatch):
    calls = []

    def fake_cell(**kw):  # accuracy grows with steps; 1-layer models stop at 0.55
        calls.append(kw)
        acc = min(0.55, 0.2 * kw["steps"]) if kw["n_layers"] == 1 else 0.4 + 0.1 * kw["steps"]
        return {"final": {"icl_acc": acc, "n_icl_positions": 10}, "wall_s": 1.0, "curve": {}}

    monkeypatch.setattr(scale, "train_cell", fake_cell)
    rules, records = tiny_rules(), tmp_path / "cells.jsonl"
    status = scale.run_ladder(rules, records, log=lambda line: None)
    # 2l_fixed: 0.6, 0.8, 1.0 -> met at T2; 2l_random:
    # 0.6 below, 0.8 below, 1.0 above; 1-layer: 0.4, 0.55 -> T1
    assert status == {
        "two_layer_fixed": "met",
        "two_layer_random": "above",
        "one_layer_random": "met",
        "one_layer_fixed": "met",
    }
    assert len(calls) == 3 + 3 + 2 + 2
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert [line["key"] for line in lines][:4] == [
        "T0/2l_fixed",
        "T0/2l_random",
        "T0/1l_random",
        "T0/1l_fixed",
    ]
    summary = scale.summarise(rules, scale.read_records(records))
    assert (
        summary["one_layer_random"]["outcome"]["rung"] == "T1"
        and summary["one_layer_random"]["not_reached"] == []
    )
    assert summary["two_layer_random"]["status"] == "above"
    assert summary["two_layer_random"]["outcome"]["gap"] == pytest.approx(0.02)
    calls.clear()
    assert scale.run_ladder(rules, records, log=lambda line: None) == status and calls == []  # all reused
    check = {"seeds": [1, 2], "order": ["one_layer_fixed", "two_layer_random"]}
    scale.run_seed_check(rules, check, records, log=lambda line: None)
    assert [(c["seed"], c["steps"], c["n_layers"]) for c in calls] == [
        (1, 4, 1),
        (2, 4, 1),
        (1, 6, 2),
        (2, 6, 2),
    ]
    again = scale.summarise(rules, scale.read_records(records))
    assert again["one_layer_fixed"]["outcome"]["seeds"] == {"1": 0.55, "2": 0.55}
    assert again == {**summary, **{k: again[k] for k in check["order"]}}  # seed cells never change a verdict
    assert again["one_layer_fixed"]["status"] == summary["one_layer_fixed"]["status"]


def test_a_rung_runs_every_statement_whatever_the_climb_decided(tmp_path, monkeypatch):
    calls = []

    def fake_cell(**kw):
        calls.append(kw)
        return {"final": {"icl_acc": 0.1 * kw["n_layers"], "n_icl_positions": 10}, "wall_s": 1.0, "curve": {}}

    monkeypatch.setattr(scale, "train_cell", fake_cell)
    rules, records = tiny_rules(), tmp_path / "cells.jsonl"
    values = scale.run_rung(rules, records, "T2", statements=["one_layer_fixed", "two_layer_fixed"],
                            device="cuda", log=lambda line: None)  # fmt: skip
    assert values == {"one_layer_fixed": 0.1, "two_layer_fixed": 0.2}
    assert [(c["steps"], c["device"]) for c in calls] == [(6, "cuda"), (6, "cuda")]
    assert set(scale.read_records(records)) == {"T2/1l_fixed", "T2/2l_fixed"}  # the keys the climb reads
    assert scale.run_rung(rules, records, "T2", log=lambda line: None).keys() == set(LADDER_KEYS)
    assert len(calls) == 4  # the two cells already run are reused
    summary = scale.summarise(rules, scale.read_records(records))
    entry = summary["one_layer_fixed"]  # no climb ran: the rung is shown beside it, never as its outcome
    assert entry["outcome"] is None and entry["status"] == "not run"
    assert [(row["rung"], row["value"]) for row in entry["beyond"]] == [("T2", 0.1)]


def test_unfinished_climb_reports_its_gap_and_the_rungs_not_reached():
    rules = tiny_rules()
    rec = {"final": {"icl_acc": 0.98, "n_icl_positions": 10}, "wall_s": 2.0}
    summary = scale.summarise(rules, {"T0/2l_fixed": rec})
    fixed = summary["two_layer_fixed"]
    assert fixed["status"] == "below" and fixed["not_reached"] == ["T1", "T2"]
    assert fixed["outcome"]["gap"] == pytest.approx(0.01)
    assert summary["one_layer_fixed"]["status"] == "not run" and summary["one_layer_fixed"]["outcome"] is None


def test_final_accuracy_equals_one_unchunked_batch():
    task = build_task("birth", BirthConfig(seq_len=12, fixed_triggers=True, head_only_loss=False))
    model = build_transformer(
        full_config(d_vocab=65, n_ctx=12, n_layers=1, d_model=16), generator=torch.Generator().manual_seed(0)
    )
    got = scale.final_accuracy(model, task, 10, seed=3, chunk=3)
    batch = task.eval_batch(10, generator=torch.Generator().manual_seed(1003))
    with torch.no_grad():
        want = task.batch_metrics(model(batch.tokens), batch)
    assert got["icl_acc"] == pytest.approx(want["icl_acc"], abs=1e-6)
    assert got["n_icl_positions"] == int((batch.info["counter"] >= 2).sum()) > 0


def test_train_cell_record_is_deterministic_json():
    kw = {
        "n_layers": 2,
        "fixed_triggers": False,
        "d_model": 8,
        "seq_len": 8,
        "batch_size": 2,
        "steps": 3,
        "curve_points": 3,
        "curve_sequences": 4,
        "final_sequences": 4,
    }
    a, b = scale.train_cell(**kw), scale.train_cell(**kw)
    assert json.loads(json.dumps(a))["config"]["steps"] == 3 and a["curve"]["step"] == [0, 1, 2, 3]
    assert a["final"] == b["final"] and a["curve"] == b["curve"]
    # where it ran and with what, in every record
    assert a["device"] == "cpu" and a["software"]["torch"] == torch.__version__
    assert set(a["software"]) == {"python", "torch", "transformer_lens", "backend"}


def test_committed_rules_cover_the_ladder_statements():
    rules = scale.load_rules(DATA / "birth_rules.json")
    assert tuple(s["key"] for s in rules["statements"]) == LADDER_KEYS
    rungs = rules["ladder"]["rungs"]
    sizes = [(r["d_model"], r["seq_len"], r["batch_size"], r["steps"]) for r in rungs]
    assert all(all(x <= y for x, y in zip(a, b)) for a, b in itertools.pairwise(sizes))  # each rung grows
    assert all(s["rule"]["kind"] in ("at_least", "within") and s["text"] for s in rules["statements"])


def test_page_ladder_numbers_come_from_the_records(tmp_path, monkeypatch):
    rules = tiny_rules()
    rec = lambda acc: {
        "final": {"icl_acc": acc, "n_icl_positions": 7},
        "wall_s": 90.0,
        "curve": {"step": [0, 2], "eval_icl_acc": [0.1, acc]},
    }
    records = {"T0/2l_fixed": rec(0.9871), "T1/2l_fixed": rec(0.9934), "T0/1l_random": rec(0.6512)}
    section = birth_page.ladder_section({"ladder": {"rules": rules, "records": records}})
    text = json.dumps([t.rows for t in section.tables])
    assert "0.9871" in text and "0.9934" in text and "0.651" in text and "1.5 min" in text
    assert section.findings["two_layer_fixed"] == "met" and section.findings["one_layer_random"] == "above"
    assert birth_page.ladder_section({}).skipped


def test_script_bad_input_exits_2_with_one_line(capsys):
    from mechmem_papers.birth.scripts import scale as module

    assert run_script(module.main, ["--statements", "nope"]) == 2
    assert run_script(module.main, ["--max-rung", "R9"]) == 2
    assert run_script(module.main, ["--no-run", "--record", "no/such/record.json"]) == 2
    assert run_script(module.main, ["--rung", "R9"]) == 2
    assert run_script(module.main, ["--rung", "R4", "--device", "tpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 5 and all(line.startswith("error: ") for line in err)
