"""Every report records what each step cost; the cost benchmark's growth fit and its input errors."""

import json
import math

import pytest
from helpers import assert_no_hooks, build_model, load_script, random_tokens

from mechmem.report import ReportCost, build_report, write_report
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask


def load_benchmark():
    return load_script("benchmarks/report_scaling.py")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    model = build_model(n_layers=2, d_model=16, n_heads=2, d_vocab=12, n_ctx=12, d_mlp=32)
    task = RepeatsTask(RepeatsConfig.for_model(model))
    report = build_report(model, task, title="cost", n_samples=32, role_samples=64)
    out = tmp_path_factory.mktemp("report")
    return model, report, json.loads(write_report(report, out)["json"].read_text())


def test_report_json_has_one_timing_per_step(written):
    model, report, data = written
    cost = data["cost"]
    ran = {s.key for s in report.sections}
    assert set(cost["steps"]) == ran | {"roles"}
    seconds = [step["seconds"] for step in cost["steps"].values()]
    assert all(s >= 0 for s in seconds)
    assert sum(seconds) <= cost["seconds"]
    for step in cost["steps"].values():
        assert step["peak_rss_mb"] > 0 and step["rss_rise_mb"] >= 0
    # ru_maxrss only grows, so the peaks never fall from one step to the next (steps run in the listed order).
    peaks = [step["peak_rss_mb"] for step in cost["steps"].values()]
    assert peaks == sorted(peaks)
    # Every counted pass happens inside a step; the optimum section calls the model, the probes read weights.
    assert sum(step["passes"] for step in cost["steps"].values()) == cost["passes"]
    assert sum(step["rows"] for step in cost["steps"].values()) == cost["rows"]
    assert cost["steps"]["optimum"]["passes"] > 0 and cost["steps"]["probes"]["passes"] == 0
    assert_no_hooks(model)


def test_skipped_sections_are_timed_too():
    model = build_model(n_layers=1, d_model=16, n_heads=2, d_vocab=12, n_ctx=12)  # attention-only, no task
    report = build_report(model, None, n_samples=32, role_samples=64)
    assert set(report.cost["steps"]) == {s.key for s in report.sections} | {"roles"}
    assert report.section("mlp").skipped


def test_passes_and_rows_are_counted():
    model = build_model()
    tokens = random_tokens(model, batch=5)
    with ReportCost(2, model) as cost:
        cost.run("twice", lambda: [model(tokens), model(tokens[:3])])
        cost.run("none", lambda: None)
    steps = cost.to_dict()["steps"]
    assert (steps["twice"]["passes"], steps["twice"]["rows"]) == (2, 8)
    assert (steps["none"]["passes"], steps["none"]["rows"]) == (0, 0)
    model(tokens)  # after the report: no longer counted
    assert cost.to_dict()["passes"] == 2
    assert_no_hooks(model)


def test_progress_lines_estimate_the_time_left(capsys):
    with ReportCost(3, build_model(), progress=True, every_s=0.0) as cost:
        for name in ("a", "b", "c"):
            assert cost.run(name, lambda x: x + 1, 1) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(" (")[0] for line in lines[:3]] == [f"report: step {i}/3" for i in (1, 2, 3)]
    assert all("left ~" in line for line in lines)
    assert list(cost.to_dict()["steps"]) == ["a", "b", "c"]


def test_quiet_without_progress(capsys):
    with ReportCost(1, build_model()) as cost:
        cost.run("a", lambda: None)
    assert capsys.readouterr().out == ""


def test_growth_fit_recovers_a_planted_exponent():
    bench = load_benchmark()
    rows = [
        {
            "layers": L,
            "d_model": 64,
            "heads": 4,
            "n_ctx": 64,
            "report": {"seconds": 5.0 + 3.0 * L**1.5 * (1 + 0.01 * (-1) ** L)},
        }
        for L in (1, 2, 4, 8)
    ]
    [fit] = bench.fit_growth(rows, startup=5.0)
    assert fit["k"] == pytest.approx(1.5, abs=0.02)
    assert fit["a"] == pytest.approx(3.0, rel=0.05)
    assert math.isfinite(fit["k"]) and fit["layers"] == [1, 2, 4, 8]


@pytest.mark.parametrize("size", ["4", "4x", "ax64", "2x64x3", "2x64@x"])
def test_benchmark_rejects_bad_sizes(size, capsys, tmp_path):
    assert load_benchmark().main(["--sizes", size, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


@pytest.mark.slow
def test_benchmark_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "scaling.json"
    argv = [
        "--sizes",
        "2x16x2@12",
        "1x16x2@12",
        "--d-vocab",
        "12",
        "--n-samples",
        "32",
        "--role-samples",
        "32",
    ]
    argv += ["--circuit-samples", "8", "--circuit-role-samples", "32", "--out", str(out)]
    assert load_benchmark().main(argv) == 0
    record = json.loads(out.read_text())
    assert [r["layers"] for r in record["rows"]] == [1, 2]  # smallest first
    for row in record["rows"]:
        assert row["report"]["steps"]["edges"]["passes"] > 0 and row["circuit"]["total"] > 0
    assert {f["measure"] for f in record["fits"]} == {"seconds", "cpu_seconds"}
    assert "report s" in capsys.readouterr().out


@pytest.mark.slow  # the benchmark's own run: test_benchmark_runs_end_to_end covers the script by default
def test_benchmark_runs_a_baseline_side_by_side(tmp_path, capsys):
    """--baseline runs another source tree's copy of the benchmark (here this tree itself) at the same time
    and puts its rows under "before"; a tree without the benchmark is one error line."""
    bench = load_benchmark()
    root = bench.Path(bench.__file__).resolve().parents[1]
    out = tmp_path / "scaling.json"
    argv = ["--sizes", "1x16x2@12", "--d-vocab", "12", "--n-samples", "16", "--role-samples", "16"]
    argv += ["--circuit-samples", "8", "--circuit-role-samples", "16", "--out", str(out)]
    assert bench.main([*argv, "--baseline", str(root)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert set(row["before"]["report"]["steps"]) == set(row["report"]["steps"])
    assert row["before"]["layers"] == row["layers"] == 1
    assert "cpu ratio" in capsys.readouterr().out
    assert bench.main([*argv, "--baseline", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_report_on_an_explicit_device_moves_everything_with_the_model(written):
    """The --device path: a copy moved with `move_model` to an explicitly named device gives the
    same findings (every section reads the model's device) and records where it ran."""
    import copy

    import torch

    from mechmem.models.backend import move_model

    model, report, _ = written
    moved = move_model(copy.deepcopy(model), torch.device("cpu"))
    task = RepeatsTask(RepeatsConfig.for_model(moved))
    again = build_report(moved, task, title="cost", n_samples=32, role_samples=64)
    assert again.cost["device"] == report.cost["device"] == "cpu"
    for key in ("circuit", "edges", "ablation"):
        got, want = (
            {k: v for k, v in r.section(key).findings.items() if k != "timings_s"} for r in (again, report)
        )
        assert json.dumps(got) == json.dumps(want), key
    assert_no_hooks(moved)


def test_patching_section_estimates_large_sweeps_and_says_how_well(written, monkeypatch):
    """Above EXACT_PATCHING_CELLS the patching section's sweeps are attribution estimates whose sampled
    agreement with exact patching is stored and printed; below, every cell is patched exactly. The estimate
    of the head sweep (the last layer's heads enter the logits almost linearly) tracks the exact values."""
    import torch

    from mechmem.report import head_roles, sections

    model, _, _ = written
    task = RepeatsTask(RepeatsConfig.for_model(model))
    ctx = sections.ReportContext(model, task, 32, 0, head_roles(model, task, n=32, seed=0))
    exact = sections.patching_section(ctx)
    monkeypatch.setattr(sections, "EXACT_PATCHING_CELLS", 0)
    with torch.no_grad():  # as build_report runs its sections (once made this section skip itself)
        estimated = sections.patching_section(ctx)
    assert not estimated.skipped
    assert exact.findings["resid_pre"]["method"] == "exact" and exact.findings["resid_pre"]["check"] is None
    for name in ("attn_head_out_all_pos", "resid_pre"):
        found = estimated.findings[name]
        assert found["method"] != "exact" and found["check"]["cells"] > 0
        assert any(line.startswith(f"{name}: ") and "Pearson" in line for line in estimated.lines)
    heads = [torch.tensor(s.findings["attn_head_out_all_pos"]["values"]) for s in (exact, estimated)]
    assert float(torch.corrcoef(torch.stack([h.flatten() for h in heads]))[0, 1]) > 0.8
    assert_no_hooks(model)


def test_ablation_section_estimates_many_ablations_and_says_how_well(written, monkeypatch):
    """Above EXACT_ABLATION_VARIANTS the ablation section's ablations are attribution estimates with a sample
    re-computed exactly, their agreement stored and printed; the sampled ablations keep the exact section's
    values; an estimate failing the check is replaced by exact ablation; below, every ablation is exact."""
    import torch

    from mechmem.analysis import ablation
    from mechmem.analysis.ablation import attribution as ablation_attribution
    from mechmem.analysis.patching import attribution
    from mechmem.report import head_roles, sections

    model, _, _ = written
    task = RepeatsTask(RepeatsConfig.for_model(model))
    ctx = sections.ReportContext(model, task, 32, 0, head_roles(model, task, n=32, seed=0))
    exact = sections.ablation_section(ctx)
    assert "check" not in exact.findings and "method" not in exact.findings
    want = {(r["layer"], r["head"], r["component"]): r["metric"] for r in exact.findings["results"]}
    monkeypatch.setattr(ablation_attribution, "EXACT_ABLATION_VARIANTS", 0)
    runs = {}
    for trust in (-2.0, 1.5):  # every estimate trusted; none
        monkeypatch.setitem(attribution.TRUST, "pearson", trust)
        with torch.no_grad():  # as build_report runs its sections
            runs[trust] = sections.ablation_section(ctx)
    for found in runs.values():
        check = found.findings["check"]
        assert check["cells"] == min(ablation_attribution.CHECK_VARIANTS, ablation.n_variants(model))
        assert any("Pearson" in line and f"on {check['cells']} sampled" in line for line in found.lines)
    assert runs[1.5].findings["method"].startswith("exact (fallback")
    names = set(runs[-2.0].findings["exact_variants"])
    assert len(names) == runs[-2.0].findings["check"]["cells"]
    for trust, found in runs.items():
        for r in found.findings["results"]:
            name = f"L{r['layer']}" + (f"H{r['head']}" if r["head"] is not None else f" {r['component']}")
            if trust == 1.5 or name in names:
                got, expected = r["metric"], want[(r["layer"], r["head"], r["component"])]
                assert got == pytest.approx(expected, abs=1e-5), (trust, name)
    assert_no_hooks(model)


def test_the_large_grid_spans_layers_width_heads_and_context():
    bench = load_benchmark()
    sizes = [bench.parse_size(s, 4, 64) for s in bench.GRIDS["large"]]
    span = {k: (min(s[k] for s in sizes), max(s[k] for s in sizes)) for k in sizes[0]}
    assert span == {"layers": (1, 12), "d_model": (64, 768), "heads": (4, 12), "n_ctx": (32, 128)}
    assert {"layers": 12, "d_model": 768, "heads": 12, "n_ctx": 64} in sizes


def test_growth_fit_over_d_model_holds_the_other_sizes_fixed():
    rows = [
        {"layers": 4, "d_model": d, "heads": 4, "n_ctx": 64, "report": {"cpu_seconds": 0.5 * d**1.8}}
        for d in (64, 128, 256)
    ]
    rows.append({"layers": 2, "d_model": 64, "heads": 4, "n_ctx": 64, "report": {"cpu_seconds": 1.0}})
    [fit] = load_benchmark().fit_growth(rows, 0.0, "cpu_seconds", over="d_model")
    assert (
        fit["k"] == pytest.approx(1.8, abs=1e-6) and fit["layers"] == 4 and fit["d_model"] == [64, 128, 256]
    )
