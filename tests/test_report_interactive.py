"""The interactive report page and the index: their data, and their behaviour in a real headless browser.

The page and index are built from two small planted models (the permutation elimination/recall circuit and
the induction circuit), so the expected heads and edges are known. The browser tests drive Debian's chromium
over the DevTools protocol (`tests/browser.py`): the page loads with no console error and no network request,
choosing a head redraws the attention explorer, hovering a heatmap cell shows its value and interval, clicking
an edge shows its evidence, and at 1280 px nothing overflows horizontally. They skip only where no chromium is
installed (`.ci/run` installs it).
"""

import html
import json
import os
import re
from pathlib import Path

import pytest
from browser import CHROMIUM, Browser

from mechmem.report.document import to_html, to_markdown, write_index, write_report
from mechmem.report.html import INDEX_COLUMNS, json_blob
from mechmem.report.interactive import grid_labels

needs_browser = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (apt-get install -y chromium)"
)
MAX_BYTES = 2 * 2**20


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two small reports written to disk, and the index linking them."""
    from mechmem.analysis.planted import planted_induction_model
    from mechmem.report import build_report
    from mechmem.report.demo import index_entry
    from mechmem.tasks import build_task
    from mechmem_papers.permutation import planted

    root = tmp_path_factory.mktemp("reports")
    built = {
        "permutation": build_report(
            planted.planted_permutation_model(),
            build_task("permutation", {"repeat_ratio": 0.3}),
            title="planted permutation",
            n_samples=32,
            role_samples=64,
        ),
        "induction": build_report(
            planted_induction_model(),
            build_task("repeats", {"d_vocab": 12, "half": 8}),
            title="planted induction",
            n_samples=32,
            role_samples=64,
        ),
    }
    paths = {name: write_report(r, root / name) for name, r in built.items()}
    entries = [
        {
            "name": name,
            "href": f"{name}/report.html",
            **index_entry(json.loads(paths[name]["json"].read_text())),
        }
        for name in built
    ]
    index = write_index(entries, root / "index.html")
    return {"reports": built, "paths": paths, "index": index}


def hover_cell(browser: Browser, canvas: str, row: int, col: int) -> None:
    """Point the mouse at one cell of a heatmap canvas (its geometry is in its data- attributes)."""
    left, top, size = browser.evaluate(
        f"(() => {{ const c = document.querySelector({json.dumps(canvas)});"
        " return [+c.dataset.left, +c.dataset.top, +c.dataset.size]; })()"
    )
    browser.hover_at(canvas, left + (col + 0.5) * size, top + (row + 0.5) * size)


def page_data(page: str) -> dict:
    blob = re.search(r'<script type="application/json" id="mm-data">(.*?)</script>', page, re.DOTALL).group(1)
    return json.loads(blob)


def test_page_is_self_contained_and_small(reports):
    for name, paths in reports["paths"].items():
        page = paths["html"].read_text()
        assert paths["html"].stat().st_size < MAX_BYTES, name
        assert "<script src" not in page and "<link" not in page
        assert not re.search(r"""(src|href)=["']?(https?:|//)""", page), name
        data = page_data(page)
        assert {"heads", "patching", "ablation", "edges"} <= set(data), name


def test_notebook_repr_is_the_page(reports):
    report = reports["reports"]["permutation"]
    shown = report._repr_html_()
    assert shown.startswith("<iframe") and shown.endswith("</iframe>")
    srcdoc = re.search(r'srcdoc="([^"]*)"', shown).group(1)
    assert html.unescape(srcdoc) == to_html(report)


def test_roles_table_marks_the_deciding_value(reports):
    report = reports["reports"]["permutation"]
    table = report.section("circuit").tables[0]
    role = {row[0]: row[1] for row in table.rows}
    assert role == {"L0H0": "previous-token", "L0H1": "none", "L1H0": "elimination", "L1H1": "recall"}
    groups = [g for g, _ in table.groups]
    marked = {table.rows[r][0]: (groups, table.headers[c], c) for r, c in table.marked}
    assert set(marked) == {"L0H0", "L1H0", "L1H1"}  # "none" decided by nothing
    assert marked["L0H0"][1] == "prev-token"
    for head, task_role in (("L1H0", "elimination"), ("L1H1", "recall")):
        col = marked[head][2]
        assert table.headers[col] == "share"
        start = 0
        for label, n in table.groups:  # the marked share sits under its own role's group
            if start <= col < start + n:
                assert label == task_role
            start += n
    assert len(table.headers) <= 14  # readable at 1280 px (the full scores have their own table)
    md = to_markdown(report)
    assert "**1.000 [1.000, 1.000]**" in md and "**1.000 (1.000)**" in md  # a task share, a pattern score


def test_every_patching_sweep_has_a_heatmap_with_its_intervals(reports):
    from mechmem.analysis.patching import model_sweeps

    report = reports["reports"]["permutation"]
    view = report.section("patching").interactive["heatmaps"]
    model = __import__("mechmem_papers.permutation.planted", fromlist=["x"]).planted_permutation_model()
    assert [m["name"] for m in view["maps"]] == model_sweeps(model)
    for m in view["maps"]:
        bounds = zip(m["lower"], m["values"], m["upper"])
        assert all(lo <= v + 1e-5 and v - 1e-5 <= hi for rows in bounds for lo, v, hi in zip(*rows))
        assert len(m["values"]) == len(m["rows"]) and all(len(r) == len(m["cols"]) for r in m["values"])
        if "pos" in m["axes"]:
            assert m["axes"][-1] == "pos"  # positions run across, labelled with an example prompt's tokens
            names = __import__("mechmem.tasks", fromlist=["x"]).build_task("permutation", {}).token_names()
            labelled = [re.fullmatch(r"(\S+) \(pos(\d+)\)", c) for c in m["cols"]]
            assert all(labelled) and [int(x.group(2)) for x in labelled] == list(range(len(m["cols"])))
            assert {x.group(1) for x in labelled} <= set(names)
    assert grid_labels(("layer", "head", "pos"), (2, 2, 3)) == (
        ["L0 H0", "L0 H1", "L1 H0", "L1 H1"],
        ["pos0", "pos1", "pos2"],
    )


def test_attention_view_has_token_names_and_patterns(reports):
    report = reports["reports"]["permutation"]
    view = report.section("heads").interactive["attention"]
    ex = view["examples"][0]
    names = __import__("mechmem.tasks", fromlist=["x"]).build_task("permutation", {}).token_names()
    assert set(ex["tokens"]) <= set(names)
    n = len(ex["tokens"])
    assert len(ex["patterns"]) == view["layers"] and len(ex["patterns"][0]) == view["heads"]
    for row, weights in enumerate(ex["patterns"][0][0]):  # causal rows sum to one
        assert len(weights) == n and abs(sum(weights) - 1) < 1e-4 and all(w == 0 for w in weights[row + 1 :])


def test_graph_edges_carry_their_evidence(reports):
    view = reports["reports"]["permutation"].section("edges").interactive["graph"]
    kept = {e["name"] for e in view["edges"] if e["kept"]}
    assert "L1H1->logits" in kept
    for e in view["edges"]:
        assert {"score", "stderr", "lower", "upper", "exact", "sender", "receiver", "port"} <= set(e)
        if e["stderr"] is not None:  # exact edges, and estimated ones with their estimate's interval
            assert e["lower"] <= e["score"] <= e["upper"]
        else:
            assert e["lower"] is None and e["upper"] is None


def test_json_blob_cannot_end_the_script_early():
    text = json_blob({"a": "</script><script>alert(1)</script>", "b": float("nan")})
    assert "</" not in text and json.loads(text) == {"a": "</script><script>alert(1)</script>", "b": None}


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium binary (apt-get install -y chromium)")
    with Browser(1280, 900) as b:
        yield b


@needs_browser
@pytest.mark.parametrize("name", ["permutation", "induction"])
def test_page_loads_offline_without_errors_and_fits_1280px(browser, reports, name):
    browser.open(reports["paths"][name]["html"])
    assert browser.evaluate("document.documentElement.getAttribute('data-mm-ready')") == "1"
    assert browser.errors == [] and browser.external_requests() == []
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
    # nothing scrolls sideways inside the page either (the roles table, heatmaps, graph all fit)
    wide = browser.evaluate(
        "[...document.querySelectorAll('.scroll, .view, .maps, .map')]"
        ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.className)"
    )
    assert wide == []
    assert browser.evaluate("document.querySelectorAll('.view canvas.grid').length") >= 3


@needs_browser
def test_choosing_a_head_redraws_the_attention_explorer(browser, reports):
    browser.open(reports["paths"]["permutation"]["html"])
    title = "document.querySelector('.mm-attn-title').textContent"
    first = browser.evaluate(title)
    assert first.startswith("L0H0: previous-token")
    cells = "document.querySelector('.mm-attn-grid canvas').toDataURL()"
    before = browser.evaluate(cells)
    browser.evaluate(
        "(() => { const l = document.querySelector('select.mm-layer'); l.value = '1';"
        " l.dispatchEvent(new Event('change')); const h = document.querySelector('select.mm-head');"
        " h.value = '1'; h.dispatchEvent(new Event('change')); })()"
    )
    assert browser.evaluate(title).startswith("L1H1: recall")
    assert browser.evaluate(cells) != before
    hover_cell(browser, ".mm-attn-grid canvas", 3, 1)
    info = browser.evaluate("document.querySelector('.mm-attn-info').textContent")
    assert re.search(r"L1H1  query 3 '\S+' -> key 1 '\S+': \d\.\d{3}", info), info
    assert browser.evaluate("getComputedStyle(document.querySelector('.mm-tip')).display") == "block"


@needs_browser
def test_hovering_a_heatmap_cell_shows_value_and_interval(browser, reports):
    report = reports["reports"]["permutation"]
    browser.open(reports["paths"]["permutation"]["html"])
    hover_cell(browser, ".view[data-section=patching] .map[data-map=attn_head_out_all_pos] canvas", 1, 1)
    info = browser.evaluate("document.querySelector('[data-section=patching] .mm-heat-info').textContent")
    sweep = report.section("patching").findings["attn_head_out_all_pos"]
    value = sweep["values"][1][1]
    assert info.startswith("attn_head_out_all_pos  L1, H1: logit_diff ") and f"{value:.3f}" in info, info
    assert "restored" in info and "; 95% interval [" in info and sweep["lower"][1][1] <= value, info
    hover_cell(browser, ".view[data-section=ablation] canvas", 0, 0)
    info = browser.evaluate("document.querySelector('[data-section=ablation] .mm-heat-info').textContent")
    assert "L0, H0: delta" in info and "; 95% interval [" in info, info


@needs_browser
def test_clicking_an_edge_shows_its_evidence(browser, reports):
    report = reports["reports"]["permutation"]
    edge = next(
        e for e in report.section("edges").interactive["graph"]["edges"] if e["name"] == "L1H1->logits"
    )
    browser.open(reports["paths"]["permutation"]["html"])
    panel = "document.querySelector('.mm-edge-info').textContent"
    assert "select an edge" in browser.evaluate(panel)
    browser.click(".mm-graph .edge-hit[data-edge='L1H1->logits']")
    text = browser.evaluate(panel)
    assert "edgeL1H1->logits" in text and "L1H1 (recall) -> logits" in text
    assert f"{edge['score']:.3f}" in text and f"[{edge['lower']:.3f}, {edge['upper']:.3f}]" in text
    assert "exactyes" in text and "in circuityes" in text
    selected = (
        "[...document.querySelectorAll('.mm-graph .selected')]"
        ".map(e => e.getAttribute('data-edge') || e.getAttribute('data-node')).sort().join()"
    )
    assert browser.evaluate(selected) == "L1H1,L1H1->logits,logits"
    # the edges outside the circuit appear, dashed, on request; the sign is the colour
    kept = browser.evaluate("document.querySelectorAll('.mm-graph path.edge').length")
    browser.click("input.mm-all-edges")
    everything = browser.evaluate("document.querySelectorAll('.mm-graph path.edge').length")
    assert everything == len(report.section("edges").interactive["graph"]["edges"]) > kept
    colours = browser.evaluate(
        "[...new Set([...document.querySelectorAll('.mm-graph path.edge')]"
        ".map(e => e.getAttribute('stroke')))]"
    )
    signs = {e["score"] >= 0 for e in report.section("edges").interactive["graph"]["edges"]}
    assert len(colours) == len(signs)


@needs_browser
def test_sections_collapse_and_the_verdicts_come_first(browser, reports):
    browser.open(reports["paths"]["permutation"]["html"])
    first = browser.evaluate("document.querySelector('.mm-report > table, .mm-report details').id")
    assert first == "summary"
    summary = browser.evaluate("document.getElementById('summary').textContent")
    assert "L1H1 recall" in summary and "confident:" in summary
    browser.click("#mm-toggle")
    assert browser.evaluate("[...document.querySelectorAll('details.section')].every(d => !d.open)")
    browser.click("#mm-toggle")
    assert browser.evaluate("[...document.querySelectorAll('details.section')].every(d => d.open)")


@needs_browser
def test_index_links_every_report_and_sorts(browser, reports):
    browser.open(reports["index"])
    assert browser.errors == [] and browser.external_requests() == []
    rows = "[...document.querySelectorAll('#index tbody tr')].map(r => r.cells[0].textContent)"
    assert browser.evaluate(rows) == ["permutation", "induction"]
    headers = browser.evaluate("[...document.querySelectorAll('#index th')].map(h => h.textContent)")
    assert headers == list(INDEX_COLUMNS)
    assert "`" not in browser.evaluate("document.body.textContent")  # markdown's code is rendered
    seeds = "[...document.querySelectorAll('#index tbody tr')].map(r => r.cells[3].textContent)"
    assert browser.evaluate(seeds) == ["0 / 32", "0 / 32"]
    browser.click("#index th[data-col='0']")
    assert browser.evaluate(rows) == ["induction", "permutation"]
    browser.click("#index th[data-col='0']")
    assert browser.evaluate(rows) == ["permutation", "induction"]
    hrefs = browser.evaluate("[...document.querySelectorAll('#index a')].map(a => a.href)")
    for href, name in zip(hrefs, ["permutation", "induction"]):
        assert href.endswith(f"{name}/report.html")
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1280


REPORT_DIR = os.environ.get("MECHMEM_REPORT_DIR")


@needs_browser
@pytest.mark.skipif(
    REPORT_DIR is None, reason="set MECHMEM_REPORT_DIR to a folder of reports (e.g. `reports`)"
)
def test_written_reports_load_cleanly(browser):
    """Every page of a written report folder (e.g. `make demo`'s reports/): loads offline with no error and no
    request, its views drawn, under 2 MB, nothing wider than 1280 px."""
    root = Path(REPORT_DIR)
    pages = sorted(root.glob("*/report.html"))
    assert (root / "index.html").exists() and pages
    for page in [root / "index.html", *pages]:
        assert page.stat().st_size < MAX_BYTES, page
        browser.open(page)
        assert browser.errors == [] and browser.external_requests() == [], page
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1280, page
        if page.name == "report.html":
            assert browser.evaluate("document.documentElement.getAttribute('data-mm-ready')") == "1", page
