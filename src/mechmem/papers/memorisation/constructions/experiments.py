"""The experiments behind `analyses/reproduce_constructions.py`, each returning a small serialisable result."""

import math
import time
from dataclasses import asdict, dataclass, field

import torch

from mechmem.papers.memorisation.constructions.appendix_a import appendix_a
from mechmem.papers.memorisation.constructions.capacity import (
    EVALUATORS,
    SweepGrid,
    fixed_exponent_fit,
    free_exponent_fit,
    max_facts,
    memoised,
    published_stack,
)
from mechmem.papers.memorisation.constructions.model import ChallengeConfig, ChallengeMLP
from mechmem.papers.memorisation.constructions.training import hidden_activations, stacked_accuracy, train_full
from mechmem.errors import MechmemError
from mechmem.papers.memorisation.data import generate_facts

THRESHOLDS = (1.0, 0.9)


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


@dataclass
class CapacityResult:
    """Max facts per (mode, d, threshold), with the evaluations they came from and fits."""

    ds: list[int]
    modes: list[str]
    precision: dict[str, int]
    capacity: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # mode -> d -> threshold
    evaluations: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)  # mode -> d -> n -> acc
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    spot: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # trained accuracy at chosen (d, n): d -> n -> acc
    runs: list[str] = field(default_factory=list)  # the commands that contributed to this file

    def get(self, mode: str, d: int, threshold: float) -> int | None:
        return self.capacity.get(mode, {}).get(str(d), {}).get(f"{threshold:g}")

    def fits(self, mode: str, threshold: float, ds: list[int] | None = None) -> dict[str, float]:
        """Fixed-exponent prefactor a (a d^2 / ln d) and the free power-law exponent, over `ds` (default all)."""
        ds = [d for d in (self.ds if ds is None else ds) if self.get(mode, d, threshold)]
        caps = [float(self.get(mode, d, threshold)) for d in ds]  # type: ignore[arg-type]
        _, b = free_exponent_fit(ds, caps)
        return {"a": fixed_exponent_fit(ds, caps), "exponent": b}

    def shared_ds(self, *modes: str) -> list[int]:
        """Sizes at which every given mode has both capacities (ratios of fits use only these)."""
        return [d for d in self.ds if all(self.get(m, d, t) is not None for m in modes for t in THRESHOLDS)]

    def fit_ratio(self, num: str, den: str, threshold: float) -> float:
        """a(num) / a(den) of the fixed-exponent fits over the sizes both modes have."""
        ds = self.shared_ds(num, den)
        a, b = self.fits(num, threshold, ds)["a"], self.fits(den, threshold, ds)["a"]
        return a / b if ds and b > 0 else float("nan")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CapacityResult":
        return cls(**data)


def measure_capacity(
    result: CapacityResult, mode: str, d: int, grid: SweepGrid, *, precision: int, log=print
) -> None:
    """Binary-search mode's capacity at d for both thresholds and store it in `result`."""
    if mode not in EVALUATORS:
        raise MechmemError(f"unknown mode {mode!r} (known: {', '.join(EVALUATORS)})")
    evaluate = memoised(EVALUATORS[mode](d, grid))
    start = time.perf_counter()
    caps = {}
    for threshold in THRESHOLDS:
        caps[f"{threshold:g}"] = max_facts(evaluate, threshold, start=d, limit=4 * d * d, precision=precision)
    result.capacity.setdefault(mode, {})[str(d)] = caps
    result.evaluations.setdefault(mode, {})[str(d)] = {str(n): a for n, a in sorted(evaluate.cache.items())}
    result.seconds.setdefault(mode, {})[str(d)] = round(time.perf_counter() - start, 1)
    log(
        f"  {mode:17s} d={d:3d}  acc=1: {caps['1']:5d}  acc>=0.9: {caps['0.9']:5d}  ({result.seconds[mode][str(d)]}s)"
    )


def trained_weights(d: int, n_facts: int, grid: SweepGrid, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(E1, E2, U, best accuracy) of the best of `grid.n_inits` trained models on n_facts facts."""
    inputs, labels = generate_facts(n_facts, 2 * d, d)
    model = ChallengeMLP(
        ChallengeConfig(2 * d, d, d, n_models=grid.n_inits), generator=torch.Generator().manual_seed(seed)
    )
    best, (E1, E2, U) = train_full(model.E1, model.E2, model.U, inputs, labels, grid.train)
    i = int(best.argmax())
    return E1[i], E2[i], U[i], best[i]


def ln_scale(d: int) -> float:
    """d^2 / ln d, the capacity scale of the fits."""
    return d * d / math.log(d)
