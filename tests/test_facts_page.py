"""The memorisation plugin: the record is assembled from the committed data, `--page-only` rebuilds the committed
page from it, and the numbers on the page are the record's (checked against independent computations)."""

import importlib.util
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from mechmem.cli import run_script
from mechmem.errors import MechmemError
from mechmem.papers.memorisation.batched import Schedule
from mechmem.papers.memorisation.records import collect
from mechmem.papers.memorisation.spec import make_spec as spec
from mechmem.papers.memorisation.summary import toggle_effect
from mechmem.plugins import get_paper

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs" / "reproductions"


def _reproduce():
    module_spec = importlib.util.spec_from_file_location("reproduce", ROOT / "analyses" / "reproduce.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def record():
    return json.loads((DOCS / "data" / "memorisation.json").read_text())


def test_record_is_assembled_from_the_committed_files(record):
    fresh = collect(DOCS / "data", schedule=Schedule(max_epochs=150, patience=50).to_dict())
    assert json.loads(json.dumps(fresh)) == record


def test_page_only_regenerates_the_committed_page(tmp_path):
    docs = tmp_path / "docs"
    (docs / "data").mkdir(parents=True)
    shutil.copy(DOCS / "data" / "memorisation.json", docs / "data")
    shutil.copytree(DOCS / "prose", docs / "prose")
    assert _reproduce().main(["memorisation", "--page-only", "--docs", str(docs)]) == 0
    assert (docs / "memorisation.md").read_text() == (DOCS / "memorisation.md").read_text()
    figures = sorted(p.name for p in (docs / "figures").iterdir())
    assert figures == sorted(p.name for p in (DOCS / "figures").glob("memorisation_*.png"))


def _table_rows(page: str, first_header: str) -> list[list[str]]:
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_page_numbers_equal_the_record(record):
    page = (DOCS / "memorisation.md").read_text()
    variants = _table_rows(page, "mixing")
    assert len(variants) == len(record["table"]) == 54
    assert sorted(tuple(map(int, r[6:9])) for r in variants) == sorted(
        (r["any"], r["most"], r["all"]) for r in record["table"]
    )
    caps = {r["variant"]: r for r in record["constructions"]["results"]}  # noqa: F841  (names for reading)
    by = {(r["variant"], r["d"]): r for r in record["constructions"]["results"]}
    trained = next(r for r in _table_rows(page, "mode") if r[0] == "trained")
    assert trained[1:5] == [
        str(by["trained", 16]["1"]),
        str(by["trained", 16]["0.9"]),
        str(by["trained", 32]["1"]),
        str(by["trained", 32]["0.9"]),
    ]

    def a(mode, crit):  # the fixed-exponent fit, computed here independently of the library
        logs = [math.log(by[mode, d][crit] / (d * d / math.log(d))) for d in (16, 32)]
        return math.exp(sum(logs) / 2)

    ratio = a("trained", "0.9") / a("published_hand", "0.9")
    assert f"trained / published hand-coded at acc >= 0.9 {ratio:.1f}x" in page
    published = record["published"]["ratio_hand_coded"]["value"]
    assert f"[published {published}x]" in page
    fit = record["scaling_fits"]["2emb+mlp+bias/relu any"]
    assert (
        f"S = {fit['a_d2_over_lnd']:.2f} d^2 / ln d (free: {fit['power_b']:.2f} d^{fit['power_k']:.2f})"
        in page
    )


def test_toggle_effect_pairs_only_matched_variants():
    def rec(name, any_, **cfg):
        base = {
            "mixing": "2emb",
            "mlp": True,
            "norms": False,
            "mlp_residual": False,
            "bias": True,
            "act_fn": "relu",
        }
        return {"variant": name, "any": any_, "config": {**base, **cfg}}

    records = [
        rec("a", 100),
        rec("b", 150, mlp_residual=True),
        rec("c", 60, norms=True),
        rec("d", 50, norms=True, mlp_residual=True),
        rec("e", 40, mlp=False),
    ]
    effect = toggle_effect(records, "mlp_residual", True, False)
    assert (effect.pairs, effect.better, effect.diff) == (2, 1, (-10, 50))
    assert effect.pct == pytest.approx((-100 / 6, 50.0))
    assert (
        toggle_effect(records, "mlp", True, False).pairs == 2
    )  # a and b pair with e (same mixing, norms, bias)


def test_spec_and_script_errors(capsys):
    assert get_paper("memorisation").variants[0] == "committed"
    assert (
        spec("quick", {}).tag == "quick"
        and spec("table", {"ds": "16,32", "max_epochs": "20"}).max_epochs == 20
    )
    with pytest.raises(MechmemError):
        spec("nope", {})
    with pytest.raises(MechmemError):
        spec("table", {"epochs": "3"})
    with pytest.raises(MechmemError):
        spec("constructions", {"modes": "trained,bogus"})
    assert run_script(_reproduce().main, ["memorisation", "--variant", "nope"]) == 2
    assert re.search(r"error: .*unknown variant", capsys.readouterr().err)


@pytest.mark.slow
def test_quick_variant_end_to_end(tmp_path):
    """The quick variant trains every experiment at toy sizes and its page renders (minutes: slow)."""
    paper = get_paper("memorisation")
    record = paper.run(spec("quick", {"data": str(tmp_path / "data")}), lambda line: None)
    assert len(record["table"]) == 54 and record["constructions"]["tag"] == "quick"
    report = paper.page(json.loads(json.dumps(record)))
    assert report.section("variants").tables[0].rows


def test_longer_schedules_are_shown_beside_the_base_ones(record):
    # Each variant's row carries the Any / Most / All of its longest other schedule, with that schedule named.
    page = (DOCS / "memorisation.md").read_text()
    rows = {tuple(r[:6]): r for r in _table_rows(page, "mixing")}
    d = record["table"][0]["d"]
    longest = {}
    for r in sorted(record["other_schedules"], key=lambda r: r["schedule"]["max_epochs"]):
        if r["d"] == d and r["schedule"]["target_acc"] == 1.0:
            longest[r["variant"]] = r
    assert longest, "the committed data has records of longer schedules"
    for r in longest.values():
        c = r["config"]
        key = (
            c["mixing"],
            "yes" if c["mlp"] else "-",
            "yes" if c["norms"] else "-",
            ("yes" if c["mlp_residual"] else "-") if c["mlp"] else "",
            "yes" if c["bias"] else "-",
            c["act_fn"] if c["mlp"] else "",
        )
        row = rows[key]
        assert row[10] == f"{r['schedule']['max_epochs']:,} / {r['schedule']['patience']:,}"
        assert row[11] == f"{r['any']} / {r['most']} / {r['all']}"
    assert "memorisation_variants-convergence.png" in page
