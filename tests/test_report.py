"""Circuit reports name exactly the planted roles, none on a random model, and write self-contained html."""

import json
import re

import pytest
import torch
from helpers import assert_no_hooks

from mechmem.report import RoleThresholds, build_report, to_html, write_report


def roles_of(report):
    return {(h["layer"], h["head"]): h["role"] for h in report.section("circuit").findings["heads"]}


@pytest.fixture(scope="module")
def induction_report():
    from mechmem.analysis.planted import INDUCTION_HEAD, PREVIOUS_TOKEN_HEAD, planted_induction_model

    report = build_report(planted_induction_model(), None, title="planted induction", n_samples=64)
    return report, {PREVIOUS_TOKEN_HEAD: "previous-token", INDUCTION_HEAD: "induction"}


@pytest.fixture(scope="module")
def permutation_task():
    from mechmem.tasks import build_task

    return build_task("permutation", {"repeat_ratio": 0.3})


@pytest.fixture(scope="module")
def pair_report(permutation_task):
    from mechmem_papers.permutation import planted

    model = planted.planted_permutation_model()
    report = build_report(model, permutation_task, title="planted elimination/recall", n_samples=128)
    expected = {
        planted.PREVIOUS_TOKEN_HEAD: "previous-token",
        planted.ELIMINATION_HEAD: "elimination",
        planted.RECALL_HEAD: "recall",
    }
    return report, expected


@pytest.fixture(scope="module")
def random_report(permutation_task):
    from mechmem.models import build_model
    from mechmem.tasks import get_preset

    model = build_model(
        get_preset("permutation", "task2-quick").model, generator=torch.Generator().manual_seed(3)
    )
    model.eval()
    return build_report(model, permutation_task, title="random init", n_samples=128)


def test_planted_induction_roles_named_exactly(induction_report):
    report, expected = induction_report
    got = {head: role for head, role in roles_of(report).items() if role != "none"}
    assert got == expected
    assert report.section("optimum").skipped  # a bare model has no task


def test_planted_elimination_recall_roles_named_exactly(pair_report):
    report, expected = pair_report
    got = {head: role for head, role in roles_of(report).items() if role != "none"}
    assert got == expected
    # The planted model answers the final step perfectly, by elimination and by recall.
    metrics = report.section("optimum").findings["metrics"]
    assert metrics["test_final_acc"] == pytest.approx(1.0)
    assert metrics["probe_recall_p"] > 0.99


def test_random_model_names_no_roles(random_report):
    assert set(roles_of(random_report).values()) == {"none"}
    assert random_report.section("mlp").findings["role"] == "none"
    assert "no head roles" in random_report.section("circuit").findings["summary"]


def test_report_and_reproduction_page_print_identical_role_numbers(permutation_task, tmp_path):
    """The page's measurement (`experiments.measure_seed`) and the report call one classifier on the same
    data."""
    from mechmem.checkpoint import save_checkpoint
    from mechmem_papers.permutation import planted
    from mechmem_papers.permutation import run as experiments

    model = planted.planted_permutation_model()
    cfg = experiments.ReproConfig(runs=str(tmp_path), n_eval=64, n_analysis=64, role_samples=96)
    run = experiments.run_dir(cfg.runs, cfg.task2_preset, 0)
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    save_checkpoint(
        run / "ckpt.pt",
        model=model,
        model_config=planted.planted_permutation_config(),
        task_name="permutation",
        task_config=permutation_task.config,
    )
    page = experiments.measure_seed(cfg.task2_preset, 0, cfg, roles=True, rescue=True)["roles"]
    report = build_report(model, permutation_task, n_samples=32, role_samples=96, seed=cfg.role_seed)
    circuit = report.section("circuit").findings
    assert page["heads"] == circuit["heads"] and page["labels"] == circuit["labels"]
    assert page["thresholds"] == circuit["thresholds"]
    assert {h["role"] for h in page["heads"]} >= {"recall", "elimination"}


def test_sections_skip_with_a_reason(induction_report):
    report, _ = induction_report
    for key in ("optimum", "mlp", "ablation", "patching"):
        assert report.section(key).skipped and "task" in report.section(key).skipped


def test_written_report_is_self_contained(pair_report, tmp_path):
    report, _ = pair_report
    paths = write_report(report, tmp_path)
    page = paths["html"].read_text()
    assert "<img" in page and page.count('src="data:image/png;base64,') == page.count("<img")
    # Nothing is loaded from outside: only inline scripts (no src), no stylesheet links, no URLs of any scheme
    # outside data: URIs; the only links are to the page's own sections.
    text = re.sub(r'src="data:image/png;base64,[A-Za-z0-9+/=]+"', "", page)
    assert not re.search(r"(https?:|ftp:|file:|//[a-z])", text, re.IGNORECASE)
    assert re.findall(r"<script[^>]*>", page) == ['<script type="application/json" id="mm-data">', "<script>"]
    assert "<link" not in page.lower() and "@import" not in page
    assert re.findall(r'src="([^"]*)"', text) == []
    assert {href[0] for href in re.findall(r'href="([^"]*)"', text)} == {"#"}
    data = json.loads(
        paths["json"].read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")
    )
    assert data["sections"]["circuit"]["findings"]["thresholds"] == RoleThresholds().to_dict()
    roles = {(h["layer"], h["head"]): h["role"] for h in data["sections"]["circuit"]["findings"]["heads"]}
    assert roles == roles_of(report)
    md = paths["md"].read_text()
    assert "elimination" in md and "recall" in md
    for line in md.splitlines():
        if line.startswith("!["):
            assert (tmp_path / line.split("(")[1].rstrip(")")).exists()


def test_html_escapes_text(pair_report):
    report, _ = pair_report
    report.meta["evil"] = "<script>alert(1)</script>"
    try:
        page = to_html(report)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "alert(1)</script>" not in page and page.count("<script") == 2  # the page's own two
    finally:
        del report.meta["evil"]


# Slow (one more whole report, ~30-60 s): by default each analysis the report runs asserts that no hooks
# are left in its own test (test_ablation, test_attribution, test_circuits, test_heads, test_roles, ...).
@pytest.mark.slow
def test_no_hooks_left_behind(permutation_task):
    from mechmem_papers.permutation import planted

    model = planted.planted_permutation_model()
    build_report(model, permutation_task, n_samples=32)
    assert_no_hooks(model)


def test_json_is_strict_and_markdown_matches_html(tmp_path):
    from mechmem.report import Report, Section, Table, to_markdown

    s = Section("x", "X", lines=["a < b"], tables=[Table(["k", "v"], [["nan", float("nan")]])])
    s.findings = {"score": float("nan"), "nested": [float("inf"), 1.0]}
    report = Report("t", "h", {}, [s, Section("y", "Y", skipped="no reason")])
    paths = write_report(report, tmp_path)
    data = json.loads(
        paths["json"].read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}")
    )
    assert data["sections"]["x"]["findings"] == {"score": None, "nested": [None, 1.0]}
    assert "_Skipped: no reason_" in to_markdown(report)
    assert "a &lt; b" in to_html(report) and "Skipped: no reason" in to_html(report)


def test_html_table_stacks_bounds_under_their_value_and_escapes_them():
    from mechmem.report import Table
    from mechmem.report.html import table_html

    t = Table(
        ["head", "share", "score", "note"],
        [["L0H0", "0.234 [0.130, 0.339]", "1.000 (0.875)", "a <b> [c]"]],
    )
    cells = re.findall(r"<td>(.*?)</td>", table_html(t))
    assert cells == [
        "L0H0",
        '0.234<br><span class="ci">[0.130, 0.339]</span>',
        '1.000<br><span class="ci">(0.875)</span>',
        "a &lt;b&gt; [c]",  # text with brackets that is not "value bounds" stays on one line
    ]
