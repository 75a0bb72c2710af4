"""The birth plugin end to end on a tiny scale: run -> record -> page, the page again from the record alone,
every number on the page equal to the record's, and no result typed into the page code."""

import ast
import copy
import json
import re
import statistics
from pathlib import Path

import pytest
from helpers import ROOT, load_script

from mechmem.cli import run_script
from mechmem.config import Preset
from mechmem.plugins import get_paper
from mechmem.report.document import page_markdown, write_page
from mechmem.tasks.birth.models import simplified_config
from mechmem.tasks.birth.task import BirthConfig
from mechmem.training import TrainConfig
from mechmem_papers.birth import page as birth_page
from mechmem_papers.birth import run as reproduce
from mechmem_papers.birth import statements
from mechmem_papers.birth.experiments import SCALES, Scale

TINY = Scale(
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


@pytest.fixture(scope="module")
def tiny_record(tmp_path_factory):
    """A record of the tiny suite (freezing and ffn runs,
    a tiny preset), written by `analyses/reproduce.py`."""
    tmp = tmp_path_factory.mktemp("birth")
    preset = Preset(
        simplified_config(d_vocab=65, n_ctx=16, d_model=16, freeze_embeddings=True, freeze_unembedding=True),
        BirthConfig(seq_len=16, n_triggers=2, fixed_triggers=True),
        TrainConfig(
            steps=4, batch_size=4, lr=0.1, optimizer="sgd", momentum=0.9, eval_every=2, eval_samples=8
        ),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(SCALES, "quick", TINY)
        mp.setattr(reproduce, "get_preset", lambda task, name: preset)
        docs = tmp / "docs"
        args = [
            "birth",
            "--variant",
            "quick",
            "--docs",
            str(docs),
            "--set",
            "only=freezing,ffn",
            "--set",
            "speed=0",
            "--set",
            f"runs={tmp / 'runs'}",
            "--set",
            f"references={ROOT / 'docs/reproductions/data'}",
        ]
        assert load_script("reproduce").main(args) == 0
    return docs


def test_plugin_is_registered():
    paper = get_paper("birth")
    assert (
        paper.variants[0] == "quick"
        and "birth" in paper.tasks
        and paper.page is birth_page.page
        and paper.run is reproduce.run
    )


def test_page_only_rebuilds_the_same_page(tiny_record):
    md = tiny_record / "birth.md"
    first = md.read_text()
    md.unlink()
    assert load_script("reproduce").main(["birth", "--page-only", "--docs", str(tiny_record)]) == 0
    assert md.read_text() == first
    for name in ("preset-training", "training-curves", "training-attention", "freezing-curves", "ffn-curves"):
        assert any(p.name.startswith(f"birth_{name}") for p in (tiny_record / "figures").iterdir()), name


def test_page_numbers_equal_the_record(tiny_record):
    record = json.loads((tiny_record / "data" / "birth.json").read_text())
    text = (tiny_record / "birth.md").read_text()
    fmt = birth_page.fmt
    judged = [s for s in record["statements"] if s["outcome"] is not None]
    ladder = set(statements.LADDER_KEYS)
    assert judged and all(
        f"| {s['outcome']} | {'yes' if s['holds'] else 'no'} |" in text
        for s in judged
        if s["key"] not in ladder
    )
    # the band rules written first stay on the page beside the claims as written, with their outcomes
    assert all(s["outcome"] in text for s in judged if s["key"] in ladder)
    section3 = statements.load_published()["section3_as_written"]
    for claim in birth_page.section3_claims(record):
        for cell in claim["cells"]:
            curve = [
                v
                for v in record["ladder"]["records"][f"{cell['rung']}/" + _cell_name(cell)]["curve"][
                    "eval_icl_acc"
                ]
                if v is not None
            ][-section3["plateau_k"] :]
            final = record["ladder"]["records"][f"{cell['rung']}/" + _cell_name(cell)]["final"]["icl_acc"]
            assert (
                f"{final:.3f} ({cell['verdict']}; the curve's plateau {sum(curve) / len(curve):.3f}," in text
            )
    for entry in record["runs"].values():
        row = next(
            line for line in text.splitlines() if line.startswith(f"| {entry['label']} | {entry['group']}")
        )
        assert all(
            fmt(entry["final"][k]) in row for k in ("icl_acc", "eval_icl_acc", "wo2_recall", "wk2_recall")
        )
    preset, authors = record["preset"], record["authors_code"]["results"]
    row = next(line for line in text.splitlines() if line.startswith("| W_K^1 recall, first 64 |"))
    needed = record["published"]["preset_targets"]["needed"]["wk1_recall_64"]
    ours, theirs = fmt(preset["final"]["wk1_recall_64"]), fmt(authors["wk1_recall_64"])
    assert row == f"| W_K^1 recall, first 64 | {ours} | {theirs} | >= {needed} |"
    layer0 = preset["heads"]["layers"][0]
    assert f"| 0 | {fmt(layer0['previous_token_random'])} / {fmt(layer0['previous_token_task'])} |" in text
    assert f"{record['training_s'] / 60:.1f} min" in text
    assert "Not rerun in this record: " in text and record["not_run"][0]["label"] in text


def _cell_name(cell):
    return f"{cell['model']['n_layers']}l_{'fixed' if cell['model']['fixed_triggers'] else 'random'}"


def test_section3_is_judged_as_written_once_per_claim():
    """'over 95%' is > 0.95 (no band), the one-layer sentence is one claim, and the spread margin decides."""
    claims = statements.load_published()["section3_as_written"]["claims"]
    keys = [c["key"] for c in claims]
    assert len(keys) == len(set(keys)) == 3
    random2 = next(c for c in claims if c["published"] == "over 95%")
    assert random2["kind"] == "above" and random2["threshold"] == 0.95
    margin = 0.03
    assert statements.level_verdict(random2, 0.99, margin) == "holds"
    assert statements.level_verdict(random2, 0.93, margin) == statements.WITHIN_SPREAD  # the old band's pass
    assert statements.level_verdict(random2, 0.9, margin) == "fails"  # 0.05 below: beyond the margin
    around = {"kind": "around", "target": 0.55, "tolerance": 0.05}
    assert statements.level_verdict(around, 0.55, margin) == "holds"
    assert statements.level_verdict(around, 0.505, margin) == statements.WITHIN_SPREAD
    assert statements.level_verdict(around, 0.4, margin) == "fails"
    assert statements.plateau([0.1, None, 0.2, 0.4, 0.6], 3) == pytest.approx(0.4)
    # a claim over two cells: both must hold; one failure fails it; a pass beside a near one is within spread
    rungs = [{"name": "R0", "d_model": 8, "seq_len": 8, "batch_size": 2, "steps": 1}]
    section3 = {
        "plateau_k": 1,
        "margin": margin,
        "claims": [{**around, "key": "x", "cells": [{"a": 0}, {"a": 1}]}],
    }
    values = {0: 0.55, 1: 0.505}
    cell = lambda rung, model: {"curve": {"eval_icl_acc": [0.55]}, "final": {"icl_acc": values[model["a"]]}}
    assert statements.judge_as_written(section3, rungs, cell)[0]["verdict"] == statements.WITHIN_SPREAD
    values[1] = 0.3
    judged = statements.judge_as_written(section3, rungs, cell)[0]
    assert judged["verdict"] == "fails"  # judged on the fresh sequences ...
    assert judged["verdict_curve"] == "holds"  # ... while the curve's plateau, shown beside, would pass it


def test_published_and_authors_values_come_from_the_record(tiny_record):
    record = json.loads((tiny_record / "data" / "birth.json").read_text())
    changed = copy.deepcopy(record)
    changed["authors_code"]["results"]["wk1_recall"] = 0.4321
    changed["published"]["preset_targets"]["needed"]["icl_acc"] = 0.8765
    changed["statements"][0].update(published="about 12%", rule="ours > 0.1234")
    changed["speed"] = {
        "seq_len": 8,
        "n_triggers": 2,
        "fixed_triggers": True,
        "batch": 4,
        "threads": 1,
        "vectorised_per_s": 1000.0,
        "loop_per_s": 10.0,
        "ratio": 100.0,
    }
    text = page_markdown(birth_page.page(changed))
    assert all(s in text for s in ("0.432", ">= 0.8765", "about 12%", "ours > 0.1234", "**100x**"))


def _numbers_in_code(path: Path) -> tuple[set, list[str]]:
    tree = ast.parse(path.read_text())
    numbers = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) in (int, float)
    }
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return numbers, [s for s in strings if re.search(r"\d\.\d|\d+%", s)]


@pytest.mark.parametrize("module", [birth_page, statements])
def test_no_result_numbers_in_page_code(module):
    numbers, decimals = _numbers_in_code(Path(module.__file__))
    assert numbers <= {0, 1, 2, 60}, numbers  # indices and minutes; thresholds and results come from data
    assert not decimals, decimals  # e.g. the authors' code "0.99 / 0.59" must come from the data file


def test_bad_options_exit_2_with_one_line(tmp_path, capsys):
    main = load_script("reproduce").main
    assert run_script(main, ["birth", "--set", "only=nope", "--docs", str(tmp_path)]) == 2
    assert run_script(main, ["birth", "--variant", "huge", "--docs", str(tmp_path)]) == 2
    assert run_script(main, ["birth", "--set", "colour=red", "--docs", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)


def test_committed_page_is_the_committed_record_rendered(tmp_path):
    """docs/reproductions/birth.md is exactly what `--page-only`
    makes of docs/reproductions/data/birth.json."""
    docs = ROOT / "docs" / "reproductions"
    record = birth_page.attach_references(
        json.loads((docs / "data" / "birth.json").read_text()), docs / "data"
    )
    md = write_page(birth_page.page(record), tmp_path / "birth.md", prose=docs / "prose" / "birth.md")
    assert md.read_text() == (docs / "birth.md").read_text()
    assert {p.name for p in (tmp_path / "figures").iterdir()} <= {
        p.name for p in (docs / "figures").iterdir()
    }


def test_margin_readings_are_computed_from_the_spread_file(tmp_path):
    """The readings quoted beside the margin are the spread file's, computed on the page (range and sample sd
    of the small batches), not text of published.json; without the file the page says it is missing."""
    data = ROOT / "docs" / "reproductions" / "data"
    record = json.loads((data / "birth.json").read_text())
    readings = json.loads((data / "birth_eval_spread.json").read_text())
    assert "eval_spread" not in record and birth_page.attach_spread(record, tmp_path) is record
    assert "not beside this record" in birth_page.spread_text(record)
    margin_source = statements.load_published()["section3_as_written"]["margin_source"]
    assert not re.search(r"\d\.\d", margin_source)  # no reading written as text
    batches = list(readings["other_batches_128"].values())
    text = birth_page.spread_text(birth_page.attach_spread(record, data))
    assert f"read {readings['final_batch_1024_seed1000']:.3f}" in text
    assert f"sample {readings['fresh_4096_seed5000']:.3f}" in text
    assert (
        f"{len(batches)} other 128-sequence batches spread over {min(batches):.2f} .. {max(batches):.2f}"
        in text
    )
    assert f"sample sd {statistics.stdev(batches):.3f}" in text
    moved = {**readings, "fresh_4096_seed5000": 0.123, "other_batches_128": {"3": 0.5, "4": 0.7}}
    (tmp_path / "birth_eval_spread.json").write_text(json.dumps(moved))
    text = birth_page.spread_text(birth_page.attach_spread(record, tmp_path))
    assert "sample 0.123" in text and "2 other 128-sequence batches spread over 0.50 .. 0.70" in text


def test_rules_committed_with_their_results_are_named_on_the_page():
    """A rule whose 'since' says it was committed with its first results is listed as not fixed in advance."""
    record = json.loads((ROOT / "docs" / "reproductions" / "data" / "birth.json").read_text())
    late = [
        s["key"] for s in statements.load_published()["statements"] if "with the first results" in s["since"]
    ]
    assert late  # fewer_triggers_slower, random_slower
    line = next(x for x in birth_page.statements_section(record).lines if x.startswith("Not fixed before"))
    assert all(f"`{k}`" in line for k in late)
    changed = copy.deepcopy(record)
    for s in changed["statements"]:
        s["since"] = "abc1234"
    assert not any(x.startswith("Not fixed") for x in birth_page.statements_section(changed).lines)


def test_a_rising_curve_does_not_pass_a_level_claim_on_entering_its_band():
    """The plateau rule: a curve still climbing through the 'around 55%' band is 'not settled', while the same
    level on a flat curve holds; a rising curve already clear above an 'over' bar keeps its pass."""
    margin = 0.03
    around = {"kind": "around", "target": 0.55, "tolerance": 0.05, "key": "one", "cells": [{"a": 0}]}
    above = {"kind": "above", "threshold": 0.95, "key": "two", "cells": [{"a": 0}]}
    rungs = [{"name": "R0", "d_model": 8, "seq_len": 8, "batch_size": 2, "steps": 1}]
    rising = [0.2 + 0.35 * i / 15 for i in range(16)]  # ends at 0.55: inside the band, still climbing
    flat = [0.55] * 16
    curves = {"curve": rising}

    def cell(rung, model):
        return {"curve": {"eval_icl_acc": curves["curve"]}, "final": {"icl_acc": curves["curve"][-1]}}

    section3 = {"plateau_k": 1, "margin": margin, "claims": [around]}
    judged = statements.judge_as_written(section3, rungs, cell)[0]
    assert judged["verdict_plateau_only"] == "holds"  # the plateau alone would pass it
    assert judged["verdict"] == statements.NOT_SETTLED
    curves["curve"] = flat
    assert statements.judge_as_written(section3, rungs, cell)[0]["verdict"] == "holds"
    curves["curve"] = [v + 0.5 for v in rising]  # 0.7 .. 1.05, rising, far above 0.95 at the end
    section3["claims"] = [above]
    assert statements.judge_as_written(section3, rungs, cell)[0]["verdict"] == "holds"
    assert statements.settled_verdict(above, "within spread", 0.1, margin) == statements.NOT_SETTLED
    assert statements.settled_verdict(around, "fails", -0.1, margin) == statements.NOT_SETTLED
    assert statements.settled_verdict(around, "fails", 0.01, margin) == "fails"


def test_the_page_says_whether_the_paper_sizes_were_run():
    record = json.loads((ROOT / "docs" / "reproductions" / "data" / "birth.json").read_text())
    cells = record["ladder"]["records"]
    at_paper = sorted(
        k for k, r in cells.items() if r["config"]["d_model"] == 128 and r["config"]["seq_len"] == 256
    )
    line = birth_page.sizes_line(record)
    assert f"{len(at_paper)} run(s) of this record are at the paper's sizes" in line and at_paper
    assert all(key in line for key in at_paper)
    smaller = copy.deepcopy(record)
    for key in at_paper:
        del smaller["ladder"]["records"][key]
    assert "are not yet done" in birth_page.sizes_line(smaller)
    smaller["scale"].update(d_model=128, seq_len=256, batch_size=512)
    assert "are not yet done" not in birth_page.sizes_line(smaller)
