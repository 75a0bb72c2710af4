"""Activation patching: which activations carry the information that separates two inputs?

Run the model on a *clean* input and a *corrupted* one that differ in a key detail (here: the last x repeats an
earlier x, so the answer is recalled rather than eliminated). Then replace one activation of one run by the same
activation of the other run and measure a metric of the output (default: the task's logit difference between the
clean and the corrupted answer). Both directions are named explicitly:
    - denoising: clean activations into the corrupted run. A large recovery means the activation is *sufficient*
      to carry the clean behaviour (given the rest of the corrupted run).
    - noising: corrupted activations into the clean run. A large drop means the activation is *necessary*.
Sweeps cover the residual stream (resid_pre / resid_mid / resid_post) and the attention and MLP outputs by
layer x position, each head's output z by layer x head (all positions at once) and layer x position x head, and
each head's attention pattern by layer x head (and layer x head x destination position).

The results equal TransformerLens's `transformer_lens.patching.get_act_patch_*` (one hooked forward pass per
patch), but are computed much faster while staying exact:
    - many patches share one forward pass along a leading patch axis, in chunks that fit a memory budget;
    - each patched run resumes at the patched activation from the cached unpatched run (`patching_replay`);
    - patches that provably cannot move the metric are not run but get the unpatched run's metric, the value a
      full run would produce: patches whose replaced entries already equal the base run's (e.g. every position
      before the first token where clean and corrupted differ), positions after the last read-out position
      (causal attention), and, after the last layer's attention, where the network is position-wise, every
      position that is not read out.
Caveats: patching measures the effect of one activation with everything else held at one run's values; effects
need not add up, and a clean/corrupted pair that differs in several ways mixes their effects.
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.patching_metric import PatchingMetric, callable_metric
from mechmem.analysis.patching_replay import STAGE_AXES, Replay, RunActs, take_pos
from mechmem.errors import MechmemError
from mechmem.tasks.base import PatchingPair

DIRECTIONS = ("denoising", "noising")


# -- metrics -------------------------------------------------------------------------------------------------
def resolve_metric(
    metric: Any, pair: PatchingPair | None, probe: Callable[[], Tensor], readout: Any = None
) -> PatchingMetric:
    """None -> the pair's logit difference; `pair.logit_diff` itself is recognised; any callable is put in
    batched form by `callable_metric` (`probe()` gives the clean run's full logits, computed only then)."""
    if isinstance(metric, PatchingMetric):
        return metric
    if metric is None:
        if pair is None:
            raise MechmemError("a metric is needed when no PatchingPair is given")
        return PatchingMetric.logit_diff(pair)
    owner = getattr(metric, "__self__", None)
    if (
        isinstance(owner, PatchingPair)
        and getattr(metric, "__name__", "") == "logit_diff"
        and readout is None
    ):
        return PatchingMetric.logit_diff(owner)
    if not callable(metric):
        raise MechmemError(f"metric must be callable, got {type(metric).__name__}")
    return callable_metric(metric, probe(), readout=readout)


# -- sweep types ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PatchSweep:
    """One sweep type: the activation patched and the axes of its cells (the first axis is always `layer`)."""

    name: str
    """Sweep name, used in results and on the command line."""
    stage: str
    """Activation patched: resid_pre, pattern, z, attn_out, resid_mid, mlp_out or resid_post."""
    axes: tuple[str, ...]
    """Cell axes, e.g. ("layer", "pos", "head"); sizes come from the model and the inputs."""
    dims: tuple[int, ...]
    """For each axis after `layer`, the activation axis (after batch) it selects."""


_RESID_LIKE = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
SWEEPS: dict[str, PatchSweep] = {s: PatchSweep(s, s, ("layer", "pos"), (0,)) for s in _RESID_LIKE} | {
    "attn_head_out_all_pos": PatchSweep("attn_head_out_all_pos", "z", ("layer", "head"), (1,)),
    "attn_head_out_by_pos": PatchSweep("attn_head_out_by_pos", "z", ("layer", "pos", "head"), (0, 1)),
    "attn_head_pattern_all_pos": PatchSweep("attn_head_pattern_all_pos", "pattern", ("layer", "head"), (0,)),
    "attn_head_pattern_by_pos": PatchSweep(
        "attn_head_pattern_by_pos", "pattern", ("layer", "head", "dest_pos"), (0, 1)
    ),
}


def resolve_sweep(sweep: str | PatchSweep, direction: str, *, attn_only: bool) -> tuple[PatchSweep, str, str]:
    """The sweep spec and the (base, source) run names of `direction`; one-line errors for bad requests."""
    spec = SWEEPS.get(sweep) if isinstance(sweep, str) else sweep
    if spec is None:
        raise MechmemError(f"unknown sweep {sweep!r}; choose from {', '.join(SWEEPS)}")
    if direction not in DIRECTIONS:
        raise MechmemError(f"direction must be 'denoising' or 'noising', got {direction!r}")
    if attn_only and spec.stage in ("resid_mid", "mlp_out"):
        raise MechmemError(f"sweep {spec.name!r} needs MLPs; the model is attention-only")
    base, source = ("corrupted", "clean") if direction == "denoising" else ("clean", "corrupted")
    return spec, base, source


# -- results -------------------------------------------------------------------------------------------------
@dataclass
class PatchingResult:
    """The metric after each patch of one sweep; `values` has one axis per name in `axes`."""

    sweep: str
    axes: tuple[str, ...]
    values: Float[Tensor, "..."]
    direction: str
    metric: str
    clean: float
    """Metric of the unpatched clean run."""
    corrupted: float
    """Metric of the unpatched corrupted run."""

    def __post_init__(self) -> None:
        if self.values.ndim != len(self.axes):
            raise ValueError(
                f"values have {self.values.ndim} axes but {len(self.axes)} axis names {self.axes}"
            )
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}")

    @property
    def baseline(self) -> float:
        """Metric of the run being patched (corrupted when denoising, clean when noising)."""
        return self.corrupted if self.direction == "denoising" else self.clean

    def normalised(self) -> Float[Tensor, "..."]:
        """(value - corrupted) / (clean - corrupted): 0 = corrupted behaviour, 1 = clean behaviour."""
        span = self.clean - self.corrupted
        return (self.values - self.corrupted) / (span if span else float("nan"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "axes": list(self.axes),
            "values": self.values.tolist(),
            "direction": self.direction,
            "metric": self.metric,
            "clean": self.clean,
            "corrupted": self.corrupted,
        }


# -- engine --------------------------------------------------------------------------------------------------
class Patcher:
    """Clean and corrupted runs of one model, cached once; `sweep` patches between them.

    Args:
        model: a TransformerLens `HookedTransformer` (see `patching_replay` for the supported configurations).
        clean, corrupted: input tokens [batch pos] of equal shape.
        metric: a `PatchingMetric`, any callable `metric(logits [batch pos d_vocab]) -> scalar` (evaluated over
            all patches at once, see `patching_metric`), or None for the logit difference of `pair`.
        pair: the task's `PatchingPair` (gives the default metric).
        readout: positions a callable metric reads (shared list, negative from the end, or [batch read]);
            None: found by a dependency check.
        memory_mb: budget for the activations of one batched pass; patches are chunked to fit.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        clean: Int[Tensor, "batch pos"],
        corrupted: Int[Tensor, "batch pos"],
        metric: Any = None,
        *,
        pair: PatchingPair | None = None,
        memory_mb: float = 256.0,
        readout: Any = None,
    ) -> None:
        if clean.shape != corrupted.shape:
            raise MechmemError("clean and corrupted inputs must have the same shape")
        self.replay = Replay(model)
        device = next(model.parameters()).device
        every = torch.arange(clean.shape[1], device=device).expand(clean.shape[0], -1)
        self.metric = resolve_metric(
            metric, pair, lambda: self.replay.run(clean.to(device), every).logits, readout
        )
        self.readout = self.metric.readout.to(device)
        self.n_pos = clean.shape[1]
        if int(self.readout.max()) >= self.n_pos or int(self.readout.min()) < 0:
            raise MechmemError("read-out positions must lie inside the inputs")
        keep = int(self.readout.max()) + 1
        self.runs: dict[str, RunActs] = {
            name: self.replay.run(tokens[:, :keep].to(device), self.readout)
            for name, tokens in (("clean", clean), ("corrupted", corrupted))
        }
        self.values = {name: float(self.metric.fn(run.logits[None])[0]) for name, run in self.runs.items()}
        self.memory = memory_mb * 2**20
        self.pass_overhead = 256  # fixed cost of one batched pass, in token-layers (see `start_groups`)
        self.n_read_pos = keep

    def _chunk(self) -> int:
        cfg = self.replay.cfg
        batch, read = self.readout.shape
        n, width = self.n_read_pos, cfg.n_heads * cfg.d_head
        floats = batch * n * (4 * cfg.d_model + 2 * (cfg.d_mlp or 0) + 4 * width + 3 * cfg.n_heads * n)
        floats += batch * read * 2 * cfg.d_vocab_out
        return max(1, int(self.memory // (4 * floats)))

    def sizes(self) -> dict[str, int]:
        cfg = self.replay.cfg
        return {"layer": cfg.n_layers, "pos": self.n_pos, "dest_pos": self.n_pos, "head": cfg.n_heads}

    @torch.no_grad()
    def sweep(self, sweep: str | PatchSweep, direction: str = "denoising") -> PatchingResult:
        """Patch every cell of `sweep` in `direction`; cells are vectorised along a patch axis."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, attn_only=self.replay.attn_only)
        base, source = self.runs[base_name], self.runs[source_name]
        sizes = self.sizes()
        shape = [sizes[a] for a in spec.axes]
        cells = torch.cartesian_prod(*(torch.arange(s) for s in shape[1:])).reshape(math.prod(shape[1:]), -1)
        out = torch.full((shape[0], len(cells)), self.values[base_name])
        chunk = self._chunk()
        for layer in range(shape[0]):
            act_b = base.acts[spec.stage][layer]
            act_s = source.acts[spec.stage][layer]
            last_gather = layer == self.replay.n_layers - 1 and spec.stage != "resid_pre"
            eff_b = self.replay.effective(layer, spec.stage, act_b, self.readout)
            eff_s = self.replay.effective(layer, spec.stage, act_s, self.readout)
            differs = eff_b != eff_s
            for first in range(0, len(cells), chunk):
                idx = torch.arange(first, min(first + chunk, len(cells)))
                mask = cell_masks(spec, cells[idx], act_b.shape[1:]).to(act_b.device)
                if last_gather:
                    mask = take_pos(mask, self.readout, *STAGE_AXES[spec.stage])
                hit = mask & differs
                active = hit.flatten(1).any(1).cpu()
                if not active.any():
                    continue
                idx, mask, hit = idx[active], mask[active], hit[active]
                suffix = not last_gather and not (
                    spec.stage == "resid_pre" and layer == self.replay.n_layers - 1
                )
                pos_dim = STAGE_AXES[spec.stage][1]
                starts = first_position(hit, pos_dim) if suffix else torch.zeros(len(idx), dtype=torch.long)
                for group in start_groups(starts, len(self.readout), self.pass_overhead):
                    start = int(starts[group].min())
                    patched = torch.where(mask[group], eff_s, eff_b)
                    patched = patched.narrow(pos_dim, start, patched.shape[pos_dim] - start)
                    logits = self.replay.resume(layer, spec.stage, patched, base, self.readout, start)
                    out[layer, idx[group]] = self.metric.fn(logits).float().cpu()
        return PatchingResult(
            spec.name,
            spec.axes,
            out.reshape(shape),
            direction,
            self.metric.name,
            self.values["clean"],
            self.values["corrupted"],
        )


def first_position(hit: Tensor, pos_dim: int) -> Int[Tensor, " cell"]:
    """For each cell (leading axis), the first position along `pos_dim` where the patch changes anything."""
    dims = [d for d in range(1, hit.ndim) if d != hit.ndim + pos_dim]
    along = hit.any(dim=dims) if dims else hit
    return along.float().argmax(-1).cpu()


def start_groups(starts: Int[Tensor, " cell"], batch: int, overhead: int = 256) -> list[Tensor]:
    """Group cells into passes that each resume at their earliest start position.

    A pass over extra positions costs about `batch` token-layers per cell and position; a separate pass costs
    about `overhead` token-layers of fixed cost, so a group joins the previous pass when that is cheaper.
    """
    order = torch.argsort(starts, stable=True)
    groups: list[list[int]] = []
    first_start = 0
    for i in order.tolist():
        if groups:
            same_start = int(starts[i]) == first_start
            if same_start or batch * (int(starts[i]) - first_start) < overhead:
                groups[-1].append(i)
                continue
        groups.append([i])
        first_start = int(starts[i])
    return [torch.tensor(g) for g in groups]


def cell_masks(spec: PatchSweep, cells: Int[Tensor, "cell axis"], act_shape: Sequence[int]) -> Tensor:
    """Boolean masks [cell 1 *act] (singleton where a cell spans the whole axis) of the entries each cell patches."""
    ndim = len(act_shape)
    mask = torch.ones((len(cells), 1) + (1,) * ndim, dtype=torch.bool)
    for j, dim in enumerate(spec.dims):
        hit = cells[:, j, None] == torch.arange(act_shape[dim])
        view = [len(cells), 1] + [act_shape[dim] if d == dim else 1 for d in range(ndim)]
        mask = mask & hit.reshape(view)
    return mask


# -- named specialisations -----------------------------------------------------------------------------------
def run_sweeps(
    model: torch.nn.Module,
    pair: PatchingPair,
    sweeps: Sequence[str] = tuple(SWEEPS),
    *,
    metric: Any = None,
    direction: str = "denoising",
    memory_mb: float = 256.0,
    readout: Any = None,
) -> dict[str, PatchingResult]:
    """Run several sweeps on the task's clean/corrupted pair, sharing the cached runs (arguments as `Patcher`)."""
    patcher = Patcher(
        model, pair.clean, pair.corrupted, metric, pair=pair, memory_mb=memory_mb, readout=readout
    )
    return {name: patcher.sweep(name, direction) for name in sweeps}


def _one(name: str, doc: str) -> Callable[..., PatchingResult]:
    def sweep_fn(
        model: torch.nn.Module,
        pair: PatchingPair,
        *,
        metric: Any = None,
        direction: str = "denoising",
        readout: Any = None,
    ) -> PatchingResult:
        patcher = Patcher(model, pair.clean, pair.corrupted, metric, pair=pair, readout=readout)
        return patcher.sweep(name, direction)

    sweep_fn.__name__ = sweep_fn.__qualname__ = f"patch_{name}"
    sweep_fn.__doc__ = (
        f"{doc}\n\nSee `Patcher` for the arguments; returns a `PatchingResult` with axes {SWEEPS[name].axes}."
    )
    return sweep_fn


patch_resid_pre = _one(
    "resid_pre", "Patch the residual stream before each block, one (layer, position) at a time."
)
patch_resid_mid = _one(
    "resid_mid", "Patch the residual stream between attention and MLP, per (layer, position)."
)
patch_resid_post = _one("resid_post", "Patch the residual stream after each block, per (layer, position).")
patch_attn_out = _one("attn_out", "Patch each layer's attention output, per (layer, position).")
patch_mlp_out = _one("mlp_out", "Patch each layer's MLP output, per (layer, position).")
patch_attn_head_out_all_pos = _one("attn_head_out_all_pos", "Patch one head's output z at every position.")
patch_attn_head_out_by_pos = _one("attn_head_out_by_pos", "Patch one head's output z at one position.")
patch_attn_head_pattern_all_pos = _one(
    "attn_head_pattern_all_pos", "Patch one head's whole attention pattern."
)
patch_attn_head_pattern_by_pos = _one(
    "attn_head_pattern_by_pos", "Patch one head's attention pattern row for one destination position."
)


def plot_patching(result: PatchingResult) -> Any:
    """Heatmap(s) of a sweep, centred on the unpatched run's metric; one panel per layer for 3-axis sweeps."""
    from matplotlib.ticker import MaxNLocator

    from mechmem.plotting import plt

    values = result.values.detach().cpu().float().numpy()
    panels = [values] if values.ndim == 2 else list(values)
    rows, cols = (result.axes[0], result.axes[1]) if values.ndim == 2 else result.axes[1:]
    span = float(abs(values - result.baseline).max()) or 1.0
    fig, axs = plt.subplots(1, len(panels), figsize=(1 + 3.2 * len(panels), 3), squeeze=False)
    for i, (ax, panel) in enumerate(zip(axs[0], panels)):
        im = ax.imshow(
            panel, cmap="RdBu", vmin=result.baseline - span, vmax=result.baseline + span, aspect="auto"
        )
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(cols)
        ax.set_ylabel(rows)
        ax.set_title(result.sweep if values.ndim == 2 else f"{result.sweep} layer {i}", fontsize=9)
    fig.colorbar(im, ax=list(axs[0]), label=f"{result.metric} ({result.direction})")
    return fig


__all__ = [
    "DIRECTIONS",
    "SWEEPS",
    "PatchSweep",
    "Patcher",
    "PatchingMetric",
    "PatchingResult",
    "cell_masks",
    "plot_patching",
    "resolve_metric",
    "run_sweeps",
] + [f"patch_{name}" for name in SWEEPS]
