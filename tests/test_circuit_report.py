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
    assert section.figures["graph"].startswith(b"\x89PNG") and section.tables[0].rows[0][3] == "yes"
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
            "16",
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
    rc = run_script(load_script("circuit").main, [str(planted_ckpt), "--out", str(tmp_path), "--target", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "circuit.json").exists()
