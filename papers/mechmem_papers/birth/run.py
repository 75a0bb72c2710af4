"""Run the birth reproduction and record every number its page shows (the plugin's `run`; `spec` makes its
spec).

    python analyses/reproduce.py birth --variant quick                  # CPU sizes; finished runs are reused
    python analyses/reproduce.py birth --variant quick --set only=freezing,ffn --set preset=0
    python analyses/reproduce.py birth --page-only                      # the page again from the record
    python analyses/reproduce.py birth --variant quick --set executor=ray --set workers=2  # runs as Ray tasks

A variant names a `Scale` ("quick": CPU minutes per run; "default": the sizes of the `quick` preset; "paper":
the paper's, a GPU job). The run record holds, per run, the final metrics and the compact metric history; the
statements of the paper judged by their fixed rules (`statements`); the `quick` preset run with its
head-detection scores and attention maps; the data-generation speed; and the published values and the
authors'-code reference it was compared with, copied from their committed data files (`references`) so that
the record alone rebuilds the page.

Each training run is a cell of `mechmem_papers.executor.run_cells` (`run_cell`: train unless the checkpoint is
current, then the run's entry), in this process or as Ray tasks; finished checkpoints make a killed
reproduction resume.
"""

import json
import math
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from mechmem.analysis.heads import TASK_DATA, attention_patterns
from mechmem.analysis.roles import measure_pattern_evidence
from mechmem.checkpoint import load_checkpoint
from mechmem.tasks import get_preset
from mechmem.tasks.birth.corpus import load_stats
from mechmem.tasks.birth.data import TriggerSampler, generation_speed
from mechmem_papers.birth.experiments import (
    Run,
    compact_history,
    expand_history,
    experiment_runs,
    final,
    run_experiment,
    shifted_accuracy,
    training_seconds,
)
from mechmem_papers.birth.scale import attach_ladder
from mechmem_papers.birth.spec import BirthSpec
from mechmem_papers.birth.statements import Context, judge, load_published
from mechmem_papers.executor import Cell, run_cells, software

FINAL_KEYS = ("icl_acc", "eval_icl_acc", "eval_ood_icl_acc", "wo2_recall", "wk2_recall", "wk1_recall",
              "wk1_recall_64", "wf_kl", "global_loss")  # fmt: skip


def _run_entry(run: Run, history: list[dict[str, Any]]) -> dict[str, Any]:
    compact = compact_history(history)
    records = expand_history(compact)
    finals = {k: final(records, k) for k in FINAL_KEYS}
    return {
        "group": run.group,
        "label": run.label,
        "outputs": run.task.outputs,
        "final": {k: (None if math.isnan(v) else round(v, 5)) for k, v in finals.items()},
        "history": compact,
    }


def _shifted(run_dir: Path, seed: int) -> dict[str, float]:
    uniform, bigram = run_dir / "freeze_none" / "ckpt.pt", run_dir / "data_k5_bigram" / "ckpt.pt"
    if not (uniform.exists() and bigram.exists()):
        return {}
    return {
        "uniform_on_bigram": round(shifted_accuracy(uniform, "bigram", seed=seed), 5),
        "bigram_on_uniform": round(shifted_accuracy(bigram, "uniform", seed=seed), 5),
    }


@torch.no_grad()
def attention_maps(ckpt_path: Path, *, n_pos: int = 48, seed: int = 0) -> dict[str, Any]:
    """Both layers' attention on one fresh task sequence (first `n_pos` positions), for the attention figure.

    With its characters and the occurrence counter (1: a trigger's first occurrence, 2+: later ones).
    """
    ckpt = load_checkpoint(ckpt_path)
    batch = ckpt.task.eval_batch(1, generator=torch.Generator().manual_seed(seed))
    tokens = batch.tokens[:, :n_pos]
    patterns = attention_patterns(ckpt.model, tokens)[:, 0, 0]  # [layer query_pos key_pos]
    return {
        "source": str(ckpt_path),
        "chars": [ckpt.task.stats.chars[int(t)] for t in tokens[0]],
        "counter": batch.info["counter"][0, : tokens.shape[1]].tolist(),
        "patterns": [[[round(float(x), 3) for x in row] for row in layer] for layer in patterns.tolist()],
    }


@torch.no_grad()
def head_scores(ckpt_path: Path, *, n_samples: int = 64, seed: int = 0) -> dict[str, Any]:
    """Previous-token and induction scores per layer (head 0) on repeated random sequences and on task data.

    Measured by `roles.measure_pattern_evidence`, the report's and `analyses/detect_heads.py`'s one function:
    `heads.detect_heads` on repeated random sequences at every probe length of the role rule
    (docs/analyses.md; "random" is the best of them), and `heads.detect_heads_on_task` on the task's
    evaluation batch, which counts only the answer queries (the loss-masked positions: a trigger's later
    occurrences, where the induction head does its work) and, for previous-token, the positions an induction
    head reads. Scoring every query of the task batch would mix in the bigram-text positions, where no head
    has anything to look back for, and dilute the score with chance matches of the pattern. The higher of the
    two is the report's evidence of the head.
    """
    ckpt = load_checkpoint(ckpt_path)
    model, gen = ckpt.model, torch.Generator().manual_seed(seed)
    curves = measure_pattern_evidence(model, ckpt.task, n=n_samples, generator=gen).curves
    best = {
        name: {
            "random": curves[name]["score"][:-1].nan_to_num(0.0).amax(0),
            "task": curves[name]["score"][-1].nan_to_num(0.0),
        }
        for name in ("previous_token", "induction")
    }
    return {
        "n_samples": n_samples,
        "seed": seed,
        "task_data": TASK_DATA,
        "layers": [
            {f"{name}_{data}": round(float(best[name][data][layer, 0]), 5)
             for name in ("previous_token", "induction")
             for data in ("random", "task")}
            for layer in range(model.cfg.n_layers)
        ],
    }  # fmt: skip


def run_cell(run: Run, runs: Path, seed: int) -> dict[str, Any]:
    """One cell: train `run` under `runs` (or reuse its current checkpoint) and return its record entry."""
    return _run_entry(run, run_experiment(run, runs, seed=seed))


def _preset_run() -> Run:
    p = get_preset("birth", "quick")
    return Run("preset", "preset", "the `quick` preset", p.model, p.task, p.train)


def preset_cell(runs: Path, seed: int) -> dict[str, Any]:
    """The cell of the `quick` preset: its entry, with its settings and head-detection scores."""
    p, run = get_preset("birth", "quick"), _preset_run()
    entry = run_cell(run, runs, seed)
    settings = {
        "d_model": p.model.d_model, "seq_len": p.task.seq_len, "batch_size": p.train.batch_size,
        "optimizer": p.train.optimizer, "lr": p.train.lr, "steps": p.train.steps,
        "n_triggers": p.task.n_triggers, "fixed_triggers": p.task.fixed_triggers,
        "frozen": [g for g in p.model.frozen if g in ("embed.W_E", "unembed.W_U")],
    }  # fmt: skip
    return {**entry, "settings": settings, "heads": head_scores(runs / "preset" / "ckpt.pt", seed=seed)}


def _speed(spec: BirthSpec) -> dict[str, Any]:
    settings = {
        "seq_len": 256,
        "n_triggers": 5,
        "fixed_triggers": False,
        "batch": 512,
        "threads": spec.threads,
    }
    sampler = TriggerSampler(load_stats(spec.corpus), seq_len=256, n_triggers=5, fixed_triggers=False)
    fast, slow = generation_speed(sampler, batch=settings["batch"])
    return {
        **settings,
        "vectorised_per_s": round(fast, 1),
        "loop_per_s": round(slow, 1),
        "ratio": round(fast / slow, 2),
    }


def run(spec: BirthSpec, log: Any = print) -> dict[str, Any]:
    """Train (or reuse) every run of `spec`, measure, judge the statements; the JSON-able run record."""
    torch.set_num_threads(spec.threads)
    published = load_published()
    authors = json.loads((spec.references / "birth_authors_code.json").read_text())
    suite = experiment_runs(spec.scale, spec.corpus)
    chosen = [r for r in suite if r.group in spec.only]
    cells = [Cell(r.name, run_cell, {"run": r, "runs": spec.runs, "seed": spec.seed}) for r in chosen]
    if spec.preset:
        cells.append(Cell("preset", preset_cell, {"runs": spec.runs, "seed": spec.seed}))
    log(f"{len(cells)} run(s): " + ", ".join(c.key for c in cells) + f" ({spec.executor} executor)")
    records = run_cells(
        cells,
        None,
        executor=spec.executor,
        address=spec.address or None,
        progress="birth runs",
        num_cpus=spec.workers,
        threads=spec.threads,
    )
    entries = {r.name: records[r.name] for r in chosen}
    shifted = _shifted(spec.runs, spec.seed)
    timed = chosen + [_preset_run()] if spec.preset else chosen
    preset = records.get("preset")
    attention_source = spec.runs / ("preset" if spec.preset else "freeze_none") / "ckpt.pt"
    histories = {name: expand_history(e["history"]) for name, e in entries.items()}
    context = Context(histories, spec.scale.freeze_step, suite[0].model.d_vocab, shifted)
    record = {
        "paper": "birth",
        "variant": spec.variant,
        "command": spec.command,
        "scale": asdict(spec.scale),
        "seed": spec.seed,
        "corpus": spec.corpus,
        "n_tokens": suite[0].model.d_vocab,
        "training_s": round(training_seconds(timed, spec.runs), 1),
        "machine": f"{os.cpu_count()} CPU cores, {spec.threads} torch thread(s)",
        "software": software(),
        "optimizer": {k: getattr(suite[0].train, k) for k in ("optimizer", "momentum", "weight_decay")},
        "runs": entries,
        "not_run": [{"name": r.name, "group": r.group, "label": r.label} for r in suite if r not in chosen],
        "shifted": shifted,
        "statements": judge(published, context),
        "preset": preset,
        "attention": attention_maps(attention_source, seed=spec.seed) if attention_source.exists() else None,
        "speed": _speed(spec) if spec.speed else None,
        "published": {k: v for k, v in published.items() if k != "statements"},
        "authors_code": authors,
    }
    return attach_ladder(record, spec.references)  # the committed ladder (papers/birth/scripts/scale.py)
