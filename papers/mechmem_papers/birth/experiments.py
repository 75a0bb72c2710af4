"""The experiments of Bietti et al. (2023), each a list of training runs at a chosen scale.

    (a) freezing    Fig. 3: some of W_K^1, W_K^2, W_O^2 held at their random init until a step (300 in the
    paper) (b) ffn         Fig. 4: simplified model with W_F, all layers trained jointly on every token (c)
    data        K in {1, 3, 5}, fixed vs random triggers, uniform vs bigram outputs, OOD outputs (d) depth
    full transformer (MLPs, LayerNorm), 1 vs 2 layers, fixed and random triggers

`Scale` sets the sizes: `QUICK` is CPU-sized (d=64, T=128, batch 32; the whole suite takes minutes), `DEFAULT`
matches the `quick` preset (d=128, T=128, batch 64) and `PAPER` the paper (d=128, T=256, batch 512; a GPU
job). Every run is a plain `train` call; runs write `metrics.jsonl` and `ckpt.pt` under `out/<name>/` and are
reused when that checkpoint exists with the same configs.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mechmem.analysis import transitions
from mechmem.checkpoint import load_checkpoint, read_payload
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.tasks import build_task
from mechmem.tasks.birth.corpus import load_stats
from mechmem.tasks.birth.models import full_config, simplified_config
from mechmem.tasks.birth.task import N_TOKENS, BirthConfig
from mechmem.training import TrainConfig, train
from mechmem.training.rundir import finished_run, read_metrics, run_identity

WK1, WK2, WO2 = "blocks.0.attn.W_K", "blocks.1.attn.W_K", "blocks.1.attn.W_O"


@dataclass(frozen=True)
class Scale:
    """Sizes shared by every run of the suite."""

    d_model: int
    """Residual width d."""
    seq_len: int
    """Sequence length T."""
    batch_size: int
    """Fresh sequences per step."""
    steps: int
    """Steps of the simplified-model runs."""
    full_steps: int
    """Steps of the full-model and W_F runs (slower to learn)."""
    freeze_step: int
    """Step until which the freezing runs hold matrices (300 in the paper)."""
    eval_every: int
    """Logging interval."""
    eval_samples: int
    """Held-out sequences per evaluation."""
    depth_seq_len: int
    """Sequence length of the full-model runs of (d) (the slowest)."""
    lr: float = 0.2
    """SGD learning rate (momentum 0.9, weight decay 1e-4)."""


QUICK = Scale(
    d_model=64,
    seq_len=128,
    batch_size=32,
    steps=600,
    full_steps=1000,
    freeze_step=300,
    eval_every=25,
    eval_samples=128,
    depth_seq_len=64,
)
DEFAULT = Scale(
    d_model=128,
    seq_len=128,
    batch_size=64,
    steps=1500,
    full_steps=3000,
    freeze_step=300,
    eval_every=50,
    eval_samples=256,
    depth_seq_len=128,
)
PAPER = Scale(
    d_model=128,
    seq_len=256,
    batch_size=512,
    steps=3000,
    full_steps=10000,
    freeze_step=300,
    eval_every=10,
    eval_samples=512,
    depth_seq_len=256,
)
SCALES = {"quick": QUICK, "default": DEFAULT, "paper": PAPER}


@dataclass(frozen=True)
class Run:
    """One training run of an experiment."""

    name: str
    """Directory name and key."""
    group: str
    """Experiment: freezing, ffn, data or depth."""
    label: str
    """Legend / table label."""
    model: TransformerConfig
    """Model config."""
    task: BirthConfig
    """Data config."""
    train: TrainConfig
    """Training config."""


def _sgd(scale: Scale, steps: int, frozen_until: tuple[tuple[str, int], ...] = ()) -> TrainConfig:
    return TrainConfig(
        steps=steps,
        batch_size=scale.batch_size,
        lr=scale.lr,
        optimizer="sgd",
        momentum=0.9,
        weight_decay=1e-4,
        eval_every=scale.eval_every,
        eval_samples=scale.eval_samples,
        frozen_until=frozen_until,
    )


def experiment_runs(scale: Scale, corpus: str | None = None) -> list[Run]:
    """Every run of experiments (a)-(d) at `scale`, on the statistics of `corpus` (None: tiny Shakespeare)."""
    n_tokens = N_TOKENS if corpus is None else load_stats(corpus).n_tokens
    d, T = scale.d_model, scale.seq_len
    simple = simplified_config(
        d_vocab=n_tokens, n_ctx=T, d_model=d, freeze_embeddings=True, freeze_unembedding=True
    )
    fixed = BirthConfig(seq_len=T, n_triggers=5, fixed_triggers=True, corpus=corpus)
    until = scale.freeze_step
    freezing = [
        ("freeze_none", "all trained jointly", ()),
        ("freeze_wk1_wk2", f"W_O^2 alone until {until}", ((WK1, until), (WK2, until))),
        ("freeze_wk1", f"W_K^1 frozen until {until}", ((WK1, until),)),
        ("freeze_wk2", f"W_K^2 frozen until {until}", ((WK2, until),)),
        ("freeze_wo2", f"W_O^2 frozen until {until}", ((WO2, until),)),
    ]
    runs = [
        Run(n, "freezing", label, simple, fixed, _sgd(scale, scale.steps, fz)) for n, label, fz in freezing
    ]
    runs += [
        Run(
            "ffn_joint",
            "ffn",
            "W_F, all layers jointly, random triggers",
            simplified_config(d_vocab=n_tokens, n_ctx=T, d_model=d, ffn=True),
            BirthConfig(seq_len=T, n_triggers=5, fixed_triggers=False, head_only_loss=False, corpus=corpus),
            _sgd(scale, scale.full_steps),
        ),
    ]
    data_variants = [
        ("data_k1_fixed", "K=1, fixed", {"n_triggers": 1}),
        ("data_k3_fixed", "K=3, fixed", {"n_triggers": 3}),
        ("data_k5_random", "K=5, random", {"fixed_triggers": False}),
        ("data_k5_bigram", "K=5, fixed, bigram outputs", {"outputs": "bigram"}),
        ("data_k5_ood", "K=5, fixed, OOD outputs", {"outputs": "ood"}),
    ]
    # K=5 fixed triggers with uniform outputs is the joint run of (a), "freeze_none".
    for name, label, change in data_variants:
        runs.append(Run(name, "data", label, simple, fixed.replace(**change), _sgd(scale, scale.steps)))
    for layers in (1, 2):
        model = full_config(d_vocab=n_tokens, n_ctx=scale.depth_seq_len, d_model=d, n_layers=layers)
        for trig in ("fixed", "random"):
            task = BirthConfig(
                seq_len=scale.depth_seq_len,
                n_triggers=5,
                fixed_triggers=trig == "fixed",
                head_only_loss=False,
                corpus=corpus,
            )
            runs.append(
                Run(
                    f"depth_{layers}l_{trig}",
                    "depth",
                    f"{layers} layer(s), {trig} triggers",
                    model,
                    task,
                    _sgd(scale, scale.full_steps),
                )
            )
    return runs


def run_experiment(run: Run, out_dir: Path, *, seed: int = 0, progress: bool = False) -> list[dict[str, Any]]:
    """Train `run` (or reuse its finished checkpoint) and return its metrics history."""
    run_dir = out_dir / run.name
    cfg = run.train.replace(seed=seed)
    run = Run(run.name, run.group, run.label, run.model, run.task, cfg)
    if not finished_run(run_dir, run_identity(run.model, "birth", run.task, cfg)):
        model = build_transformer(run.model, generator=torch.Generator().manual_seed(seed))
        train(
            model,
            build_task("birth", run.task),
            cfg,
            model_config=run.model,
            out_dir=run_dir,
            overwrite=True,
            progress=progress,
        )
    return read_metrics(run_dir)


@torch.no_grad()
def shifted_accuracy(ckpt_path: Path, outputs: str, *, n: int = 256, seed: int = 0) -> float:
    """Held-out in-context accuracy of a trained run on data whose outputs follow `outputs` instead of the
    training distribution (the paper's Fig. 4, centre: bigram-trained models tested on uniform outputs)."""
    ckpt = load_checkpoint(ckpt_path)
    task = build_task("birth", ckpt.task.config.replace(outputs=outputs))
    return task.evaluate(ckpt.model, generator=torch.Generator().manual_seed(seed), n=n)["eval_icl_acc"]


def training_seconds(runs: list[Run], out_dir: Path) -> float:
    """Total wall-clock training time of the finished runs, as recorded in their checkpoints."""
    paths = [out_dir / run.name / "ckpt.pt" for run in runs]
    return float(sum(read_payload(p)["metrics"].get("wall_time_s", 0.0) for p in paths if p.exists()))


def final(history: list[dict[str, Any]], key: str, window: int = 3) -> float:
    """Mean of `key` over the last `window` records that have it (training-batch metrics are absent from the
    end-of-training record)."""
    values = [rec[key] for rec in history if isinstance(rec.get(key), float)][-window:]
    return sum(values) / len(values) if values else float("nan")


def first_step(
    history: list[dict[str, Any]], key: str, threshold: float, *, below: bool = False
) -> int | None:
    """First logged step at which `key` reaches `threshold` (upwards, or downwards with `below`): the first
    save of `transitions.level_crossing` (the toolkit's one threshold crossing) on the logged curve of `key`.
    """
    steps = [int(rec["step"]) for rec in history]
    values = [rec[key] if isinstance(rec.get(key), float) else None for rec in history]
    rule = transitions.level(threshold, "down" if below else "up")
    return transitions.level_crossing(steps, values, rule, key).first_save


def at_step(history: list[dict[str, Any]], key: str, step: int) -> float:
    """Value of `key` at the last logged step <= `step`."""
    values = [rec[key] for rec in history if rec["step"] <= step and isinstance(rec.get(key), float)]
    return values[-1] if values else float("nan")


def late_rise(curve: list[float | None]) -> float | None:
    """Mean of the curve's last quarter minus the mean of the quarter before (None for fewer than 8 points):
    whether a run was still improving when it stopped."""
    values = [v for v in curve if v is not None]
    q = len(values) // 4
    if q < 2:
        return None
    return round(sum(values[-q:]) / q - sum(values[-2 * q : -q]) / q, 5)


def compact_history(history: list[dict[str, Any]], digits: int = 5) -> dict[str, list[Any]]:
    """A history as columns for the run record: {"step": [...], key: [value or None, ...]}, floats rounded."""
    keys = sorted({k for rec in history for k in rec}, key=lambda k: (k != "step", k))
    return {
        k: [round(rec[k], digits) if isinstance(rec.get(k), float) else rec.get(k) for rec in history]
        for k in keys
    }


def expand_history(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The inverse of `compact_history`: one record per logged step, absent values left out."""
    n = len(columns.get("step", []))
    return [{k: v[i] for k, v in columns.items() if v[i] is not None} for i in range(n)]
