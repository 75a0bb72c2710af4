"""The memorisation plugin: the record is assembled from the committed data, `--page-only` rebuilds the
committed page from it, and the numbers on the page are the record's (checked against independent
computations)."""

import json
import math
import re
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from helpers import ROOT, assert_records_close, load_script

from mechmem.cli import run_script
from mechmem.errors import MechmemError
from mechmem.plugins import get_paper
from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.records import collect
from mechmem_papers.memorisation.spec import make_spec as spec
from mechmem_papers.memorisation.summary import toggle_effect

DOCS = ROOT / "docs" / "reproductions"


@pytest.fixture(scope="module")
def record():
    return json.loads((DOCS / "data" / "memorisation.json").read_text())


def test_record_is_assembled_from_the_committed_files(record):
    """Counts and names exactly; the fitted floats (np.polyfit) to 1e-9 relative, since their last digits
    depend on the machine's BLAS, and to 1e-12 absolute for fits that are zero up to rounding (the exponent
    of a flat series comes out as +-1e-15)."""
    fresh = collect(DOCS / "data", schedule=Schedule(max_epochs=150, patience=50).to_dict())
    try:
        assert_records_close(json.loads(json.dumps(fresh)), record, rel=1e-9, abs=1e-12)
    except AssertionError as exc:  # e.g. trainings appended to facts_trials.jsonl without collecting again
        raise AssertionError(
            f"{exc}\nrun `mechmem reproduce memorisation` to collect the record again"
        ) from None


def test_page_only_regenerates_the_committed_page(tmp_path):
    docs = tmp_path / "docs"
    (docs / "data").mkdir(parents=True)
    shutil.copy(DOCS / "data" / "memorisation.json", docs / "data")
    shutil.copytree(DOCS / "prose", docs / "prose")
    assert load_script("reproduce").main(["memorisation", "--page-only", "--docs", str(docs)]) == 0
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


def _variants_rows(page: str) -> list[list[str]]:
    return _table_rows(page.split("## Results: the 54 variants")[1], "mixing")


def test_page_numbers_equal_the_record(record):
    page = (DOCS / "memorisation.md").read_text()
    variants = _variants_rows(page)
    assert len(variants) == len(record["table"]) == 54
    assert sorted(tuple(map(int, r[6:9])) for r in variants) == sorted(
        (r["any"], r["most"], r["all"]) for r in record["table"]
    )
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
    g = record["constructions"]["grid"]
    setup = f"S in 1..{g['s_values'][-1]} x top_fraction 0.00..{g['top_fractions'][-1]:.2f}"
    assert f"trained / hand-coded (published) over d = 16..32 ({setup}, " in page
    assert f"): acc>=0.9 {ratio:.1f}x [the authors'" in page
    published = record["published"]["ratio_hand_coded"]["value"]
    low, high = record["published"]["construction_d_range"]["value"]
    assert f"published {published}x is over d = {low}..{high}" in page
    # the authors' own logs over the same d, fitted here by hand: a = geometric mean of S ln d / d^2
    logs = record["published"]["construction_authors_any"]["value"]
    theirs = math.sqrt(
        math.prod(logs["trained"]["0.9"][d] / logs["published_hand"]["0.9"][d] for d in ("16", "32"))
    )
    assert f"acc>=0.9 {ratio:.1f}x [the authors' logs over the same d: {theirs:.2f}x]" in page
    # the authors' fit form c d^k / ln d over two points: k = slope of ln S + ln ln d against ln d
    s16, s32 = by["trained", 16]["0.9"], by["trained", 32]["0.9"]
    k = (math.log(s32 * math.log(32)) - math.log(s16 * math.log(16))) / math.log(2)
    assert f"trained {k:.2f} (plain slope {math.log(s32 / s16) / math.log(2):.2f}; d = 16..32)" in page
    fit = record["scaling_fits"]["2emb+mlp+bias/relu any"]
    assert (
        f"S = {fit['a_d2_over_lnd']:.2f} d^2 / ln d (free: {fit['power_b']:.2f} d^{fit['power_k']:.2f})"
        in page
    )


def test_published_construction_range_is_read_from_published_json(record):
    """The d range of the published fits is the authors' logs' range, and the page prints whatever
    published.json holds (a changed range shows up in both sentences that name it)."""
    from mechmem_papers.memorisation import page_constructions as pc

    pub = record["published"]
    logs = pub["construction_authors_any"]["value"]
    ds = sorted({int(d) for model in logs.values() for crit in model.values() for d in crit})
    assert pub["construction_d_range"]["value"] == [ds[0], ds[-1]]
    moved = {**record, "published": {**pub, "construction_d_range": {"value": [8, 512]}}}
    lines = " ".join(pc.constructions_headline(moved))
    assert "over d = 8..512" in lines and f"over d = {ds[0]}..{ds[-1]}" not in lines


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
    assert run_script(load_script("reproduce").main, ["memorisation", "--variant", "nope"]) == 2
    assert re.search(r"error: .*unknown variant", capsys.readouterr().err)


@pytest.mark.slow
def test_quick_variant_end_to_end(tmp_path):
    """The quick variant trains every experiment at toy sizes and its page renders (minutes: slow)."""
    paper = get_paper("memorisation")
    record = paper.run(spec("quick", {"data": str(tmp_path / "data")}), lambda line: None)
    assert len(record["table"]) == 54 and record["constructions"]["tag"] == "quick"
    report = paper.page(json.loads(json.dumps(record)))
    assert report.section("variants").tables[0].rows


def test_searches_still_running_show_their_ended_criteria_beside_e7():
    """A scaling cell at E7's schedule with trainings but no record: one row, each criterion's capacity where
    its search has ended and "running" where not, compared with E7 only where Any has ended."""
    from mechmem_papers.memorisation.page import commands_section, facts_headline, scaling_section

    base = json.loads((DOCS / "data" / "memorisation.json").read_text())
    e7 = {v: {p["d"]: p["any"] for p in ps} for v, ps in base["published"]["e7_any"]["models"].items()}
    template = next(r for r in base["scaling"] if r["d"] == 16 and r["variant"] == "2emb+mlp/relu")
    schedule = dict(template["schedule"], max_epochs=100_000, patience=5_000)
    finished = dict(
        template, d=32, schedule=schedule, any=3000, most=None, all=None, trainings=4, seconds=9.0
    )
    finished["config"] = dict(template["config"], n_in=64)
    running = dict(finished, any=None, most=2500)
    pub = e7[template["variant"]][32]
    for row, any_text, most_text, vs, headline in (
        (finished, "3000", "running", f"{100 * (3000 / pub - 1):+.0f}%", f"d = 32: 3000 [E7 {pub}, "),
        (running, "running", "2500", "-", "d = 32: search running (4 trainings so far)"),
    ):
        record = dict(base, scaling_running=[row])
        assert headline in " ".join(facts_headline(record))
        table = scaling_section(record).tables[0]
        (got,) = [r for r in table.rows if "trainings so far" in str(r[-1])]
        assert [str(x) for x in got[2:6]] == ["100,000 / 5,000 (E7)", any_text, most_text, "running"]
        assert got[8] == vs and got[9] == "9 (4 trainings so far)"
        assert "running: that criterion's search has not ended" in table.caption
        # The command that runs (and resumes) it, marked as still running.
        (line,) = [x for x in commands_section(record).lines if "still running" in x]
        assert "scaling --variant nb --ds 32 --max-epochs 100000 --patience 5000`" in line
    assert not [x for x in commands_section(dict(base, scaling_running=[])).lines if "still running" in x]


def test_e7_fits_use_the_finished_sizes_at_e7_schedule_beside_the_authors_same_d():
    """With two finished sizes at E7's schedule a model gets its two-point exponent beside the authors' E7
    over the same d and the secant exponent of d^2 / ln d (computed here by hand); a model whose second size
    still runs, or that ran it only at a capped schedule, gets none."""
    from mechmem_papers.memorisation.e7 import e7_fits
    from mechmem_papers.memorisation.page import facts_headline, scaling_section

    base = json.loads((DOCS / "data" / "memorisation.json").read_text())
    e7 = {v: {p["d"]: p["any"] for p in ps} for v, ps in base["published"]["e7_any"]["models"].items()}
    simple, full = "2emb+mlp/relu", "attn+mlp+norms+bias+res/gelu"
    templates = {
        v: next(r for r in base["scaling"] if r["d"] == 16 and r["variant"] == v) for v in (simple, full)
    }

    def row(variant, d, any_, epochs):
        t = templates[variant]
        return dict(
            t, d=d, any=any_, schedule=dict(t["schedule"], max_epochs=epochs, patience=5_000), trainings=3
        )

    rows = [row(simple, 16, 800, 50_000), row(simple, 32, 3000, 100_000), row(full, 16, 700, 50_000)]
    record = dict(base, scaling=[], scaling_other=rows, scaling_running=[row(full, 32, None, 100_000)])
    (fit,) = e7_fits(record)
    k = math.log(3000 / 800) / math.log(2)
    k_e7 = math.log(e7[simple][32] / e7[simple][16]) / math.log(2)
    law = 2 - math.log(math.log(32) / math.log(16)) / math.log(2)
    a = math.sqrt(800 / (16**2 / math.log(16)) * 3000 / (32**2 / math.log(32)))
    assert fit.model == simple and fit.ours.d == [16, 32]
    assert fit.ours.k == pytest.approx(k) and fit.authors.k == pytest.approx(k_e7)
    assert fit.ours.a == pytest.approx(a) and fit.law_exponent == pytest.approx(law)
    headline = " ".join(facts_headline(record))
    assert (
        f"free exponent over d = 16 .. 32: {k:.2f} [E7 {k_e7:.2f}; d^2 / ln d itself {law:.2f}]" in headline
    )
    assert headline.count("free exponent") == 1
    assert any(
        line.startswith("At the authors' E7 schedule, simple model") for line in scaling_section(record).lines
    )
    # The same size at a capped schedule is no E7 point.
    capped = dict(record, scaling_other=[rows[0], row(simple, 32, 3000, 5_000), rows[2]])
    assert e7_fits(capped) == []


def test_longer_schedules_are_shown_beside_the_base_ones(record):
    # Each variant's row carries the Any / Most / All of its longest other schedule, with that schedule named.
    page = (DOCS / "memorisation.md").read_text()
    rows = {tuple(r[:6]): r for r in _variants_rows(page)}
    d = record["table"][0]["d"]
    longest, repeats = {}, {}
    for r in sorted(record["other_schedules"], key=lambda r: r["schedule"]["max_epochs"]):
        if r["d"] == d and r["schedule"]["target_acc"] == 1.0:
            longest[r["variant"]] = r
    for r in record["other_schedules"]:
        if r["d"] == d and r["schedule"] == longest[r["variant"]]["schedule"]:
            repeats.setdefault(r["variant"], []).append(r)
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
        rs = repeats[r["variant"]]
        if len(rs) == 1:
            assert row[11] == f"{r['any']} / {r['most']} / {r['all']}"
        else:  # mean +- sample sd over the repeats
            parts = [[float(x) for x in p.split(" +- ")] for p in row[11].split(" / ")]
            for (m, sd), k in zip(parts, ("any", "most", "all")):
                values = [x[k] for x in rs]
                assert m == pytest.approx(statistics.mean(values), abs=0.5)
                assert sd == pytest.approx(statistics.stdev(values), abs=0.5)
    assert "memorisation_variants-convergence.png" in page


def test_convergence_figure_draws_each_variant_in_its_mixing_column(record):
    """Every variant that ran at two or more caps is one line in its mixing's column, Any above and All
    below, with the record's capacities at each cap (read here from the table rows directly)."""
    from mechmem_papers.memorisation.figures import plot_convergence
    from mechmem_papers.memorisation.page import convergence_series

    d, acc = record["table"][0]["d"], record["schedule"]["target_acc"]
    rows = [r for r in record["table"] + record["other_schedules"] if r["d"] == d] + [record["anchor"]]
    caps: dict[str, dict[int, dict]] = {}
    for r in rows:
        if r.get("repeat", 0) == 0 and r["schedule"]["target_acc"] == acc:
            caps.setdefault(r["variant"], {})[r["schedule"]["max_epochs"]] = r
    expected = {v: c for v, c in caps.items() if len(c) >= 2}
    series = convergence_series(record)
    assert sorted(s.variant for s in series) == sorted(expected)
    for s in series:
        by_cap = expected[s.variant]
        assert s.epochs == tuple(sorted(by_cap))
        assert s.any == tuple(by_cap[e]["any"] for e in s.epochs)
        assert s.all == tuple(by_cap[e]["all"] for e in s.epochs)
        assert (s.mixing, s.mlp, s.norms) == tuple(
            by_cap[s.epochs[0]]["config"][k] for k in ("mixing", "mlp", "norms")
        )

    fig = plot_convergence(series, published=208.0)
    try:
        for c, ax in enumerate(fig.axes[:3]):
            mixing = ("2emb", "uniform", "attn")[c]
            mine = sorted(s.any for s in series if s.mixing == mixing)
            drawn = sorted(
                tuple(int(y) for y in line.get_ydata())
                for line in ax.lines
                if len(line.get_ydata()) > 1 and line.get_linestyle() == "-"
            )
            assert drawn == mine, mixing
            assert fig.axes[c + 3].get_title() == f"{mixing}: All"
            assert len([ln for ln in fig.axes[c + 3].lines if ln.get_linestyle() == "--"]) == len(mine)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


# --- published values: every value carries its source and the exact text it is read from ---


def _package_json(package: str) -> dict:
    from importlib.resources import files

    return json.loads(files(package).joinpath("published.json").read_text(encoding="utf-8"))


def _sourced(entry: dict) -> bool:
    return bool(str(entry.get("source", "")).strip()) and bool(str(entry.get("quote", "")).strip())


def test_every_published_value_has_a_source_and_a_quote():
    memo = _package_json("mechmem_papers.memorisation")
    values = {k: v for k, v in memo.items() if isinstance(v, dict) and "value" in v}
    values |= {f"toggles.{k}": v for k, v in memo["toggles"].items()}
    assert len(values) >= 15 and all(_sourced(v) for v in values.values()), [
        k for k, v in values.items() if not _sourced(v)
    ]
    rows = memo["table_b1"]["rows"]
    assert len(rows) == 54 and _sourced(memo["table_b1"]) and all(_sourced(r) for r in rows)
    for row in rows:  # the cited LaTeX row holds exactly the twelve numbers stored for it, in order
        cells = [re.sub(r"\D", "", c) for c in row["quote"].split("&")[6:]]
        assert [int(c) for c in cells if c] == row["any"] + row["most"] + row["all"]
    for points in memo["e7_any"]["models"].values():
        assert all(_sourced(p) and f'"max_facts": {p["any"]}' in p["quote"] for p in points)

    birth = _package_json("mechmem_papers.birth")
    assert birth["statements"] and all(s["where"] and s["quote"].strip() for s in birth["statements"])
    assert _sourced(birth["preset_targets"]) and _sourced(birth["speed_target"])

    perm = _package_json("mechmem_papers.permutation")["values"]
    assert perm and all(_sourced(v) for v in perm.values())
    assert perm["task2_probe_recall_p"]["value"] == 0.9985  # the value as given, not the rounded 0.998


def test_published_files_are_read_from_the_packages():
    from mechmem_papers.birth import statements
    from mechmem_papers.memorisation import records

    assert records.PUBLISHED.parent == Path(records.__file__).parent and records.PUBLISHED.exists()
    assert statements.PUBLISHED.parent == Path(statements.__file__).parent
    assert statements.load_published()["statements"]  # no path: the package file
    assert not (DOCS / "data" / "memorisation_published.json").exists()
    assert not (DOCS / "data" / "birth_published.json").exists()


# --- Table B.1 comparisons ---


def test_compare_to_published_on_a_hand_example():
    from mechmem_papers.memorisation.page_published import b1_counts
    from mechmem_papers.memorisation.summary import compare_to_published

    a = compare_to_published(816, [664, 688, 736, 816])  # mean 726, range 664 - 816
    assert (a.mean, a.low, a.high) == (726, 664, 816)
    assert a.inside and not a.within_10 and a.rel == pytest.approx(90 / 726)
    b = compare_to_published(208, [208, 168, 224, 208])  # mean 202: +3%, inside
    assert b.mean == 202 and b.within_10 and b.inside
    c = compare_to_published(248, [208, 168, 224, 208])  # +23%, above the range
    assert not c.within_10 and not c.inside
    d = compare_to_published(110, [100, 100, 100, 100])  # exactly 10% above: within, but outside the range
    assert d.within_10 and not d.inside
    e = compare_to_published(100, [100, 100, 100, 100])
    assert e.within_10 and e.inside and e.rel == 0
    assert b1_counts([({}, {}, x) for x in (a, b, c, d, e)]) == (5, 3, 3)
    with pytest.raises(ValueError):
        compare_to_published(1, [])


def test_appendix_b_method_gives_back_the_published_ranges_from_table_b1():
    """Applied to the means of Table B.1's repeats, the pairing with the outlier left out (Appendix B's
    method) gives the absolute ranges Appendix B states; keeping the outlier does not (norms with an MLP)."""
    from mechmem_papers.memorisation.summary import published_records, toggle_effects

    memo = _package_json("mechmem_papers.memorisation")
    records = published_records(memo["table_b1"]["rows"])
    excluded = toggle_effects(records, exclude_outlier=True)
    kept = toggle_effects(records)

    def stated(quote):  # "learn 324 - 794 (60% - 373%)" or "learn -8 to 244 (...)" -> (324, 794)
        m = re.search(r"learn (-?\d+) (?:-|to) (-?\d+)", quote)
        return int(m.group(1)), int(m.group(2))

    for key in ("mlp", "2emb_vs_uniform", "mlp_residual", "gelu", "bias", "norms"):
        assert excluded[key].diff == pytest.approx(stated(memo["toggles"][key]["quote"]), abs=1e-9), key
    assert kept["norms"].diff[0] < 0 < stated(memo["toggles"]["norms"]["quote"])[0]
    no_mlp = {
        m: [r for r in records if r["config"]["mixing"] == m and not r["config"]["mlp"]]
        for m in ("2emb", "uniform", "attn")
    }
    gains = [
        next(r["any"] for r in rs if r["config"]["norms"])
        - next(r["any"] for r in rs if not r["config"]["norms"])
        for rs in no_mlp.values()
    ]
    assert (min(gains), max(gains)) == pytest.approx(stated(memo["norms_no_mlp"]["quote"]))


def test_table_b1_section_equals_an_independent_count(record):
    page = (DOCS / "memorisation.md").read_text()
    section = page.split("## Table B.1")[1].split("\n## ")[0]
    at_published = _table_rows(section, "mixing")
    capped = _table_rows(section, "capped: mixing")
    repeats_shown = []
    published = record["published"]["table_b1"]["rows"]
    assert len(at_published) + len(capped) == len(published) == 54
    d = record["table"][0]["d"]
    cells = record["table"] + [
        r for r in record["other_schedules"] if r["d"] == d and r["schedule"]["target_acc"] == 1.0
    ]
    longest = {}
    for r in sorted(cells, key=lambda r: r["schedule"]["max_epochs"]):
        if r.get("repeat", 0) == 0:
            longest[r["variant"]] = r
    within_pub = inside_pub = n_pub = within_first = inside_first = 0
    failed = set()
    for r in longest.values():
        c = r["config"]
        keys = (
            ("mixing", "mlp", "norms", "mlp_residual", "bias", "act_fn")
            if c["mlp"]
            else ("mixing", "mlp", "norms")
        )
        row = next(p for p in published if all(p.get(k) == c[k] for k in keys))
        mean = sum(row["any"]) / 4
        same = [x for x in cells if x["variant"] == r["variant"] and x["schedule"] == r["schedule"]]
        anys = [x["any"] for x in sorted(same, key=lambda x: x.get("repeat", 0))]  # in repeat order
        ours = sum(anys) / len(anys)  # every repeat of ours, read through their mean
        w, i = abs(ours - mean) <= 0.1 * mean, min(row["any"]) <= ours <= max(row["any"])
        if (r["schedule"]["max_epochs"], r["schedule"]["patience"]) == (50_000, 5_000):
            n_pub, within_pub, inside_pub = n_pub + 1, within_pub + w, inside_pub + i
            within_first += abs(r["any"] - mean) <= 0.1 * mean
            inside_first += min(row["any"]) <= r["any"] <= max(row["any"])
            repeats_shown.append(" / ".join(map(str, anys)))
            every_outside = all(not min(row["any"]) <= a <= max(row["any"]) for a in anys)
            far = abs(sum(anys) / len(anys) - mean) > 0.1 * mean
            failed |= {r["variant"]} if every_outside and far else set()
    assert len(at_published) == n_pub and all(r[9] == "50,000 / 5,000" for r in at_published)
    assert all(r[9] != "50,000 / 5,000" for r in capped)
    assert (
        f"Table B.1 at the published schedule (50,000 / 5,000 epochs per lr phase / patience): {n_pub} of the"
        f" 54 rows have run; of these {within_pub} are within 10% of the published mean and {inside_pub}"
        " inside the published range" in page
    )
    assert sorted(r[10] for r in at_published) == sorted(repeats_shown)
    assert sum(r[13] == "yes" for r in at_published) == within_pub
    assert sum(r[14] == "yes" for r in at_published) == inside_pub
    if any(" / " in shown for shown in repeats_shown):  # the reading of the first repeat alone, beside
        assert f"before the repeats ran) {within_first} are within 10% and {inside_first} inside" in page
    # the headline names exactly the rows that fail both tolerances
    listed = re.search(r"(\d+) Table B.1 rows? fails?: ([^;]*)\.\n", page)
    if failed:
        assert int(listed[1]) == len(failed) and {x.split(" ")[0] for x in listed[2].split("], ")} == failed
    else:
        assert listed is None
    # the published-schedule table is the page's first table
    first_table = next(line for line in page.splitlines() if line.startswith("| "))
    assert first_table.startswith("| mixing |") and "within 10%" in first_table


def test_best_and_ceiling_read_every_schedule(record):
    page = (DOCS / "memorisation.md").read_text()
    d = record["table"][0]["d"]
    cells = record["table"] + [r for r in record["other_schedules"] if r["d"] == d]
    best = max(r["any"] for r in cells)
    at_published = [
        r for r in cells if (r["schedule"]["max_epochs"], r["schedule"]["patience"]) == (50_000, 5_000)
    ]
    assert f"Best: {max(r['any'] for r in at_published)} facts (Any)" in page
    reached = page.split("reached by ", 1)[1].split(" |", 1)[0]  # the ceiling row's list of variants
    assert {r["variant"] for r in cells if r["any"] == best} <= {
        v.split(" at ")[0].strip() for v in reached.split(", ")
    }
    assert best > max(
        r["any"] for r in record["table"]
    )  # the committed data: a longer schedule beats the base
    assert "never reached" not in page


# --- the paper variant and the commands ---


def test_paper_variant_runs_the_e7_schedule_per_d():
    from mechmem_papers.memorisation.sweep import scaling_cells

    s = spec("paper", {})
    assert (s.max_epochs, s.patience, s.grow_epochs, s.ds) == (50_000, 5_000, True, (16, 32, 64, 128))
    e7 = _package_json("mechmem_papers.memorisation")["scaling_schedule"]["value"]
    base = Schedule(max_epochs=s.max_epochs, patience=s.patience)
    for model in ("nb", "full"):
        cells = scaling_cells(model, list(s.ds), 1, base, grow_epochs=s.grow_epochs)
        assert {c.config.d_model: c.schedule.max_epochs for c in cells} == {
            int(d): n for d, n in e7["max_epochs"].items()
        }
        assert {c.schedule.patience for c in cells} == {e7["patience"]}
    assert {c.schedule.max_epochs for c in scaling_cells("nb", [16, 32], 1, base)} == {50_000}
    assert spec("paper", {"grow_epochs": "0"}).grow_epochs is False
    with pytest.raises(MechmemError):
        spec("paper", {"grow_epochs": "maybe"})


def test_commands_name_exactly_the_schedules_of_the_data(record):
    page = (DOCS / "memorisation.md").read_text()
    commands = page.split("## Commands")[1].split("\n## ")[0]
    named = {(int(a), int(b)) for a, b in re.findall(r"--max-epochs (\d+) --patience (\d+)", commands)}
    every = record["table"] + record["other_schedules"] + record["scaling"] + record["scaling_other"]
    data = {(r["schedule"]["max_epochs"], r["schedule"]["patience"]) for r in every}
    data.add((record["anchor"]["schedule"]["max_epochs"], record["anchor"]["schedule"]["patience"]))
    assert named == data
    assert (
        f"`{record['benchmark']['source']}`" in commands
        and f"--rounds {record['benchmark']['rounds']}" in commands
    )


def test_collect_takes_a_schedule_per_d_for_the_scaling():
    base = Schedule(max_epochs=150, patience=50).to_dict()
    per_d = {16: Schedule(max_epochs=50_000, patience=5_000).to_dict(), 32: base}
    rec = collect(DOCS / "data", schedule=base, scaling_schedules=per_d)
    assert rec["scaling"] and all(r["schedule"] == per_d[r["d"]] for r in rec["scaling"])
    assert {(r["variant"], r["d"]) for r in rec["scaling"]} >= {("2emb+mlp/relu", 16), ("2emb+mlp/relu", 32)}
    shown = {(r["variant"], r["d"], r["schedule"]["max_epochs"]) for r in rec["scaling"]}
    assert not shown & {(r["variant"], r["d"], r["schedule"]["max_epochs"]) for r in rec["scaling_other"]}
    assert rec["table"] == collect(DOCS / "data", schedule=base)["table"]  # the table keeps the base schedule


def test_norms_without_mlp_verdict_is_the_records(record):
    # the published-schedule gains of the MLP-less norms pairs, against the published range, recomputed here
    page = (DOCS / "memorisation.md").read_text()
    d = record["table"][0]["d"]
    at = {
        r["variant"]: r["any"]
        for r in record["other_schedules"]
        if r["d"] == d and (r["schedule"]["max_epochs"], r["schedule"]["patience"]) == (50_000, 5_000)
    }
    lo, hi = record["published"]["norms_no_mlp"]["pct"]
    labels = {"2emb": "2Emb", "uniform": "uniform", "attn": "learned attention"}
    gains = {m: 100 * (at[m + "+norms"] - at[m]) / at[m] for m in labels if m in at and m + "+norms" in at}
    assert gains, "the committed data has the MLP-less pairs at the published schedule"
    line = next(
        x for x in page.splitlines() if x.startswith("- Norms without an MLP at the published schedule")
    )
    assert all(f"{labels[m]} {g:+.0f}%" in line for m, g in gains.items())
    inside = ", ".join(labels[m] for m, g in gains.items() if lo <= g <= hi)
    assert f"inside it {inside or 'none'}" in line
    below = [labels[m] for m, g in gains.items() if g < lo]
    assert ("below it " + ", ".join(below) in line) if below else "below it" not in line


def test_construction_numbers_carry_their_set_up_beside_the_authors(record):
    """Each construction row and the headline ratio of the hybrid name our initialisations and grid beside the
    authors' (read from the record), so a ratio is never shown without the set-up difference."""
    import copy

    from mechmem_papers.memorisation import page_constructions as pc

    g, pub = record["constructions"]["grid"], record["published"]
    for mode in ("trained", "rand_emb"):
        assert f"best of {g['n_inits']} inits (the authors: {pub['construction_inits']['value']})" in (
            pc.setup_of(record, mode)
        )
    for mode in ("published_hybrid", "published_hybrid_authors", "keyvalue_hybrid"):  # one U per setting
        assert "inits" not in pc.setup_of(record, mode) and "one U trained per" in pc.setup_of(record, mode)
    assert f"{g['authors_attempts']} draws per setting" in pc.setup_of(record, "published_hybrid_authors")
    hybrid = pc.setup_of(record, "published_hybrid")
    assert str(g["hybrid_s_values"]) in hybrid and pub["construction_hybrid_grid"]["value"] in hybrid
    assert "inits" not in pc.setup_of(record, "published_hand")
    headline = " ".join(pc.constructions_headline(record))
    assert f"({hybrid})" in headline
    changed = copy.deepcopy(record)
    changed["constructions"]["grid"]["n_inits"] = 11
    assert "best of 11 inits" in pc.setup_of(changed, "trained")


def test_trained_parameters_are_those_the_model_trains():
    """`trainable_parameters` against the built model's own parameter count, for all 54 variants."""
    from mechmem.models.facts import all_variants, build_facts_model
    from mechmem_papers.memorisation.bits import trainable_parameters

    for cfg in all_variants():
        model = build_facts_model(cfg, generator=torch.Generator().manual_seed(0))
        trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
        assert trainable_parameters(cfg.to_dict()) == trained, cfg.name


def test_stored_bits_bound_is_zero_at_chance_and_full_at_perfect_recall():
    from mechmem_papers.memorisation.bits import stored_bits

    for k in (2, 16, 64):
        assert stored_bits(100, k, 1.0) == pytest.approx(100 * math.log2(k))
        assert stored_bits(100, k, 1 / k) == pytest.approx(0.0, abs=1e-9)
        assert 0 < stored_bits(100, k, 0.9) < stored_bits(100, k, 1.0)


def test_bits_table_is_the_record_in_bits(record):
    """The page's bits table recomputed from the record's Any capacities: N log2 n_out / trained params."""
    rows = _table_rows((DOCS / "memorisation.md").read_text().split("## Capacity in bits")[1], "variant")
    configs = {r["variant"]: r["config"] for r in record["table"]}
    assert len(rows) == 54
    for variant, params, _, facts, ours, pub_mean, pub in rows:
        n_out = configs[variant]["n_out"]
        assert float(ours) == pytest.approx(float(facts) * math.log2(n_out) / int(params), abs=0.006)
        assert float(pub) == pytest.approx(float(pub_mean) * math.log2(n_out) / int(params), abs=0.02)


def test_construction_bits_table_is_the_record_in_bits(record):
    """Each row: Fano's bound at the recorded accuracy, over 5 d^2 weights (E1, E2: 2d x d; U: d x d)."""
    section = (DOCS / "memorisation.md").read_text().split("## Constructions in bits")[1]
    rows = _table_rows(section, "mode")
    assert len(rows) == sum(len(r["searches"]) for r in record["constructions"]["results"])
    for label, d, _, facts, acc, bits, weights, per_weight, trained, _ in rows:
        d, n, a = int(d), int(facts), float(acc)
        # every weight trained, none (hand-coded), or U alone (the hybrids and rand-emb)
        expected_trained = 5 * d * d if label.startswith("trained") else 0 if "hand-coded" in label else d * d
        assert int(trained) == expected_trained, label
        h = 0.0 if a == 1 else -(a * math.log2(a) + (1 - a) * math.log2(1 - a))
        expected = n * (math.log2(d) - h - (1 - a) * math.log2(d - 1))
        assert int(weights) == 5 * d * d
        assert float(bits) == pytest.approx(expected, abs=0.01 * n + 1)
        assert float(per_weight) == pytest.approx(float(bits) / int(weights), abs=0.006)


def test_int8_table_is_the_record_in_bits(record):
    """The int8 table: each row's accuracies as recorded and Fano's bound before and after rounding over 5 d^2
    weights; the summary line's worst share per mode recomputed from the rows."""
    section = (DOCS / "memorisation.md").read_text().split("## Constructions in bits")[1].split("\n## ")[0]
    rows = _table_rows(section.split("After int8 rounding (")[1], "mode")
    recorded = record["constructions"]["int8"]["rows"]
    assert len(rows) == len(recorded)
    searched = {
        (r["variant"], r["d"], c): r[c] for r in record["constructions"]["results"] for c in ("1", "0.9")
    }
    assert all(
        r["n"] == searched[(r["mode"], r["d"], r["criterion"])] for r in recorded
    )  # today's capacities

    def fano(n: int, d: int, a: float) -> float:
        h = 0.0 if a in (0.0, 1.0) else -(a * math.log2(a) + (1 - a) * math.log2(1 - a))
        return n * max(0.0, math.log2(d) - h - (1 - a) * math.log2(d - 1))

    kept: dict[str, float] = {}
    for (label, d, _, facts, acc, acc8, per_weight, per_weight8), r in zip(
        rows, recorded_in_page_order(recorded)
    ):
        d, n = int(d), int(facts)
        assert (d, n) == (r["d"], r["n"]) and float(acc) == pytest.approx(r["accuracy"], abs=1e-3)
        assert float(acc8) == pytest.approx(r["accuracy_int8"], abs=1e-3)
        assert float(per_weight) == pytest.approx(fano(n, d, r["accuracy"]) / (5 * d * d), abs=0.006)
        assert float(per_weight8) == pytest.approx(fano(n, d, r["accuracy_int8"]) / (5 * d * d), abs=0.006)
        share = fano(n, d, r["accuracy_int8"]) / fano(n, d, r["accuracy"])
        kept[label] = min(kept.get(label, 1.0), share)
    line = next(x for x in section.splitlines() if x.startswith("- After int8 rounding, the share"))
    for label, share in kept.items():
        assert f"{label} {share:.1%} (d = " in line
    scores = {(r["variant"], r["d"]): r["accuracy"] for r in record["constructions"]["results"]}
    same = all(
        abs(scores[(r["mode"], r["d"])][str(r["n"])] - r["accuracy"]) <= 1e-6
        for r in recorded
        if r["mode"].endswith("_hand")
    )  # the caption says whether the hand-coded rebuilds reach what their search recorded
    assert ("reach the accuracies their search recorded" in section) == same


def recorded_in_page_order(rows: list[dict]) -> list[dict]:
    """The int8 rows in the page's order: mode as the labels list them, then d, then acc = 1 before 0.9."""
    from mechmem_papers.memorisation.page_constructions import LABELS

    return sorted(rows, key=lambda r: (list(LABELS).index(r["mode"]), r["d"], r["criterion"] != "1"))


def test_a_row_with_repeats_fails_only_when_every_repeat_is_outside_the_range(record):
    """The failure rule with several repeats of ours: every repeat outside the published range and their mean
    more than 10% from the published mean (one repeat: the single-run rule)."""
    import copy

    from mechmem_papers.memorisation.page_published import b1_failures

    rec, name = copy.deepcopy(record), "attn+mlp+norms/relu"
    rec["other_schedules"] = [
        r for r in rec["other_schedules"] if r["variant"] != name or r.get("repeat", 0) == 0
    ]
    first = next(
        r
        for r in rec["other_schedules"]
        if r["variant"] == name and r["schedule"]["max_epochs"] == 50_000 and r.get("repeat", 0) == 0
    )
    first["any"] = 1008  # one repeat above the range, +110% from the mean: fails
    assert f"{name} 1008 [published 440 - 512" in b1_failures(rec)
    rec["other_schedules"].append({**first, "repeat": 1, "any": 480})  # inside the published range
    assert f"{name} " not in b1_failures(rec)
    rec["other_schedules"][-1]["any"] = 992
    line = b1_failures(rec)
    assert f"{name} {first['any']} / 992 (2 repeats) [published 440 - 512" in line
    assert "more where a row lists them" in line


def test_a_toggle_pairs_the_mean_of_each_variants_repeats():
    """Two repeats of one variant count as one pair, at their mean, whatever their order."""
    from mechmem_papers.memorisation.summary import toggle_effect

    config = {"mixing": "attn", "mlp": True, "norms": False, "mlp_residual": False, "bias": False}
    off = {"config": {**config, "act_fn": "relu"}, "any": 100}
    on = [{"config": {**config, "act_fn": "gelu"}, "any": a} for a in (90, 130)]
    for records in ([off, *on], [off, *on[::-1]]):
        effect = toggle_effect(records, "act_fn", "gelu", "relu")
        assert (effect.pairs, effect.better, effect.diff) == (1, 1, (10, 10))
