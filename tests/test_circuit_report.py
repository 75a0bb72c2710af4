"""The circuit's report section and `analyses/circuit.py`: the planted circuit drawn, written and printed."""

import json

import pytest
import torch
from helpers import assert_no_hooks, load_script

from mechmem.analysis.planted import planted_config, planted_induction_model
from mechmem.analysis.roles import RoleResult, RoleThresholds, head_roles
from mechmem.checkpoint import save_checkpoint
from mechmem.cli import run_script
from mechmem.report import SECTIONS
from mechmem.report.circuit_graph import edges_section
from mechmem.report.sections import ReportContext
from mechmem.tasks.generic import RepeatsConfig

PLANTED = {"embed->L0H2.v", "L0H2->L1H1.k", "embed->L1H1.q", "embed->L1H1.v", "L1H1->logits"}


@pytest.fixture(scope="module")
def planted_ckpt(tmp_path_factory):
    model = planted_induction_model()
    return save_checkpoint(
        tmp_path_factory.mktemp("planted") / "ckpt.pt",
        model=model,
        model_config=planted_config(),
        task_name="repeats",
        task_config=RepeatsConfig.for_model(model),
    )


def test_section_is_registered_and_draws_the_planted_circuit():
    assert edges_section in SECTIONS
    model = planted_induction_model()
    section = edges_section(ReportContext(model, None, 64, 0, head_roles(model, None, n=64, seed=0)))
    assert section.skipped is None and set(section.findings["circuit"]) == PLANTED
    assert section.findings["faithfulness"] == pytest.approx(1.0, abs=1e-3)
    assert (
        section.figures["graph"].startswith(b"\x89PNG")
        and section.tables[0].rows[0][section.tables[0].headers.index("decision")] == "in"
    )
    assert_no_hooks(model)


def test_section_is_skipped_with_a_reason_for_models_it_cannot_read():
    ctx = ReportContext(torch.nn.Linear(2, 2), None, 8, 0, RoleResult([], (), RoleThresholds()))
    assert "HookedTransformer" in edges_section(ctx).skipped


# Slow (exact edge patching plus attribution, ~30-60 s): by default the same planted circuit is found through
# the report section above, and the script's wiring runs in test_script_bad_flag_is_one_line_exit_2.
@pytest.mark.slow
def test_script_writes_circuit_json_and_figure(planted_ckpt, tmp_path, capsys):
    rc = run_script(
        load_script("circuit").main,
        [
            str(planted_ckpt),
            "--out",
            str(tmp_path),
            "--n-samples",
            "32",  # at least min_units (20): fewer prompts decide no edge
            "--attribution",
            "--role-samples",
            "32",
        ],
    )
    out = capsys.readouterr().out
    assert rc == 0 and "Faithfulness 1.000" in out and "-----" in out
    data = json.loads((tmp_path / "circuit.json").read_text())
    assert set(data["circuit"]) == PLANTED and data["ablation"] == "mean" and data["method"]
    assert {"name", "sender", "receiver", "port", "score", "stderr", "kept", "attribution"} <= set(
        data["edges"][0]
    )
    assert {n["name"] for n in data["nodes"]} >= {"embed", "pos", "L1H1", "logits"}
    assert data["roles"]["L1H1"] == "induction" and "pearson" in data["attribution_agreement"]
    assert (tmp_path / "circuit.png").read_bytes().startswith(b"\x89PNG")


def test_script_bad_flag_is_one_line_exit_2(planted_ckpt, tmp_path, capsys):
    rc = run_script(load_script("circuit").main, [str(planted_ckpt), "--out", str(tmp_path), "--share", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "circuit.json").exists()


def test_report_and_script_measure_the_same_prompts_for_a_seed(planted_ckpt, tmp_path, capsys):
    from mechmem.checkpoint import load_checkpoint

    ckpt = load_checkpoint(planted_ckpt)
    # One seed other than the default (0): a script or section that ignored --seed would draw other prompts
    # and fail; a second seed doubled the test's two-minute cost without checking more.
    for seed in (3,):
        ctx = ReportContext(ckpt.model, ckpt.task, 64, seed, head_roles(ckpt.model, None, n=16, seed=seed))
        section = edges_section(ctx)
        out = tmp_path / str(seed)
        args = [str(planted_ckpt), "--out", str(out), "--seed", str(seed), "--role-samples", "16"]
        assert run_script(load_script("circuit").main, args) == 0
        script = json.loads((out / "circuit.json").read_text())
        assert script["n"] == section.findings["n"] == 64
        assert script["values"] == pytest.approx(section.findings["values"], abs=1e-6)
        for name, interval in section.findings["intervals"].items():
            assert script["intervals"][name] == pytest.approx(list(interval), abs=1e-6)
        assert script["verdict"] == section.findings["verdict"]
        robust = script["robustness"]
        assert robust.pop("timings_s").keys() == {"mean", "corrupted", "zero"}
        assert robust == section.findings["robustness"]  # the same held-out prompts, the same numbers
    capsys.readouterr()


def test_script_describes_the_ablation_it_ran(planted_ckpt, tmp_path, capsys):
    from mechmem.analysis.circuits import ABLATION_TEXT

    args = [str(planted_ckpt), "--out", str(tmp_path), "--n-samples", "16", "--role-samples", "16"]
    assert (
        run_script(load_script("circuit").main, [*args, "--ablation", "corrupted", "--ablations", "zero"])
        == 0
    )
    out = capsys.readouterr().out
    assert ABLATION_TEXT["corrupted"] in out and ABLATION_TEXT["mean"] not in out
    assert any(line.split()[:2] == ["zero", "no"] for line in out.splitlines())  # the robustness table
    assert (tmp_path / "robustness.png").exists()
    assert "over the clean prompts" not in out
    assert run_script(load_script("circuit").main, [*args, "--share", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "outside (-0.2, 0.2)" in out and "faithfulness >= None" not in out
