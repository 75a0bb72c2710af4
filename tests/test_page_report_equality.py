"""A quantity a reproduction page shows and the report (or its script) also shows is one number.

Each test computes the quantity twice on the same small checkpoint and the same data: once through the page's
code path (the functions the paper's `run` records and its page prints) and once through the report's (the
report section, `analyses/detect_heads.py`, the lens engine, the dynamics curves). The two must agree: to the
page's rounding where the page rounds its record (5 decimals), else exactly.

Checkpoints: a tiny birth model trained for a few steps (so its metrics history has real crossings), and a
random permutation model with an MLP (the lens before and after the last MLP needs one).
"""

import json

import pytest
import torch
from helpers import build_model, load_script

from mechmem.analysis import transitions
from mechmem.analysis.roles import RoleResult, RoleThresholds, head_roles
from mechmem.checkpoint import load_checkpoint
from mechmem.cli import run_script
from mechmem.models.transformer import build_transformer
from mechmem.report.sections import ReportContext, heads_section, mlp_section, probes_section
from mechmem.tasks import build_task
from mechmem.tasks.base import Batch
from mechmem.tasks.birth.models import simplified_config
from mechmem.tasks.birth.task import N_TOKENS, BirthConfig
from mechmem.tasks.permutation import PermutationConfig, PermutationTask
from mechmem.training import TrainConfig, train
from mechmem.training.rundir import read_metrics
from mechmem_papers.birth.experiments import first_step
from mechmem_papers.birth.run import head_scores
from mechmem_papers.permutation.run import ffn_rescue, last_step_groups

ROUNDED = 5e-6
"""The page records scores rounded to 5 decimals."""
N, SEED = 24, 3


@pytest.fixture(scope="module")
def birth_run(tmp_path_factory):
    """A 2-layer simplified birth model (d=32, T=32, random triggers) after 40 SGD steps, logged every 4."""
    out = tmp_path_factory.mktemp("birth") / "run"
    model_cfg = simplified_config(
        d_vocab=N_TOKENS, n_ctx=32, d_model=32, freeze_embeddings=True, freeze_unembedding=True
    )
    task = build_task("birth", BirthConfig(seq_len=32, n_triggers=3, fixed_triggers=False))
    cfg = TrainConfig(
        steps=40, batch_size=16, lr=0.2, optimizer="sgd", momentum=0.9, eval_every=4, eval_samples=16
    )
    model = build_transformer(model_cfg, generator=torch.Generator().manual_seed(0))
    train(model, task, cfg, model_config=model_cfg, out_dir=out, progress=False)
    return out


def _context(model, task, roles=None):
    roles = roles or RoleResult([], (), RoleThresholds(), {"n": N, "seed": SEED})
    return ReportContext(model, task, N, SEED, roles)


def test_birth_head_scores_page_equal_report_and_script(birth_run, tmp_path):
    page = head_scores(birth_run / "ckpt.pt", n_samples=N, seed=SEED)["layers"]
    ckpt = load_checkpoint(birth_run / "ckpt.pt")
    # the report: its heads section shows the roles' evidence, the best over the random probes and the task
    roles = head_roles(ckpt.model, ckpt.task, n=N, seed=SEED)
    report = heads_section(_context(ckpt.model, ckpt.task, roles)).findings["scores"]
    # the script analyses/detect_heads.py: the score at every probe (the random ones, then the task's data)
    assert (
        run_script(
            load_script("detect_heads").main,
            [str(birth_run / "ckpt.pt"), "--out", str(tmp_path), "--n-samples", str(N), "--seed", str(SEED)],
        )
        == 0
    )
    script = json.loads((tmp_path / "detect_heads.json").read_text())
    assert script["probes"][-1] == "task data"
    for layer, row in enumerate(page):
        for name in ("previous_token", "induction"):
            random, task = row[f"{name}_random"], row[f"{name}_task"]
            curve = [probe[layer][0] for probe in script["curves"][name]["score"]]
            assert random == pytest.approx(max(curve[:-1]), abs=ROUNDED)
            assert task == pytest.approx(curve[-1], abs=ROUNDED)
            assert max(random, task) == pytest.approx(script["scores"][name][layer][0], abs=ROUNDED)
            assert max(random, task) == pytest.approx(report[name][layer][0], abs=ROUNDED)
    assert any(row["induction_task"] != row["induction_random"] for row in page)  # two data sets, not one


def test_birth_ov_recall_page_equals_report(birth_run):
    ckpt = load_checkpoint(birth_run / "ckpt.pt")
    assert ckpt.task.config.outputs == "uniform"  # the page's output tokens are every token, as the report's
    page = ckpt.task.probes(ckpt.model)["wo2_recall"]  # what the trainer logs and the page prints
    report = probes_section(_context(ckpt.model, ckpt.task)).findings["probes"]
    assert page == next(p["copy_recall"] for p in report if p["name"] == "L1H0.OV")


def test_birth_qk_and_ov_probes_page_equal_probe_script(birth_run, tmp_path):
    """The page's W_K^1, W_K^2 and W_O^2 recalls are the probes `analyses/probe_memory.py` prints."""
    ckpt = load_checkpoint(birth_run / "ckpt.pt")
    page = ckpt.task.probes(ckpt.model)
    argv = [str(birth_run / "ckpt.pt"), "--out", str(tmp_path), "--n-samples", str(N), "--seed", str(SEED)]
    assert run_script(load_script("probe_memory").main, argv) == 0
    script = {p["name"]: p for p in json.loads((tmp_path / "memory_probes.json").read_text())["probes"]}
    assert page["wo2_recall"] == script["ov_copy.L1H0"]["recall"]
    assert page["wk2_recall"] == script["qk_token.L1H0<-L0H0"]["recall"]
    assert page["wk1_recall"] == script["qk_prev_pos.L0H0"]["recall"]


def test_birth_transition_steps_page_equal_dynamics(birth_run):
    """The statements' first crossing (page) and the dynamics' event on the logged curve (report) agree."""
    from mechmem.analysis.dynamics.views import metrics_curves

    history = read_metrics(birth_run)
    steps, curves = metrics_curves(birth_run)
    checked = 0
    for key in ("icl_acc", "wk1_recall", "wo2_recall", "global_loss"):
        values = [v for v in curves[key] if v is not None]
        for level in (min(values) + f * (max(values) - min(values)) for f in (0.0, 0.3, 0.7, 1.0)):
            direction = "down" if key == "global_loss" else "up"
            event = transitions.find_event(steps, curves[key], transitions.level(level, direction), key)
            page = first_step(history, key, level, below=direction == "down")
            assert page == event.first_save
            checked += page is not None
    assert checked >= 8


@pytest.fixture(scope="module")
def permutation():
    task = PermutationTask(PermutationConfig(vocab_size=4))
    model = build_model(seed=1, d_vocab=task.d_vocab, n_ctx=task.seq_len, d_mlp=32, normalization_type="LN")
    return model, task


class _OneBatch:
    """The permutation task, except that its evaluation batch is one fixed batch (the page's sequences)."""

    def __init__(self, task, batch):
        self.task, self.batch = task, batch

    def eval_batch(self, n, *, generator):
        return self.batch

    def __getattr__(self, name):
        return getattr(self.task, name)


@torch.no_grad()
def test_permutation_lens_before_and_after_the_mlp_page_equals_report(permutation):
    model, task = permutation
    page = ffn_rescue(model, task, N, generator=torch.Generator().manual_seed(SEED), ks=(1,), random_draws=1)
    g = last_step_groups(task, N, generator=torch.Generator().manual_seed(SEED))
    mask = torch.zeros(g["tokens"].shape)
    mask[:, -1] = 1.0
    targets = torch.zeros_like(g["tokens"])
    targets[:, -1] = g["targets"]
    batch = Batch(tokens=g["tokens"], targets=targets, loss_mask=mask)
    report = mlp_section(_context(model, _OneBatch(task, batch))).findings
    repeat = g["repeat"].float().mean().item()
    for stage, key in (("pre_ffn", "p_answer_before_mlp"), ("post_ffn", "p_answer")):
        lens = page.lens[stage]
        pooled = repeat * lens["recall_p"] + (1 - repeat) * lens["elimination_p"]
        assert pooled == pytest.approx(report[key], rel=1e-5)


def test_permutation_page_sd_is_the_one_sample_sd():
    """The page's "mean ± sd" and the memorisation tables' use one definition (`stats.format_mean_sd`)."""
    from mechmem.analysis.stats import format_mean_sd, mean_sd
    from mechmem_papers.memorisation.summary import mean_sd as facts_mean_sd
    from mechmem_papers.permutation import page

    values = [0.1, 0.4, 0.25]
    m, sd = mean_sd(values)
    naive = (sum((v - m) ** 2 for v in values) / (len(values) - 1)) ** 0.5
    assert sd == pytest.approx(naive, rel=1e-12)
    assert page.format_ms(values) == format_mean_sd(values) == f"{m:.3f} ± {naive:.3f}"
    counts = [10, 13, 19]
    assert facts_mean_sd(counts) == format_mean_sd(counts, ".0f", " +- ")
