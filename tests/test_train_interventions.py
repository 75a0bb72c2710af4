"""Interventions during training: the trainer equals a hand-written TransformerLens loop with the same
hooks, a zeroed head gets no gradient (before `intervene_until` only), --resume refuses other interventions,
the command line checks its specs against the model, and older runs still load and resume."""

import pytest
import torch
from helpers import ROOT, assert_no_hooks

from mechmem.checkpoint import load_checkpoint, payload_digest, read_payload
from mechmem.cli.runner import run_script
from mechmem.cli.train import main as train_main
from mechmem.config import TrainConfig, TrainIntervention
from mechmem.errors import MechmemError
from mechmem.models import build_model
from mechmem.models.weights import canonical_state_dict
from mechmem.tasks import build_task, get_preset
from mechmem.training import train
from mechmem.training.run import train_preset

PRESET = get_preset("permutation", "task2-quick")  # one layer, two heads, an MLP
SMALL = {"steps": 5, "batch_size": 16, "eval_every": 100, "eval_samples": 32, "schedule": "constant"}
HEAD_WEIGHTS = ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V")


def _fresh():
    return build_model(PRESET.model, generator=torch.Generator().manual_seed(0)), build_task("permutation")


def _state(model):
    return {k: v.detach().clone() for k, v in canonical_state_dict(model).items()}


def _trained(interventions, out=None, **overrides):
    model, task = _fresh()
    cfg = PRESET.train.replace(**{**SMALL, **overrides})
    return train(
        model, task, cfg, model_config=PRESET.model, out_dir=out, progress=False, interventions=interventions
    )


@pytest.fixture(scope="module")
def runs():
    """Final weights of the runs several tests compare: initial, plain, L0H1 zeroed throughout."""
    return {
        "init": _state(_fresh()[0]),
        "plain": _state(_trained(None).model),
        "L0H1=zero": _state(_trained(["L0H1=zero"]).model),
    }


def _by_hand(hooks, steps):
    """The reference: Adam on every parameter, the trainer's batches, `model.run_with_hooks` each step."""
    model, task = _fresh()
    cfg = PRESET.train.replace(**SMALL)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.betas)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    for _ in range(steps):
        batch = task.train_batch(cfg.batch_size, generator=gen)
        loss = task.loss(model.run_with_hooks(batch.tokens, fwd_hooks=hooks), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def _mask_head_1(z, hook):
    return z * torch.tensor([1.0, 0.0])[:, None]  # [head_index, d_head]: head 1's output times 0


def _batch_mean(act, hook):
    return torch.zeros_like(act) + act.mean(0).detach()  # [pos, ...] broadcast over the batch


@pytest.mark.parametrize(
    ("spec", "hooks"),
    [
        ("L0H1=zero", [("blocks.0.attn.hook_z", _mask_head_1)]),
        ("blocks.0.hook_resid_mid=mean", [("blocks.0.hook_resid_mid", _batch_mean)]),
    ],
)
def test_trainer_equals_a_hand_written_loop_with_the_same_hooks(spec, hooks, runs):
    result = _trained([spec])
    want, got = _state(_by_hand(hooks, SMALL["steps"])), _state(result.model)
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-6, rtol=0), name
    changed = [n for n in want if not torch.allclose(runs["plain"][n], want[n], atol=1e-4)]
    assert changed  # the hooks did change learning
    assert result.summary["interventions"] == f"{spec} for the whole run"
    assert_no_hooks(result.model)


def test_a_zeroed_head_gets_no_gradient_until_released(tmp_path, runs):
    init, whole = runs["init"], runs["L0H1=zero"]
    for name in (f"blocks.0.attn.{w}" for w in HEAD_WEIGHTS):
        assert torch.equal(whole[name][1], init[name][1]), name  # head 1: exactly its initial weights
        assert not torch.equal(whole[name][0], init[name][0]), name  # head 0 trains
    assert not torch.equal(whole["blocks.0.attn.b_O"], init["blocks.0.attn.b_O"])

    _trained(["L0H1=zero"], tmp_path, intervene_until=2, save_every=1)
    weights = {k: read_payload(tmp_path / f"checkpoints/step_{k:07d}.pt")["state_dict"] for k in (2, 3)}
    assert torch.equal(weights[2]["blocks.0.attn.W_O"][1], init["blocks.0.attn.W_O"][1])  # steps 0, 1: held
    assert not torch.equal(weights[3]["blocks.0.attn.W_O"][1], init["blocks.0.attn.W_O"][1])  # step 2: free


def test_a_neuron_and_a_function_intervention(runs):
    neuron, init = _state(_trained(["blocks.0.mlp.hook_post[3]=zero"]).model), runs["init"]
    assert torch.equal(neuron["blocks.0.mlp.W_out"][3], init["blocks.0.mlp.W_out"][3])  # [d_mlp, d_model]
    assert not torch.equal(neuron["blocks.0.mlp.W_out"][2], init["blocks.0.mlp.W_out"][2])
    zero_head = TrainIntervention.function("blocks.0.attn.hook_z", _mask_head_1, name="mask")
    by_fn = _trained([zero_head])
    assert by_fn.summary["interventions"] == "blocks.0.attn.hook_z=fn:mask for the whole run"
    got = _state(by_fn.model)
    for name, tensor in runs["L0H1=zero"].items():
        assert torch.allclose(got[name], tensor, atol=1e-6, rtol=0), name


def test_resume_refuses_other_interventions_and_accepts_the_same(tmp_path):
    run = lambda **kw: train_preset(
        "permutation", "task2-quick", out_dir=tmp_path, progress=False, **SMALL, **kw
    )
    run(interventions=["L0H1=zero"], intervene_until=3)
    assert read_payload(tmp_path / "ckpt.pt")["train_config"]["interventions"] == ["L0H1=zero"]
    with pytest.raises(MechmemError, match=r"train.interventions \['L0H1=zero'\] != \['L0H1=mean'\]"):
        run(interventions=["L0H1=mean"], intervene_until=3, resume=True)
    with pytest.raises(MechmemError, match=r"train.intervene_until 3 != None"):
        run(interventions=["L0H1=zero"], resume=True)
    assert run(interventions=["L0H1 = zero"], intervene_until=3, resume=True).checkpoint is not None


def test_a_run_written_before_interventions_existed_still_resumes(tmp_path):
    run = lambda **kw: train_preset(
        "permutation", "task2-quick", out_dir=tmp_path, progress=False, **SMALL, **kw
    )
    run()
    payload = read_payload(tmp_path / "ckpt.pt")
    for key in ("interventions", "intervene_until"):
        del payload["train_config"][key]
    payload["digest"] = payload_digest(payload)
    torch.save(payload, tmp_path / "ckpt.pt")
    assert run(resume=True).checkpoint is not None
    assert load_checkpoint(ROOT / "tests" / "data" / "backend_tl4.pt").task_name == "repeats"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("L0H7=zero", "head 7 is out of range"),
        ("blocks.0.hook_nope=mean", "no hook 'blocks.0.hook_nope'"),
        ("blocks.0.mlp.hook_post[64]=zero", "index 64 is outside the 64 entries"),
        ("L0H1=half", "is no intervention"),
    ],
)
def test_a_bad_spec_is_one_line_exit_2_and_writes_nothing(spec, says, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        run_script(
            train_main, ["permutation", "--preset", "task2-quick", "--out", str(out), "--intervene", spec]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_the_command_line_trains_under_a_spec_and_records_it(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["permutation", "--preset", "task2-quick", "--out", str(out), "--steps", "2", "--no-progress"]
    assert run_script(train_main, [*argv, "--intervene", "L0H1=mean", "--intervene-until", "1"]) == 0
    assert "trained under interventions: L0H1=mean before step 1" in capsys.readouterr().out
    assert "L0H1=mean before step 1" in (out / "train.log").read_text()
    train_config = load_checkpoint(out).train
    assert (train_config["interventions"], train_config["intervene_until"]) == (["L0H1=mean"], 1)
    assert TrainConfig.from_dict(train_config).interventions == ("L0H1=mean",)


def test_specs_are_canonical_in_the_config_and_a_bad_one_is_one_line():
    cfg = TrainConfig(interventions=(" L0H1 =mean", "blocks.0.mlp.hook_post[3] = zero"))
    assert cfg.interventions == ("L0H1=mean", "blocks.0.mlp.hook_post[3]=zero")
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(MechmemError, match="'L0H1=half' is no intervention"):
        TrainConfig.from_dict({"interventions": ["L0H1=half"]})
    with pytest.raises(MechmemError, match="intervene_until must be >= 0"):
        TrainConfig.from_dict({"intervene_until": -1})


def test_an_intervened_run_says_so_at_the_top_of_its_report_and_dynamics(tmp_path):
    from mechmem.analysis.dynamics import run_dynamics
    from mechmem.analysis.dynamics.views import dynamics_lines
    from mechmem.report.checkpoint_report import checkpoint_report
    from mechmem.report.demo import index_entry
    from mechmem.report.document import summary_rows

    run = tmp_path / "run"
    train_preset(
        "permutation", "task1-quick", steps=4, save_every=2, out_dir=run, progress=False,
        interventions=["L0H0=zero"], intervene_until=2,
    )  # fmt: skip
    ckpt = load_checkpoint(run / "ckpt.pt")
    dynamics = run_dynamics(run, ["loss"], n=8)
    assert dynamics.info["trained_under"] == "L0H0=zero before step 2"
    assert dynamics_lines(dynamics, run)[0] == "trained under interventions: L0H0=zero before step 2"
    report = checkpoint_report(ckpt, n_samples=16)
    assert summary_rows(report)[0] == ("trained under interventions", "L0H0=zero before step 2")
    assert "Trained under interventions: L0H0=zero before step 2." in report.section("dynamics").lines
    assert index_entry(report.to_dict())["headline"].startswith("[trained under L0H0=zero before step 2] ")
