"""The constructions experiments, each JSON-able.

Appendix A, the S x top_fraction sweep, capacities per mode.
"""

from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from mechmem.errors import MechmemError
from mechmem.io import atomic_write, dumps
from mechmem.tasks.facts import generate_facts
from mechmem_papers.executor import append_record, load_records
from mechmem_papers.memorisation.capacity import (
    THRESHOLDS,
    CapacityResult,
    accuracy_criteria,
    measure_capacity,
)
from mechmem_papers.memorisation.constructions.appendix_a import appendix_a
from mechmem_papers.memorisation.constructions.evaluators import (
    EVALUATORS,
    Evaluator,
    SweepGrid,
    published_stack,
)
from mechmem_papers.memorisation.constructions.model import ChallengeConfig, ChallengeMLP
from mechmem_papers.memorisation.constructions.training import (
    hidden_activations,
    stacked_accuracy,
    train_full,
)
from mechmem_papers.memorisation.fits import ScalingFit, fit_scaling


@dataclass
class AppendixACheck:
    """Accuracy of Appendix A on all n_in^2 facts, with the bias neuron and with an output bias."""

    n_in: list[int]
    acc_bias_neuron: list[float]
    acc_output_bias: list[float]

    def __post_init__(self) -> None:
        if not len(self.n_in) == len(self.acc_bias_neuron) == len(self.acc_output_bias):
            raise MechmemError("AppendixACheck: lists must have equal length")

    def to_dict(self) -> dict:
        return asdict(self)


def appendix_a_accuracy(n_in: int, n_out: int, *, output_bias: bool) -> float:
    """Build Appendix A into a `ChallengeMLP` for all n_in^2 facts and return its argmax accuracy."""
    inputs, labels = generate_facts(n_in * n_in, n_in, n_out)
    E1, E2, U, b = appendix_a(inputs, labels, n_in, n_out, output_bias=output_bias)
    cfg = ChallengeConfig(n_in, E1.shape[1], n_out, output_bias=output_bias)
    model = ChallengeMLP(cfg).set_weights(E1[None], E2[None], U[None], None if b is None else b[None])
    with torch.no_grad():
        return float(stacked_accuracy(model(inputs), labels)[0])


def check_appendix_a(n_ins: tuple[int, ...] = (8, 16, 32)) -> AppendixACheck:
    """Appendix A at n_out = n_in (labels spread over all n_in values)."""
    return AppendixACheck(
        list(n_ins),
        [appendix_a_accuracy(n, n, output_bias=False) for n in n_ins],
        [appendix_a_accuracy(n, n, output_bias=True) for n in n_ins],
    )


@dataclass
class SweepResult:
    """Hand-coded accuracy of the published construction over the S x top_fraction grid at one fact count."""

    d: int
    n_facts: int
    s_values: list[int]
    top_fractions: list[float]
    accuracy: list[list[float]]  # [S][top_fraction]

    def __post_init__(self) -> None:
        if len(self.accuracy) != len(self.s_values) or any(
            len(r) != len(self.top_fractions) for r in self.accuracy
        ):
            raise MechmemError("SweepResult: accuracy must be S x top_fraction")

    def to_dict(self) -> dict:
        return asdict(self)


def published_sweep(d: int, n_facts: int, grid: SweepGrid, seed: int = 0) -> SweepResult:
    """Accuracy of every (S, top_fraction) setting (best of `grid.retries` tie-breaks)."""
    s_values = [s for s in grid.s_values if s <= d]
    settings = [(s, tf) for s in s_values for tf in grid.top_fractions]
    inputs, labels = generate_facts(n_facts, 2 * d, d)
    best = torch.zeros(len(settings))
    for retry in range(grid.retries):
        E1, E2, U = published_stack(n_facts, d, settings, seed + retry)
        best = torch.maximum(best, stacked_accuracy(hidden_activations(E1, E2, inputs) @ U, labels))
    acc = best.view(len(s_values), len(grid.top_fractions))
    return SweepResult(d, n_facts, s_values, list(grid.top_fractions), acc.tolist())


def recorded(evaluate: Evaluator, path: Path, cell: str) -> Evaluator:
    """`evaluate`, each score read from the records file `path` if cell `cell` has it there, else computed
    and appended, so a search stopped part-way resumes after its last finished evaluation."""
    scores = {
        int(r["n"]): r["score"] for r in load_records(path, flat=True).values() if r.get("cell") == cell
    }

    def evaluate_once(n: int) -> float:
        if n not in scores:
            scores[n] = evaluate(n)
            append_record(path, f"{cell}|n={n}", {"cell": cell, "n": n, "score": scores[n]}, flat=True)
        return scores[n]

    return evaluate_once


def forget(path: Path, cells: set[str]) -> None:
    """Drop the evaluations of `cells` (finished searches) from the records file `path`, keeping those of
    other searches (one stopped part-way in an earlier run); the file goes when none is left."""
    kept = [r for r in load_records(path, flat=True).values() if r.get("cell") not in cells]
    if kept:
        atomic_write(path, "".join(dumps(r) + "\n" for r in kept))
    else:
        path.unlink(missing_ok=True)


def construction_capacity(
    mode: str, d: int, grid: SweepGrid, *, precision: int = 8, evaluations: tuple[Path, str] | None = None
) -> CapacityResult:
    """Capacity of one mode at size d under acc = 1 and acc >= 0.9.

    Found by a doubling bracket from n = d, limit 4 d^2. `evaluations` (records file, cell key): each fact
    count's score is kept there as it finishes (`recorded`); `seconds` then counts this run's time only.
    """
    if mode not in EVALUATORS:
        raise MechmemError(f"unknown mode {mode!r} (known: {', '.join(EVALUATORS)})")
    evaluate = EVALUATORS[mode](d, grid)
    return measure_capacity(
        recorded(evaluate, *evaluations) if evaluations else evaluate,
        accuracy_criteria(),
        4 * d * d,
        name=mode,
        d=d,
        precision=precision,
        bracket="doubling",
        start=d,
        score="accuracy",
    )


def capacity_of(results: list[CapacityResult], mode: str, d: int, criterion: str) -> int | None:
    """The capacity of `mode` at `d` under `criterion` ("1" or "0.9"), None if not measured."""
    found = [r[criterion] for r in results if r.name == mode and r.d == d and criterion in r.searches]
    return found[-1] if found else None


def mode_fit(
    results: list[CapacityResult], mode: str, criterion: str, ds: list[int] | None = None
) -> ScalingFit:
    """`fit_scaling` of one mode's capacities over `ds` (default: every size it was measured at)."""
    ds = sorted({r.d for r in results}) if ds is None else ds
    pts = [(d, capacity_of(results, mode, d, criterion)) for d in ds]
    return fit_scaling([d for d, c in pts if c], [float(c) for d, c in pts if c])


def shared_ds(results: list[CapacityResult], *modes: str) -> list[int]:
    """Sizes at which every given mode has both capacities (ratios of fits use only these)."""
    ds = sorted({r.d for r in results})
    return [
        d for d in ds if all(capacity_of(results, m, d, c) is not None for m in modes for c in THRESHOLDS)
    ]


def fit_ratio(results: list[CapacityResult], num: str, den: str, criterion: str) -> float:
    """a(num) / a(den) of the fixed-exponent fits over the sizes both modes have (nan if none)."""
    ds = shared_ds(results, num, den)
    a, b = mode_fit(results, num, criterion, ds).a, mode_fit(results, den, criterion, ds).a
    return a / b if ds and b > 0 else float("nan")


def trained_weights(d: int, n_facts: int, grid: SweepGrid, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(E1, E2, U, best accuracy) of the best of `grid.n_inits` trained models on n_facts facts."""
    inputs, labels = generate_facts(n_facts, 2 * d, d)
    model = ChallengeMLP(
        ChallengeConfig(2 * d, d, d, n_models=grid.n_inits), generator=torch.Generator().manual_seed(seed)
    )
    best, (E1, E2, U) = train_full(model.E1, model.E2, model.U, inputs, labels, grid.train)
    i = int(best.argmax())
    return E1[i], E2[i], U[i], best[i]
