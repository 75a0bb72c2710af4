"""Run the birth experiment suite and write its report: the engine behind `analyses/reproduce_birth.py`."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mechmem.papers.birth import page, plots
from mechmem.papers.birth.corpus import load_stats
from mechmem.papers.birth.data import TriggerSampler, generation_speed
from mechmem.papers.birth.experiments import (
    Run,
    Scale,
    read_history,
    run_experiment,
    shifted_accuracy,
    training_seconds,
)


@dataclass(frozen=True)
class Reproduction:
    """Where a suite's runs and report go, and what else the report includes."""

    runs: list[Run]
    """The runs to train (or reuse)."""
    scale: Scale
    """Their sizes."""
    run_dir: Path
    """Directory holding one sub-directory per run."""
    doc: Path
    """Markdown report; figures go to `doc.parent / "figures"`."""
    command: str
    """The command line recorded in the report."""
    seed: int = 0
    """Seed of every run and of the report's sampled sequences."""
    corpus: str | None = None
    """Corpus statistics used by the runs (None: tiny Shakespeare)."""
    preset_run: Path | None = None
    """Run directory of the `quick` preset, reported against the done-when targets."""
    measure_speed: bool = True
    """Measure data-generation speed for the report."""


def _preset_extras(run: Path) -> tuple[Any, Any]:
    preset = (read_history(run), f"python analyses/train.py birth --preset quick --out {run}")
    heads_json = run / "heads" / "detect_heads.json"
    heads = None
    if heads_json.exists():
        command = f"python analyses/detect_heads.py {run}/ckpt.pt --out {run}/heads --n-samples 64"
        heads = (json.loads(heads_json.read_text()), command)
    return preset, heads


def _shifted(run_dir: Path, seed: int) -> dict[str, float]:
    uniform, bigram = run_dir / "freeze_none" / "ckpt.pt", run_dir / "data_k5_bigram" / "ckpt.pt"
    if not (uniform.exists() and bigram.exists()):
        return {}
    return {
        "uniform_on_bigram": shifted_accuracy(uniform, "bigram", seed=seed),
        "bigram_on_uniform": shifted_accuracy(bigram, "uniform", seed=seed),
    }


def reproduce(spec: Reproduction, *, log: Any = print) -> tuple[list[tuple[str, str, bool | None]], float]:
    """Train every run, write figures and the report; returns the statement rows and total training seconds."""
    histories = {}
    for i, run in enumerate(spec.runs, 1):
        log(f"[{i}/{len(spec.runs)}] {run.name}: {run.label}")
        histories[run.name] = run_experiment(run, spec.run_dir, seed=spec.seed)
    wall = training_seconds(spec.runs, spec.run_dir)
    preset_ckpt = spec.preset_run / "ckpt.pt" if spec.preset_run else None
    fig_dir = spec.doc.parent / "figures"
    figs = plots.make_figures(
        spec.runs, histories, spec.scale, run_dir=spec.run_dir, fig_dir=fig_dir, seed=spec.seed,
        attention_ckpt=preset_ckpt,
    )  # fmt: skip
    preset, heads = _preset_extras(spec.preset_run) if spec.preset_run else (None, None)
    shifted = _shifted(spec.run_dir, spec.seed)
    speed = None
    if spec.measure_speed:
        sampler = TriggerSampler(load_stats(spec.corpus), seq_len=256, n_triggers=5, fixed_triggers=False)
        speed = generation_speed(sampler)
    text = page.markdown(
        spec.runs, histories, spec.scale, command=spec.command, figures=figs, wall_s=wall, preset=preset,
        heads=heads, speed=speed, shifted=shifted,
    )  # fmt: skip
    spec.doc.parent.mkdir(parents=True, exist_ok=True)
    spec.doc.write_text(text)
    return page.statements(histories, spec.scale, shifted), wall
