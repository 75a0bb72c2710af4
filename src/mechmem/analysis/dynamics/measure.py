"""Training dynamics: run the toolkit's analyses on every step checkpoint of a run, in step order.

`mechmem train --save-every N` keeps `RUN_DIR/checkpoints/step_N.pt`. `run_dynamics(RUN_DIR)` loads them
in step order (one model is built from the first, later weights are loaded into it), measures the named
`QUANTITIES` on each, all on one evaluation draw (seeded with `seed`), and returns a step x curve table
with each quantity's definition, the 95% interval of each value that is a mean over the evaluation
units, and the rule each curve's event is read with (`mechmem.analysis.transitions`, on the point
curves).

Caveat: the levels are conventions stated before the run; an event's precision is one save interval. The
first point is the first save. Models without attention heads get only the `loss` curves.
"""

import fnmatch
import itertools
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from mechmem.analysis import ablation, composition, heads, logit_lens, patching, probes, roles
from mechmem.analysis.circuits.discovery import circuit_prompts
from mechmem.analysis.dynamics.progress import FixedCircuit, fixed_circuit, progress_measures
from mechmem.analysis.frames import short_repr
from mechmem.analysis.heads import no_attention_reason
from mechmem.analysis.stats import RatioMoments, mean_interval, normal_interval
from mechmem.analysis.transitions import Event, Rule, find_events, level, steepest
from mechmem.checkpoint import Checkpoint, load_checkpoint, read_payload
from mechmem.config import resolve_device
from mechmem.errors import CheckpointError, MechmemError, one_line
from mechmem.models.checks import (
    check_choices,
    check_count,
    check_finite_weights,
    check_n_samples,
    check_path,
    check_seed,
)
from mechmem.models.parts import Head, model_device
from mechmem.models.weights import load_canonical_state_dict
from mechmem.tasks.base import Batch, PatchingPair, masked_accuracy
from mechmem.training.interventions import describe
from mechmem.training.rundir import payload_identity, run_differences, step_checkpoints

STEP_NAME = re.compile(r"step_(\d+)\.pt")


def step_files(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every `checkpoints/step_N.pt` in `run_dir`, by step; a one-line error when none."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise MechmemError(f"{run_dir}: not a run directory")
    found = [(int(m.group(1)), p) for p in step_checkpoints(run_dir) if (m := STEP_NAME.fullmatch(p.name))]
    if not found:
        raise MechmemError(
            f"{run_dir}: no step checkpoints (checkpoints/step_N.pt); train with mechmem train --save-every N"
        )
    if twice := sorted({s for s, _ in found if [t for t, _ in found].count(s) > 1}):
        raise MechmemError(
            f"{run_dir}: more than one checkpoint for step(s) {twice[:5]} (e.g. step_50.pt and "
            "step_0000050.pt); keep one per step"
        )
    return sorted(found)


def run_dir_of(checkpoint: str | Path) -> Path:
    """The run directory of a checkpoint file: its folder, or the run above `checkpoints/step_N.pt`."""
    folder = Path(checkpoint).parent
    if folder.name == "checkpoints" and STEP_NAME.fullmatch(Path(checkpoint).name):
        return folder.parent
    return folder


def iter_models(files: Sequence[tuple[int, Path]], device: str = "cpu") -> Iterator[tuple[int, Checkpoint]]:
    """Yield (step, checkpoint) in order; one model object is reused, each step's weights loaded into it.
    Every file must be of the first's run, else a one-line `CheckpointError` names the differences."""
    first = load_checkpoint(files[0][1], device=resolve_device(device))
    identity = payload_identity(read_payload(files[0][1]))
    yield files[0][0], first
    for step, path in files[1:]:
        payload = read_payload(path)
        diff = run_differences(payload, identity)  # model, task and training: the identity --resume checks
        if diff:
            raise CheckpointError(f"{path}: not the same run as {files[0][1].name} ({', '.join(diff[:4])})")
        try:
            load_canonical_state_dict(first.model, payload["state_dict"])
        except (RuntimeError, MechmemError) as exc:
            raise CheckpointError(
                f"{path}: weights do not fit the model ({str(exc).splitlines()[0]})"
            ) from None
        yield step, first


@dataclass
class EvalData:
    """The evaluation data every step is measured on, drawn once from the task (each part from its seed)."""

    task: Any
    n: int
    seed: int
    device: torch.device
    circuit: FixedCircuit | None = None
    """The circuit the `circuit` quantity keeps at every step (None: each model's own decided circuit)."""
    circuit_skipped: str = ""
    """Why the `circuit` quantity is not measured on this run ("" when it is)."""

    def _gen(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1000 + offset)

    @cached_property
    def batch(self) -> Batch:
        return self.task.eval_batch(self.n, generator=self._gen(1)).to(self.device)

    @cached_property
    def reference(self) -> torch.Tensor:
        """A second evaluation draw, the reference of mean ablation."""
        return self.task.eval_batch(self.n, generator=self._gen(2)).tokens.to(self.device)

    def circuit_pair(self, model: Any) -> PatchingPair:
        """The progress measures' prompts: the task's pair (`circuit_prompts`, seeded from `seed`; the same
        draw for every model of one architecture), drawn once."""
        if not hasattr(self, "_circuit_pair"):
            pair, _ = circuit_prompts(model, self.task, self.n, self.seed * 1000 + 5)
            self._circuit_pair = pair.to(self.device)
        return self._circuit_pair

    @cached_property
    def pair(self) -> PatchingPair | None:
        try:
            return self.task.patching_pair(self.n, generator=self._gen(3)).to(self.device)
        except NotImplementedError:
            return None


@dataclass(frozen=True)
class CurvePoint:
    """One curve's value at one step, with its 95% interval over the evaluation units."""

    value: float
    lower: float = math.nan
    """Lower end of the 95% interval (NaN: none, e.g. exact or not a mean over units)."""
    upper: float = math.nan
    """Upper end of it."""
    exact: bool = False
    """Read off the weights with no sampled data: no interval because there is no sampling."""


def ratio_point(value: float, moments: RatioMoments) -> CurvePoint:
    """`value` with the delta method's normal 95% interval of a ratio of sums over units (`moments`)."""
    lower, upper = normal_interval(value, float(moments.stderr()))
    return CurvePoint(value, lower, upper)


@torch.no_grad()
def _loss(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    b = data.batch
    logits = model(b.tokens)
    mask = b.loss_mask.float()
    hits, rows = ((logits.argmax(-1) == b.targets).float() * mask).sum(-1), mask.sum(-1)
    losses = RatioMoments.from_values(ablation.sequence_losses(b)(logits), rows)
    return {
        "loss": ratio_point(float(data.task.loss(logits, b)), losses),
        "acc": ratio_point(
            masked_accuracy(logits, b.targets, b.loss_mask), RatioMoments.from_values(hits, rows)
        ),
    }


def head_points(
    value: Tensor, lower: Tensor, upper: Tensor, *, prefix: str = "", suffix: str = ""
) -> dict[str, CurvePoint]:
    """One point per head of [layer head] values and bounds, named prefix + head + suffix."""
    cells = itertools.product(range(value.shape[0]), range(value.shape[1]))
    return {
        f"{prefix}{Head(l, h)}{suffix}": CurvePoint(*(float(t[l, h]) for t in (value, lower, upper)))
        for l, h in cells
    }


def _heads(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    found = heads.detect_heads_on_task(model, data.batch.tokens, data.batch.loss_mask > 0)
    out = {}
    for name, s in found.scores.items():
        out |= head_points(s, found.lower[name], found.upper[name], suffix=f".{name}")
    return out


def _probes(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    own = data.task.probes(model)  # read off the weights against the task's own statistics: exact
    if own:
        return {name: CurvePoint(value, exact=True) for name, value in own.items()}
    out = {}
    for p in probes.builtin_probes(model).probes:
        sampled = p.intervals.get("recall")
        out[p.name] = CurvePoint(p.recall, *sampled) if sampled else CurvePoint(p.recall, exact=True)
    return out


def _lens(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    b = data.batch
    summary = logit_lens.logit_lens(model, b.tokens, b.targets, b.loss_mask).summary()
    return {
        f"lens.{stage}": CurvePoint(v["target_prob"], v["target_prob_lower"], v["target_prob_upper"])
        for stage, v in summary.items()
    }


def _ablation(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    b = data.batch
    loss = ablation.SequenceMetric(ablation.sequence_losses(b), b.loss_mask.float().sum(-1))
    result = ablation.ablate_heads(model, b.tokens, loss, methods=("mean",), reference=data.reference)
    lower, upper = result.intervals.bounds("head")
    return head_points(result.heads[0] - result.baseline, lower[0], upper[0], prefix="ablation.")


def _patching(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    if data.pair is None:
        return {}
    result = patching.run_sweeps(model, data.pair, ("attn_head_out_all_pos",))["attn_head_out_all_pos"]
    iv = result.intervals
    return head_points(result.normalised(), iv.normalised_lower, iv.normalised_upper, prefix="patching.")


def _composition(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    if composition.no_pairs_reason(model):
        return {}
    found = composition.composition_scores(model, generator=data._gen(4))
    b = found.baseline
    out = {}
    for mode, s in found.scores.items():
        best = s.masked_fill(~found.mask | s.isnan(), float("-inf")).amax(dim=(0, 1))  # [layer head]
        out[f"random.{mode}_composition"] = CurvePoint(b.mean, b.lower, b.upper)
        for layer, head in itertools.product(range(1, best.shape[0]), range(best.shape[1])):
            value = float(best[layer, head])
            out[f"{Head(layer, head)}.{mode}_composition"] = CurvePoint(
                value if math.isfinite(value) else math.nan, exact=True
            )
    return out


def _circuit(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    if data.circuit_skipped:
        return {}
    pair = data.circuit_pair(model)
    circuit = data.circuit or fixed_circuit(model, data.task, seed=data.seed)
    m = progress_measures(model, pair, circuit)
    out = {}
    for name in ("full", "restricted", "excluded"):
        mean, lower, upper = mean_interval(m.of(name))
        out[f"circuit.{name}_loss"] = CurvePoint(float(mean), float(lower), float(upper))
    mean, lower, upper = mean_interval(m.of("excluded") - m.of("full"))  # paired per prompt
    out["circuit.excluded_gap"] = CurvePoint(float(mean), float(lower), float(upper))
    empty = m.of("empty", "logit_diff")
    num, den = m.of("restricted", "logit_diff") - empty, m.of("full", "logit_diff") - empty
    faithfulness = float(num.sum() / den.sum()) if float(den.sum()) != 0 else math.nan
    out["circuit.faithfulness"] = ratio_point(faithfulness, RatioMoments.from_values(num, den))
    return out


CIRCUIT_RULES = {
    "circuit.full_loss": steepest("down"),
    "circuit.restricted_loss": level(math.log(2), "down"),
    "circuit.excluded_gap": level(math.log(2)),
    "circuit.faithfulness": level(0.8),
}
"""The events of the `circuit` quantity's curves (conventions fixed before any run): the restricted loss
falls below ln 2 nats (the circuit alone gives the answer a probability above 1/2 on geometric mean), the
excluded gap (excluded - full loss) rises above ln 2 nats (the model needs the circuit: removing it at least
halves the answer's probability), the faithfulness reaches 0.8 (`CONFIDENCE["min_faithfulness"]`), the full
loss's steepest fall; the excluded loss itself has no event (read it through its gap)."""


def _roles(model: Any, data: EvalData) -> dict[str, CurvePoint]:
    result = roles.head_roles(model, data.task, n=data.n, seed=data.seed)
    out = {f"{h.name}.role={h.role}": CurvePoint(1.0) for h in result.heads if h.role != "none"}
    out.update(
        {f"{h.name}.{r}_score": CurvePoint(h.task(r).score) for h in result.heads for r in result.task_roles}
    )
    return out


@dataclass(frozen=True)
class Quantity:
    """A named measurement of one checkpoint: its curves, what they mean, and the rule of each event."""

    name: str
    fn: Callable[[Any, EvalData], dict[str, CurvePoint]]
    definition: str
    rule: Callable[[str], Rule | None]
    interval: str
    """How its curves' 95% intervals are computed, or why they have none."""
    missing: float | None = None
    """The value of a curve at a step where the quantity did not produce it (None: not measured)."""
    needs_heads: bool = True
    """Measured only on models with attention heads (`heads.no_attention_reason`); others get no curves."""


QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (
        Quantity(
            "loss",
            _loss,
            "the task's loss and masked accuracy on the evaluation batch",
            lambda c: steepest("down") if c == "loss" else level(0.5),
            "95% over sequences: loss and accuracy are ratios of sums over sequences (summed per sequence "
            "over its masked positions), value -+ 1.96 delta-method standard errors (RatioMoments)",
            needs_heads=False,
        ),
        Quantity(
            "heads",
            _heads,
            "attention mass on the pattern's keys on the task's evaluation data (answer queries; "
            "previous-token where induction reads), per head: L{layer}H{head}.{pattern}",
            lambda c: level(0.5),
            "95% percentile bootstrap over sequences (HeadScores.lower / upper)",
        ),
        Quantity(
            "probes",
            _probes,
            "memory recalls: the task's own probes (Task.probes) or the built-in probes "
            "(fraction of inputs whose best-scoring output is the target)",
            lambda c: steepest("down") if c.endswith("kl") else level(0.9),
            "exact: read off the weights with no sampled data, so no interval; a probe against sampled "
            "statistics keeps its 95% bootstrap interval (ProbeResult.intervals)",
        ),
        Quantity(
            "lens",
            _lens,
            "logit lens: mean target probability over the masked positions at each residual stage",
            lambda c: steepest("up"),
            "95% percentile bootstrap over sequences (LogitLensResult.summary)",
        ),
        Quantity(
            "ablation",
            _ablation,
            "rise of the task loss when the head's output is mean-ablated (reference: a "
            "second evaluation batch)",
            lambda c: steepest("up"),
            "95% percentile bootstrap over sequences of the loss rise, each sequence paired with itself "
            "unablated (AblationResult.intervals)",
        ),
        Quantity(
            "patching",
            _patching,
            "fraction of the clean-corrupted logit difference restored by patching the "
            "head's output (all positions) from the clean run into the corrupted one",
            lambda c: level(0.5),
            "95% percentile bootstrap over prompts of the fraction restored (SweepIntervals); NaN where "
            "the clean - corrupted gap's interval includes 0",
        ),
        Quantity(
            "composition",
            _composition,
            "composition scores read off the weights (analysis.composition): per head of layer >= 1 and "
            "mode M in Q, K, V, the highest score over the heads of earlier layers, "
            "L{layer}H{head}.M_composition; random.M_composition: the score between random Gaussian "
            "matrices of the heads' shapes",
            lambda c: None if c.startswith("random.") else steepest("up"),
            "none for the heads' scores: read off the weights, so exact; random.M_composition carries the "
            "95% range of the random score as its band, the reference a score is read against",
        ),
        Quantity(
            "circuit",
            _circuit,
            "progress measures of one fixed circuit (Nanda et al. 2023; analysis.dynamics.progress), by "
            "default the last checkpoint's decided circuit, on one draw of the task's pair, mean ablation: "
            "circuit.restricted_loss = cross-entropy of the correct answer at the answer position with only "
            "the circuit's edges kept, circuit.excluded_loss = with only its edges ablated, "
            "circuit.full_loss = the model's, circuit.excluded_gap = excluded - full loss; "
            "circuit.faithfulness = sum(circuit - empty) / sum(full - empty) of the logit difference. "
            "Events: restricted loss below ln 2, excluded gap above ln 2, faithfulness above 0.8, the full "
            "loss's steepest fall",
            CIRCUIT_RULES.get,
            "95% over prompts: the losses and the gap (paired per prompt) are means, value -+ 1.96 standard "
            "errors (normal); faithfulness "
            "is a ratio of sums over prompts, delta-method normal interval (RatioMoments)",
        ),
        Quantity(
            "roles",
            _roles,
            "the role classifier (roles.head_roles on n sequences): role=R is 1 while the head "
            "holds role R; R_score its task-role score",
            lambda c: level(0.5) if ".role=" in c else None,
            "none: a role is a verdict and its score combines several analyses, not a mean over units",
            missing=0.0,
        ),
    )
}
DEFAULT_QUANTITIES = ("loss", "heads", "probes")
"""What `run_dynamics` measures unless told otherwise (cheap: a forward pass and weight products per step)."""


@dataclass
class Dynamics:
    """Curves of every quantity against step: `curves[name][i]` was measured at `steps[i]` (None: not
    measured), with its 95% interval `lower[name][i]`, `upper[name][i]`."""

    steps: list[int]
    curves: dict[str, list[float | None]]
    groups: dict[str, list[str]]
    """Quantity name -> the curves it produced."""
    rules: dict[str, Rule]
    """Curve -> the rule its event is read with (curves without one have no event)."""
    cost_s: dict[str, float] = field(default_factory=dict)
    """Quantity -> seconds spent on it over all steps ("load": reading the checkpoints)."""
    info: dict[str, Any] = field(default_factory=dict)
    lower: dict[str, list[float | None]] = field(default_factory=dict)
    """Curve -> lower end of each value's 95% interval (None where the value has none)."""
    upper: dict[str, list[float | None]] = field(default_factory=dict)
    """Curve -> upper end of it."""
    exact: list[str] = field(default_factory=list)
    """Curves read off the weights with no sampled data: exact, so no interval."""

    def __post_init__(self) -> None:
        for kind in (self.curves, self.lower, self.upper):
            for name, values in kind.items():
                if len(values) != len(self.steps):
                    raise ValueError(f"curve {name} has {len(values)} values for {len(self.steps)} steps")
        if set(self.lower) != set(self.upper) or not set(self.lower) <= set(self.curves):
            raise ValueError("lower and upper must name the same curves, each one of `curves`")

    @property
    def events(self) -> list[Event]:
        """Events of the point curves (the intervals do not move them)."""
        return find_events(self.steps, self.curves, self.rules)

    def point(self, curve: str, i: int = -1) -> CurvePoint | None:
        """The value of `curve` at `steps[i]` with its interval (None where not measured)."""
        value = self.curves[curve][i]
        if value is None:
            return None
        lower, upper = (b.get(curve, [None] * len(self.steps))[i] for b in (self.lower, self.upper))
        nan = math.nan
        return CurvePoint(
            value, nan if lower is None else lower, nan if upper is None else upper, curve in self.exact
        )

    def to_dataframe(self) -> Any:
        """One row per curve and step: `quantity` (None for a curve of no group), `curve`, `step`, `value`
        (NaN where not measured), `lower` / `upper` (NaN where there is no interval) and `exact`."""
        import pandas as pd

        quantity = {c: q for q, names in self.groups.items() for c in names}
        none = [None] * len(self.steps)

        def number(v: float | None) -> float:
            return math.nan if v is None else float(v)

        rows = [
            (quantity.get(c), c, step, number(v), number(lo), number(hi), c in self.exact)
            for c, values in self.curves.items()
            for step, v, lo, hi in zip(self.steps, values, self.lower.get(c, none), self.upper.get(c, none))
        ]
        return pd.DataFrame(rows, columns=["quantity", "curve", "step", "value", "lower", "upper", "exact"])

    def __repr__(self) -> str:
        reached = [e for e in self.events if e.reached]
        return short_repr(
            "Dynamics",
            f"{len(self.steps)} steps" + (f" {self.steps[0]}..{self.steps[-1]}" if self.steps else ""),
            f"{len(self.curves)} curves of {', '.join(self.groups) or 'no quantity'}",
            f"{len(self.lower)} with 95% intervals, {len(self.exact)} exact",
            f"{len(reached)} of {len(self.rules)} events reached",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "axes": {"curves": ["step"], "lower": ["step"], "upper": ["step"]},
            "steps": self.steps,
            "quantities": {
                q: {
                    "definition": QUANTITIES[q].definition,
                    "interval": QUANTITIES[q].interval,
                    "curves": names,
                    "cost_s": self.cost_s.get(q),
                }
                for q, names in self.groups.items()
            },
            "curves": self.curves,
            "interval": "95% over the evaluation units (sequences or prompts) of each value, per quantity "
            "as `quantities[q].interval` says; None where a value has none; events read on the point curves",
            "lower": self.lower,
            "upper": self.upper,
            "exact": self.exact,
            "rules": {c: r.to_dict() for c, r in self.rules.items()},
            "events": [e.to_dict() for e in self.events],
            "cost_s": self.cost_s,
            **self.info,
        }


def final_circuit(
    run_dir: str | Path,
    *,
    edges: Sequence[str] = (),
    heads: Sequence[str] = (),
    seed: int = 0,
    device: str = "cpu",
) -> FixedCircuit:
    """The circuit the `circuit` quantity follows: the given `edges` or every edge of `heads`, else the
    decided circuit (`fixed_circuit`) of the run's final checkpoint (`ckpt.pt` when it is of the same run as
    the step checkpoints, else the last step checkpoint). A one-line `MechmemError` when the model has no
    attention heads or its edge graph cannot be built.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp()) / "t1"
        >>> _ = mechmem.train_preset("permutation", "task1-quick", steps=4, save_every=2, out_dir=run,
        ...                         progress=False)
        >>> final_circuit(run, heads=["L0H0"]).source
        'every edge of L0H0'
    """
    files = step_files(run_dir)
    path, last = Path(run_dir) / "ckpt.pt", files[-1][1]
    if not path.exists() or run_differences(read_payload(path), payload_identity(read_payload(last))):
        path = last
    ckpt = load_checkpoint(path, device=resolve_device(device))
    if reason := no_attention_reason(ckpt.model):
        raise MechmemError(f"no circuit to follow: {reason}")
    return fixed_circuit(ckpt.model, ckpt.task, edges=edges, heads=heads, seed=seed, where=path.name)


@torch.no_grad()
def run_dynamics(
    run_dir: str | Path,
    quantities: Sequence[str] = DEFAULT_QUANTITIES,
    *,
    n: int = 128,
    seed: int = 0,
    device: str = "cpu",
    circuit: FixedCircuit | None = None,
) -> Dynamics:
    """Measure `quantities` on every step checkpoint of `run_dir`, on one evaluation draw of `n` sequences.

    The `circuit` quantity follows `circuit` (default: `final_circuit(run_dir, seed=seed)`); where no circuit
    can be had, `info["circuit"]["skipped"]` says why and the other quantities still run.

    Raises `MechmemError` (one line) when the directory holds no step checkpoints, one is unreadable or
    corrupt, or they are not all of one run.

    Example:
        >>> import mechmem, tempfile, pathlib
        >>> run = pathlib.Path(tempfile.mkdtemp()) / "t1"
        >>> _ = mechmem.train_preset("permutation", "task1-quick", steps=4, save_every=2, out_dir=run,
        ...                         progress=False)
        >>> dynamics = mechmem.run_dynamics(run, ["loss"], n=8)
        >>> dynamics.steps, "loss" in dynamics.curves
        ([2, 4], True)
    """
    check_path(run_dir, "run_dir")
    chosen = [QUANTITIES[q] for q in check_choices("quantities", quantities, QUANTITIES)]
    check_count("n", n)
    check_seed(seed)
    files = step_files(run_dir)
    rows: list[dict[str, dict[str, float]]] = []
    cost = {"load": 0.0, **{q.name: 0.0 for q in chosen}}
    followed: dict[str, Any] = {}
    if "circuit" in quantities:
        t0 = time.perf_counter()
        try:
            circuit = circuit or final_circuit(run_dir, seed=seed, device=device)
            followed = circuit.to_dict()
        except MechmemError as exc:
            followed = {"skipped": one_line(exc)}
        cost["circuit"] += time.perf_counter() - t0
    data, first_path, t0 = None, files[0][1], time.perf_counter()
    for _, ckpt in iter_models(files, device):
        cost["load"] += time.perf_counter() - t0
        if data is None:
            check_n_samples(n, ckpt.model, minimum=2)
            skipped = followed.get("skipped", "")
            data = EvalData(ckpt.task, n, seed, model_device(ckpt.model), circuit, skipped)
        row, headless = {}, heads.no_attention_reason(ckpt.model)
        for q in chosen:
            t0 = time.perf_counter()
            row[q.name] = {} if q.needs_heads and headless else q.fn(ckpt.model, data)
            cost[q.name] += time.perf_counter() - t0
        rows.append(row)
        t0 = time.perf_counter()
    groups = {q.name: list(dict.fromkeys(c for row in rows for c in row[q.name])) for q in chosen}
    points = {c: [row[q.name].get(c) for row in rows] for q in chosen for c in groups[q.name]}
    missing = {c: q.missing for q in chosen for c in groups[q.name]}
    curves = {c: [missing[c] if p is None else p.value for p in ps] for c, ps in points.items()}
    bounds = {
        side: {
            c: [None if p is None or math.isnan(getattr(p, side)) else getattr(p, side) for p in ps]
            for c, ps in points.items()
        }
        for side in ("lower", "upper")
    }
    with_interval = [c for c in points if any(v is not None for v in bounds["lower"][c])]
    exact = [c for c, ps in points.items() if all(p.exact for p in ps if p is not None)]
    rules = {c: r for q in chosen for c in groups[q.name] if (r := q.rule(c)) is not None}
    drawn = {"n": n, "seed": seed, "data": "one draw of the task's evaluation batch, used for every step"}
    info = {
        "run_dir": str(run_dir),
        "checkpoints": [p.name for _, p in files],
        "task": ckpt.task_name,
        "eval": drawn,
        "first_checkpoint": str(first_path),
        **({"circuit": followed} if followed else {}),
        **({"trained_under": under} if (under := describe(ckpt.train or {})) else {}),
    }
    lower, upper = ({c: bounds[side][c] for c in with_interval} for side in ("lower", "upper"))
    cost_s = {k: round(v, 3) for k, v in cost.items()}
    return Dynamics([s for s, _ in files], curves, groups, rules, cost_s, info, lower, upper, exact)


def set_levels(result: Dynamics, levels: dict[str, float]) -> None:
    """Replace the rule of every curve matching a glob (`{"*.induction": 0.4}`) by a level rule at that
    value (falling for falling curves); a glob that matches no curve is a one-line error."""
    for pattern, value in levels.items():
        hits = [c for c in result.curves if fnmatch.fnmatch(c, pattern)]
        if not hits:
            raise MechmemError(
                f"--level {pattern}: matches no curve ({', '.join(list(result.curves)[:6])}, ...)"
            )
        for c in hits:
            old = result.rules.get(c)
            result.rules[c] = level(value, old.direction if old else "up")


def checked_steps(run_dir: str | Path, *, allow_nonfinite: bool = False) -> list[tuple[int, Path]]:
    """The run's step checkpoints, checked first: all of one run, finite (unless `allow_nonfinite`)."""
    files = step_files(run_dir)
    for step, ckpt in iter_models(files):
        check_finite_weights(ckpt.model, allow=allow_nonfinite, what=f"step {step}")
    return files
