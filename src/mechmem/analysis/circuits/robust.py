"""Circuit metrics that do not hang on one choice: a circuit's verdict under each ablation, and its
faithfulness integrated over circuit sizes.

    from mechmem.analysis.circuits import circuit_robustness
    robust = circuit_robustness(model, task, circuit)   # robust.verdict, robust.to_dataframe(), mechmem.plot

Which value an ablated edge carries, and where a ranking of edges is cut, can each flip a circuit's verdict
(Miller et al. 2024, "Transformer circuit metrics are not robust"). On held-out prompts, under each ablation:
(a) the circuit's gap, faithfulness and completeness and its verdict by the `Circuit`'s own rule
(`CONFIDENCE`); (b) the faithfulness f(k) = sum(m(top k) - m(empty)) / sum(m(full) - m(empty)) of the k
edges the circuit's scores rank highest (|score|), on MIB's grid of edge fractions, and its integrals over the
fraction axis x = k / edges by the trapezoid rule, as MIB does (Mueller et al. 2025, "MIB: A Mechanistic
Interpretability Benchmark"): CPR = area under f (higher is better), CMD = area under |1 - f| (0 is ideal).

Caveats: the ranking is the circuit's (scored under its own ablation), so another ablation's curve measures
that ranking, not the best circuit of each size; f(0) = 0 and f(1) = 1 by definition and f need not be
monotone; the grid is coarse below 1 / edges, so small graphs give few points. Intervals: 95% percentile
bootstrap over prompts, the same resamples for every size, measure and ablation; the verdicts here are judged
on these marginal intervals (not corrected for the criteria and looks, as the decided circuit's are), and
"mean" averages over the held-out prompts, so the mean ablation's verdict can differ from the circuit's own.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.circuits.discovery import circuit_prompts
from mechmem.analysis.circuits.edges import ABLATIONS, EdgePatcher, build_graph, circuit_intervals
from mechmem.analysis.circuits.record import Circuit
from mechmem.analysis.frames import short_repr
from mechmem.analysis.stats import CIRCUIT_PROMPTS, LEVEL, RESAMPLES, bootstrap_counts
from mechmem.io import strict_json
from mechmem.models.parts import model_device

MIB_FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""MIB's grid of edge fractions; each becomes round(fraction x edges) edges (0 and the circuit's size
added)."""
HELD_OUT_SEED = 1_000_003
"""Offset of the held-out prompts' seed from the discovery's (`circuit_prompts(seed + HELD_OUT_SEED)`)."""
MEASURES = ("gap", "faithfulness", "completeness", "cpr", "cmd")
"""Each ablation's measures: the circuit's criteria, then the areas over circuit sizes."""

Estimate = tuple[float, float, float]
"""(value, lower, upper): a point estimate and its 95% percentile bootstrap interval over prompts."""


@dataclass(frozen=True)
class AblationRobustness:
    """The circuit under one ablation."""

    ablation: str
    verdict: str
    """The `Circuit`'s verdict ("yes", "no", "undecided") judged on these prompts' bootstrap intervals."""
    criteria: dict[str, str]
    """Its criteria: "behaviour", "faithful", "sparse", "complete" (`Circuit.criteria`)."""
    measures: dict[str, Estimate]
    """Every name in `MEASURES` with its estimate."""
    curve: Float[Tensor, "size 3"]
    """Per size of the grid: f(k), its lower and upper bound."""
    seconds: float


@dataclass(frozen=True)
class CircuitRobustness:
    """A circuit's verdict under each ablation and its faithfulness over circuit sizes (module docstring)."""

    per_ablation: tuple[AblationRobustness, ...]
    sizes: tuple[int, ...]
    """Edges kept at each point of the curve (the top k by |score|), ascending; 0 and every edge included."""
    n_edges: int
    circuit_size: int
    """The circuit's own number of edges (one of `sizes`)."""
    n: int
    """Held-out prompts every number is measured on."""
    source: str
    """The prompts' pair, in words."""

    def __post_init__(self) -> None:
        for a in self.per_ablation:
            if a.curve.shape != (len(self.sizes), 3):
                raise ValueError(f"{a.ablation}: curve must be [size 3] with {len(self.sizes)} sizes")

    @property
    def fractions(self) -> Float[Tensor, " size"]:
        """Each size as a fraction of the graph's edges (the x axis CPR and CMD integrate over)."""
        return torch.tensor(self.sizes, dtype=torch.float64) / self.n_edges

    @property
    def verdict(self) -> str:
        """ "robust: V under every ablation" when the verdicts agree, else e.g. "yes under mean and
        corrupted, no under zero"."""
        groups: dict[str, list[str]] = {}
        for a in self.per_ablation:
            groups.setdefault(a.verdict, []).append(a.ablation)
        if len(groups) == 1:
            return f"robust: {self.per_ablation[0].verdict} under every ablation"
        return ", ".join(f"{v} under {_and(names)}" for v, names in groups.items())

    def __getitem__(self, ablation: str) -> AblationRobustness:
        for a in self.per_ablation:
            if a.ablation == ablation:
                return a
        raise KeyError(f"no ablation {ablation!r} (measured: {', '.join(self.ablations)})")

    @property
    def ablations(self) -> tuple[str, ...]:
        return tuple(a.ablation for a in self.per_ablation)

    def to_dataframe(self) -> Any:
        """Long form: `ablation`, `measure` (`MEASURES`, or "curve" for f(k)), `edges` and `fraction` (the
        circuit's for its criteria, each size's for the curve, NaN for the areas), `value`, `lower`,
        `upper`."""
        import pandas as pd

        rows, own = [], self.circuit_size / self.n_edges
        for a in self.per_ablation:
            for m, est in a.measures.items():
                at = (self.circuit_size, own) if m not in ("cpr", "cmd") else (float("nan"),) * 2
                rows.append((a.ablation, m, *at, *est))
            for k, x, est in zip(self.sizes, self.fractions.tolist(), a.curve.tolist()):
                rows.append((a.ablation, "curve", k, x, *est))
        columns = ["ablation", "measure", "edges", "fraction", "value", "lower", "upper"]
        return pd.DataFrame(rows, columns=columns)

    def to_dict(self) -> dict[str, Any]:
        """Strict JSON (NaN as null)."""
        return strict_json(
            {
                "verdict": self.verdict,
                "n": self.n,
                "pair": self.source,
                "n_edges": self.n_edges,
                "circuit_size": self.circuit_size,
                "sizes": list(self.sizes),
                "fractions": self.fractions.tolist(),
                "interval": f"{LEVEL:.0%} percentile bootstrap over prompts ({RESAMPLES} resamples)",
                "cpr": "area under f(k) over the edge fraction, trapezoid rule (MIB, Mueller et al. 2025)",
                "cmd": "area under |1 - f(k)| over the edge fraction, trapezoid rule (MIB)",
                "ablations": {
                    a.ablation: {
                        "verdict": a.verdict,
                        "criteria": a.criteria,
                        **{m: dict(zip(("value", "lower", "upper"), e)) for m, e in a.measures.items()},
                        "curve": {
                            k: a.curve[:, i].tolist() for i, k in enumerate(("value", "lower", "upper"))
                        },
                    }
                    for a in self.per_ablation
                },
                "timings_s": {a.ablation: a.seconds for a in self.per_ablation},
            }
        )

    def __repr__(self) -> str:
        return short_repr(
            "CircuitRobustness",
            f"{self.circuit_size} of {self.n_edges} edges, {self.n} held-out prompts",
            *(f"{a.ablation}: {a.verdict}, CPR {a.measures['cpr'][0]:.3f}" for a in self.per_ablation),
            self.verdict,
        )


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def size_grid(n_edges: int, circuit_size: int, sizes: Sequence[int] | None = None) -> tuple[int, ...]:
    """The curve's sizes in edges: `sizes` (default: `MIB_FRACTIONS` x `n_edges`, rounded) with 0, the
    circuit's size and every edge, sorted and distinct."""
    if sizes is None:
        sizes = [round(f * n_edges) for f in MIB_FRACTIONS]
    bad = [k for k in sizes if isinstance(k, bool) or not isinstance(k, Integral) or not 0 <= k <= n_edges]
    if bad:
        raise ValueError(f"sizes must be edge counts in [0, {n_edges}], got {bad}")
    return tuple(sorted({0, circuit_size, n_edges, *map(int, sizes)}))


def circuit_robustness(
    model: torch.nn.Module,
    task: Any,
    circuit: Circuit,
    *,
    ablations: Sequence[str] = ("mean", "corrupted", "zero"),
    sizes: Sequence[int] | None = None,
    n: int = CIRCUIT_PROMPTS,
    seed: int = 0,
    memory_mb: float = 256.0,
) -> CircuitRobustness:
    """The circuit's criteria and verdict under each ablation, and its faithfulness over circuit sizes with
    CPR and CMD, on `n` held-out prompts.

    Args:
        circuit: a `Circuit` of `model` (its `kept` edges and its `scores`, which rank the edges).
        ablations: what an ablated edge carries (`ABLATIONS`); "mean" averages over the held-out prompts.
        sizes: the curve's sizes in edges (default `MIB_FRACTIONS` of the graph; see `size_grid`).
        seed: the discovery's seed; the prompts are `circuit_prompts(model, task, n, seed + HELD_OUT_SEED)`.

    Every ablation runs its circuits in one batched engine call (`EdgePatcher.evaluate`).

    Example:
        >>> import mechmem
        >>> from mechmem.analysis.circuits import circuit_robustness
        >>> model = mechmem.planted_induction_model()
        >>> circuit, _ = mechmem.decided_circuit(model, None)
        >>> circuit_robustness(model, None, circuit).verdict   # position edges are outside the circuit
        'yes under mean and corrupted, no under zero'
    """
    if not isinstance(circuit, Circuit):
        raise TypeError(f"circuit must be a Circuit, got {type(circuit).__name__}")
    ablations, n_edges, kept = tuple(ablations), len(circuit.kept), circuit.kept.cpu()
    unknown = [a for a in ablations if a not in ABLATIONS]
    if not ablations or unknown or len(set(ablations)) < len(ablations):
        raise ValueError(f"ablations must be distinct names among {', '.join(ABLATIONS)}, got {ablations}")
    if n < 2:
        raise ValueError(f"n must be at least 2 prompts, got {n}")
    if len(build_graph(model).edges) != n_edges:
        raise ValueError(
            f"the circuit has {n_edges} edges, this model's graph {len(build_graph(model).edges)}"
        )
    pair, source = circuit_prompts(model, task, n, seed + HELD_OUT_SEED)
    pair = pair.to(model_device(model))
    grid = size_grid(n_edges, int(kept.sum()), sizes)
    rank = torch.empty(n_edges, dtype=torch.long)
    rank[circuit.scores.abs().argsort(descending=True, stable=True)] = torch.arange(n_edges)
    every = torch.ones(n_edges, dtype=torch.bool)
    masks = torch.cat([torch.stack([every, ~every, kept, ~kept]), rank[None] < torch.tensor(grid)[:, None]])
    x = torch.tensor(grid, dtype=torch.float64) / n_edges
    q = torch.tensor([(1 - LEVEL) / 2, (1 + LEVEL) / 2], dtype=torch.float64)
    counts = bootstrap_counts(
        n, generator=torch.Generator().manual_seed(seed)
    )  # circuit_intervals' resamples
    out = []
    for ablation in ablations:
        start = time.perf_counter()
        values = (
            EdgePatcher(model, pair, ablation, memory_mb=memory_mb).evaluate(masks).detach().double().cpu()
        )
        intervals = circuit_intervals(*values[:4], generator=torch.Generator().manual_seed(seed))
        means = dict(zip(("full", "empty", "circuit", "complement"), values[:4].mean(1).tolist()))
        judged = replace(circuit, values=means, intervals=intervals, decision=None, ablation=ablation, n=n)
        measures = {m: (float(getattr(judged, m)), *intervals[m]) for m in MEASURES[:3]}
        num, den = values[4:] - values[1], values[0] - values[1]  # circuit_k - empty, full - empty
        f, f_boot = (
            num.sum(1) / den.sum(),
            (counts @ num.T) / (counts @ den)[:, None],
        )  # [size], [resample size]
        for name, y, y_boot in (("cpr", f, f_boot), ("cmd", (1 - f).abs(), (1 - f_boot).abs())):
            low, high = torch.nanquantile(torch.trapezoid(y_boot, x, dim=-1), q).tolist()
            measures[name] = (float(torch.trapezoid(y, x)), low, high)
        curve = torch.stack([f, *torch.nanquantile(f_boot, q, dim=0)], dim=1).float()
        seconds = time.perf_counter() - start
        out.append(AblationRobustness(ablation, judged.verdict, judged.criteria(), measures, curve, seconds))
    return CircuitRobustness(tuple(out), grid, n_edges, int(kept.sum()), n, source)


def plot_robustness(result: CircuitRobustness, *, title: str = "") -> Any:
    """Faithfulness over circuit size, one line per ablation with its 95% band, the circuit's size marked."""
    from mechmem.plotting import plt

    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    x = result.fractions.numpy()
    for a in result.per_ablation:
        c = a.curve.numpy()
        cpr = a.measures["cpr"][0]
        (line,) = ax.plot(x, c[:, 0], "o-", ms=3, label=f"{a.ablation}: {a.verdict} (CPR {cpr:.2f})")
        ax.fill_between(x, c[:, 1], c[:, 2], color=line.get_color(), alpha=0.2)
    ax.axhline(1.0, color="#888888", lw=0.6, ls=":")
    ax.axvline(result.circuit_size / result.n_edges, color="k", lw=0.8, ls="--", label="the circuit's size")
    ax.set_xscale("symlog", linthresh=max(1.0 / result.n_edges, 1e-3))
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of edges kept (top |score|)")
    ax.set_ylabel("faithfulness f(k)")
    ax.legend(fontsize=8)
    ax.set_title(
        title or f"faithfulness over circuit size ({result.n} held-out prompts, 95% bootstrap)", fontsize=9
    )
    return fig
