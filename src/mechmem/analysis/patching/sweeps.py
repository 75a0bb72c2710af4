"""Activation patching: which activations carry the information that separates two inputs?

Run the model on a *clean* input and a *corrupted* one that differ in a key detail, replace one activation of
one run by the same activation of the other run and measure a metric of the output (default: the task's logit
difference). Denoising patches clean activations into the corrupted run (a large recovery: the activation is
*sufficient*); noising patches corrupted activations into the clean run (a large drop: it is *necessary*).
Sweeps cover the residual stream and attention and MLP outputs by layer x position, each head's z by layer x
head and layer x position x head, and each head's pattern by layer x head (x dest pos).

Each cell is one `Intervention` run by the intervention engine; results equal TransformerLens's
`patching.get_act_patch_*` (tested), as means over prompts with 95% intervals (`patching.result`).

Caveats: effects need not add up, and a pair that differs in several ways mixes their effects.
"""

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.interventions import Engine, Intervention, from_run
from mechmem.analysis.interventions.metric import PatchingMetric, callable_metric
from mechmem.analysis.interventions.replay import STAGE_HOOKS, model_stages
from mechmem.analysis.patching.result import DIRECTIONS, SWEEPS, PatchingResult, PatchSweep, sweep_intervals
from mechmem.errors import BadArgument, MechmemError
from mechmem.models.checks import (
    check_callable,
    check_choices,
    check_memory_mb,
    check_metric_value,
    check_model,
    check_tokens,
)
from mechmem.models.parts import model_device
from mechmem.tasks.base import PatchingPair, check_pair


def resolve_metric(
    metric: Any,
    pair: PatchingPair | None,
    probe: Callable[[], Tensor],
    readout: Any = None,
    *,
    per_prompt: bool = True,
) -> PatchingMetric:
    """None -> the pair's logit difference (one value per prompt with `per_prompt`, else the mean); any
    callable is put in batched form by `callable_metric` (`probe()` gives the clean run's logits)."""
    if isinstance(metric, PatchingMetric):
        return metric
    logit_diff = PatchingMetric.logit_diff_per_prompt if per_prompt else PatchingMetric.logit_diff
    if metric is None:
        if pair is None:
            raise MechmemError("a metric is needed when no PatchingPair is given")
        return logit_diff(pair)
    owner = getattr(metric, "__self__", None)
    if (
        isinstance(owner, PatchingPair)
        and getattr(metric, "__name__", "") == "logit_diff"
        and readout is None
    ):
        return logit_diff(owner)
    check_callable("metric", metric)
    return callable_metric(metric, probe(), readout=readout)


def model_sweeps(model: torch.nn.Module) -> list[str]:
    """Every sweep the model has (`interventions.replay.model_stages`)."""
    stages = model_stages(model.cfg)
    return [name for name, spec in SWEEPS.items() if spec.stage in stages]


def resolve_sweep(
    sweep: str | PatchSweep, direction: str, model: torch.nn.Module
) -> tuple[PatchSweep, str, str]:
    """The sweep spec and the (base, source) run names of `direction`; one-line errors for bad requests."""
    spec = SWEEPS.get(sweep) if isinstance(sweep, str) else sweep
    if spec is None:
        raise MechmemError(f"unknown sweep {sweep!r}; choose from {', '.join(SWEEPS)}")
    if direction not in DIRECTIONS:
        raise MechmemError(f"direction must be 'denoising' or 'noising', got {direction!r}")
    if spec.stage not in model_stages(model.cfg):
        why = "the model is attention-only" if model.cfg.attn_only else "attention and MLP run in parallel"
        raise MechmemError(f"sweep {spec.name!r} patches {spec.stage}, which this model lacks: {why}")
    base, source = ("corrupted", "clean") if direction == "denoising" else ("clean", "corrupted")
    return spec, base, source


class Patcher:
    """Clean and corrupted runs of one model; `sweep` patches between them through the intervention engine.

    Args:
        model: a `HookedTransformer` (or another hooked model with a `cfg`).
        clean, corrupted: input tokens [batch pos] of equal shape.
        metric: a `PatchingMetric`, a callable `metric(logits [batch pos d_vocab]) -> scalar`, or None for
            the logit difference of `pair`.
        pair: the task's `PatchingPair` (gives the default metric).
        readout: positions a callable metric reads (shared list, negative from the end, or [batch read]);
            None: found by a dependency check.
        memory_mb: budget for the activations of one batched pass and for the cached runs; patches and
            sequences are chunked to fit (the peak memory follows it).
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
        check_model(model)
        clean, corrupted = check_tokens(model, clean, "clean"), check_tokens(model, corrupted, "corrupted")
        if clean.shape != corrupted.shape:
            raise BadArgument("clean and corrupted inputs must have the same shape")
        check_memory_mb(memory_mb)
        device = model_device(model)
        self.model = model
        self.tokens = {"clean": clean.to(device), "corrupted": corrupted.to(device)}
        self.metric = resolve_metric(metric, pair, lambda: model(self.tokens["clean"]), readout)
        self.n_pos = clean.shape[1]
        if int(self.metric.readout.max()) >= self.n_pos or int(self.metric.readout.min()) < 0:
            raise MechmemError("read-out positions must lie inside the inputs")
        self.engine = Engine(model, self.metric, memory_mb=memory_mb)
        self.setters = {name: from_run(tokens) for name, tokens in self.tokens.items()}
        runs = {name: self.engine.run(tokens, [[]])[0].float().cpu() for name, tokens in self.tokens.items()}
        batch = clean.shape[0]
        self.per_prompt = all(tuple(v.shape) == (batch,) for v in runs.values())
        """Whether the metric gives one value per prompt (then cells carry intervals over prompts)."""
        for value in runs.values():  # its finiteness on finite logits is `callable_metric`'s check
            check_metric_value(value, self.metric.name, batch=batch, finite_logits=False)
        self.prompt_values = runs if self.per_prompt else None
        """Each prompt's metric in the unpatched clean and corrupted runs (None for a scalar metric)."""
        self.values = {name: float(v.mean()) for name, v in runs.items()}

    def sizes(self) -> dict[str, int]:
        cfg = self.model.cfg
        return {"layer": cfg.n_layers, "pos": self.n_pos, "dest_pos": self.n_pos, "head": cfg.n_heads}

    def variants(self, spec: PatchSweep, source: str) -> list[Intervention]:
        """One intervention per cell of `spec`, in the order of the result's values (layer first); a cell's
        index holds its value on each of `spec.dims`, e.g. (slice(None), h)."""
        sizes = self.sizes()
        shape = [sizes[a] for a in spec.axes]
        indices = []
        for cell in itertools.product(*(range(s) for s in shape[1:])):
            index: list[Any] = [slice(None)] * (max(spec.dims) + 1)
            for dim, value in zip(spec.dims, cell):
                index[dim] = value
            indices.append(tuple(index))
        setter, template = self.setters[source], STAGE_HOOKS[spec.stage]
        return [Intervention(template.format(layer), i, setter) for layer in range(shape[0]) for i in indices]

    @torch.no_grad()
    def sweep(self, sweep: str | PatchSweep, direction: str = "denoising") -> PatchingResult:
        """Patch every cell of `sweep` in `direction` (one engine call)."""
        spec = resolve_sweep(sweep, direction, self.model)[0]
        out = self.per_prompt_values(spec, direction)  # [*cell axes] for a scalar metric
        intervals, per_prompt, runs = None, None, self.prompt_values
        if runs is not None:
            intervals = sweep_intervals(out, runs["clean"], runs["corrupted"], direction)
            out, per_prompt = out.mean(0), out
        return PatchingResult(
            spec.name,
            spec.axes,
            out,
            direction,
            self.metric.name,
            self.values["clean"],
            self.values["corrupted"],
            intervals=intervals,
            per_prompt=per_prompt,
        )

    @torch.no_grad()
    def per_prompt_values(
        self, sweep: str | PatchSweep, direction: str = "denoising"
    ) -> Float[Tensor, "..."]:
        """The metric of each prompt after each patch of `sweep`, [prompt, *cell axes]; for a scalar metric
        the cells' values [*cell axes]."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, self.model)
        shape = [self.sizes()[a] for a in spec.axes]
        out = torch.stack(self.engine.run(self.tokens[base_name], self.variants(spec, source_name)))
        out = out.float().cpu()
        return out.T.reshape(-1, *shape) if self.per_prompt else out.reshape(shape)

    @torch.no_grad()
    def cells(self, sweep: str | PatchSweep, direction: str, cells: Int[Tensor, " cell"]) -> Tensor:
        """Exact values of some cells of a sweep (flat indices into its values), one engine call."""
        spec, base_name, source_name = resolve_sweep(sweep, direction, self.model)
        every = self.variants(spec, source_name)
        out = torch.stack(self.engine.run(self.tokens[base_name], [every[i] for i in cells.tolist()]))
        return out.float().cpu().mean(-1) if self.per_prompt else out.float().cpu()


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
    """Several sweeps on the task's clean/corrupted pair, sharing the cached runs (arguments as `Patcher`).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(32, generator=torch.Generator().manual_seed(0))
        >>> found = mechmem.run_sweeps(model, pair, ["resid_pre", "attn_head_out_all_pos"])
        >>> found["attn_head_out_all_pos"].axes, tuple(found["attn_head_out_all_pos"].values.shape)
        (('layer', 'head'), (2, 3))
    """
    check_pair(pair, model)
    names = check_choices("sweeps", sweeps)
    patcher = Patcher(
        model, pair.clean, pair.corrupted, metric, pair=pair, memory_mb=memory_mb, readout=readout
    )
    return {name: patcher.sweep(name, direction) for name in names}
