"""Head and layer ablation: knock a component out and measure how much a metric moves.

Each attention head's output z (`blocks.L.attn.hook_z`, before W_O) is replaced by
    zero      zeros: the head writes nothing but its share of the bias b_O;
    mean      its mean over a reference batch's sequences, per position (mechmem's one mean ablation; the
              reference is a separate draw from the task's evaluation distribution in the library callers);
    resample  its value on another, randomly chosen reference sequence (same position).
A whole attention layer is ablated the same way on all its heads at once, an MLP layer on
`blocks.L.hook_mlp_out`. The result holds the metric after each ablation and its change from the unablated
baseline ("delta").

Intuition: zero ablation asks "what if the head were absent" and can push the model off-distribution; mean
ablation keeps the head's average contribution and removes only its input-dependent part; resample ablation
keeps the activation's distribution but cuts its dependence on the current input. They differ most on heads
whose average output is large. Caveat: ablations measure necessity one component at a time; redundant heads
(backup heads) each look unimportant.

Every ablation is an intervention of `mechmem.analysis.interventions` (setters zero, mean, resample), so
the engine stacks them along the batch axis and starts each pass at the ablated layer from the cached clean
residual stream. `naive_head_ablation` (one run per head) is the reference it is tested against.

Intervals: a metric that is a ratio of sums over sequences (`SequenceMetric`: the task loss is the summed
masked cross-entropy per sequence over the masked positions per sequence, accuracy the hits per sequence over
them, the logit difference one value per prompt over one) gives every delta a 95% interval over sequences: a
percentile bootstrap of sum_i (ablated_i - unablated_i) / sum_i weight_i, each sequence paired with itself in
the unablated run (`mechmem.analysis.intervals.bootstrap_ratio`). A callable returning one value per sequence
counts as such a metric with weights 1; a callable returning a scalar gives deltas without intervals.

On large models `analysis.ablation.attribution` estimates every ablation from one gradient pass instead.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.frames import concat, grid_frame, shape_text, short_repr
from mechmem.analysis.intervals import RESAMPLES, bootstrap_ratio, covers, format_interval
from mechmem.analysis.interventions import (
    Intervention,
    Setter,
    apply,
    intervene,
    mean,
    resample,
    setter_values,
    zero,
)
from mechmem.analysis.interventions.reference import naive_intervene
from mechmem.analysis.options import ABLATION_METHODS
from mechmem.plotting import plt

METHODS = ABLATION_METHODS
Metric = Callable[[Tensor], Tensor]
"""logits [batch pos d_vocab] -> a scalar tensor (or one value per sequence, or a `SequenceMetric`)."""


@dataclass(frozen=True)
class SequenceMetric:
    """A metric that is a ratio of sums over sequences: sum_i parts(logits)_i / sum_i weights_i.

    Called on logits it gives that scalar, so it stands wherever a scalar metric does; `ablate_heads` reads
    the parts to give every delta an interval over sequences.
    """

    parts: Callable[[Tensor], Tensor]
    """logits [batch pos d_vocab] -> each sequence's share of the numerator [batch]."""
    weights: Float[Tensor, " batch"]
    """Each sequence's share of the denominator (masked positions for a loss; 1 for a mean over prompts)."""

    def __call__(self, logits: Float[Tensor, "batch pos d_vocab"]) -> Float[Tensor, ""]:
        return self.parts(logits).sum() / self.weights.to(logits.device).sum().clamp_min(1e-12)


@dataclass(frozen=True)
class AblationIntervals:
    """95% intervals over sequences of every delta (ablated - unablated metric, each sequence paired with
    itself), shaped like the result's `heads`, `attn_layers` and `mlp_layers`."""

    n_sequences: int
    """Sequences the metric and the bootstrap are over."""
    heads_lower: Float[Tensor, "method layer head"]
    heads_upper: Float[Tensor, "method layer head"]
    attn_lower: Float[Tensor, "method layer"]
    attn_upper: Float[Tensor, "method layer"]
    mlp_lower: Float[Tensor, "method layer"] | None = None
    mlp_upper: Float[Tensor, "method layer"] | None = None

    def bounds(self, component: str) -> tuple[Tensor, Tensor] | None:
        """(lower, upper) of "head", "attn" or "mlp" (None for an absent MLP)."""
        prefix = {"head": "heads", "attn": "attn", "mlp": "mlp"}[component]
        lower = getattr(self, f"{prefix}_lower")
        return None if lower is None else (lower, getattr(self, f"{prefix}_upper"))


@dataclass
class AblationResult:
    """Metric after ablating each head ([method layer head]) and each layer ([method layer]); `intervals`
    holds every delta's 95% interval over sequences (None for a scalar metric and for estimates)."""

    metric_name: str
    baseline: float
    methods: tuple[str, ...]
    heads: Float[Tensor, "method layer head"]
    attn_layers: Float[Tensor, "method layer"]
    mlp_layers: Float[Tensor, "method layer"] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    intervals: AblationIntervals | None = None

    def __post_init__(self) -> None:
        m, n_layers = len(self.methods), self.heads.shape[1]
        if self.heads.ndim != 3 or self.heads.shape[0] != m:
            raise ValueError(
                f"heads must be [method layer head] with {m} methods, got {tuple(self.heads.shape)}"
            )
        for name in ("attn_layers", "mlp_layers"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != (m, n_layers):
                raise ValueError(f"{name} must be [method layer] = {(m, n_layers)}, got {tuple(value.shape)}")

    def rows(self) -> list[dict[str, Any]]:
        """One record per ablation: layer, head (None for a whole layer), component, method, metric, delta,
        and the delta's 95% interval `delta_lower`, `delta_upper` (None without intervals)."""
        out = []
        for i, method in enumerate(self.methods):
            for layer in range(self.heads.shape[1]):
                for head in range(self.heads.shape[2]):
                    out.append(self._row((i, layer, head), "head", method, self.heads[i, layer, head]))
                out.append(self._row((i, layer), "attn", method, self.attn_layers[i, layer]))
                if self.mlp_layers is not None:
                    out.append(self._row((i, layer), "mlp", method, self.mlp_layers[i, layer]))
        return out

    def _row(self, at: tuple[int, ...], component: str, method: str, value: Tensor) -> dict[str, Any]:
        v = float(value)
        bounds = None if self.intervals is None else self.intervals.bounds(component)
        lower, upper = (None, None) if bounds is None else (float(bounds[0][at]), float(bounds[1][at]))
        return {
            "layer": at[1],
            "head": at[2] if len(at) > 2 else None,
            "component": component,
            "method": method,
            "metric": v,
            "delta": v - self.baseline,
            "delta_lower": lower,
            "delta_upper": upper,
        }

    def to_dataframe(self) -> Any:
        """One row per ablation: `method`, `component` ("head", "attn" for a whole attention layer, "mlp"),
        `layer`, `head` (<NA> for a whole layer), `value` (the metric after the ablation), `delta` (value -
        baseline) and `lower` / `upper`, the delta's 95% interval over sequences (paired with the unablated
        run; NaN without intervals)."""
        methods = {"method": self.methods}
        parts = []
        for component, values in (("head", self.heads), ("attn", self.attn_layers), ("mlp", self.mlp_layers)):
            if values is None:
                continue
            axes = ("method", "layer", "head") if component == "head" else ("method", "layer")
            nan = torch.full_like(values, float("nan"))
            bounds = None if self.intervals is None else self.intervals.bounds(component)
            lower, upper = (nan, nan) if bounds is None else bounds
            parts.append(
                grid_frame(
                    values, axes, lower=lower, upper=upper, labels=methods, leading={"component": component}
                )
            )
        columns = ["method", "component", "layer", "head", "value", "lower", "upper"]
        frame = concat(parts, columns)[columns]
        frame["head"] = frame["head"].astype("Int64")
        frame.insert(5, "delta", frame["value"] - self.baseline)
        return frame

    def __repr__(self) -> str:
        deltas, largest = self.heads - self.baseline, ""
        if deltas.numel():
            method, layer, head = np.unravel_index(int(deltas.abs().argmax()), tuple(deltas.shape))
            where = f"L{layer}H{head} {self.methods[method]}"
            largest = f"largest head delta {float(deltas[method, layer, head]):+.3g} ({where})"
            if self.intervals is not None:
                lower, upper = (b[method, layer, head] for b in self.intervals.bounds("head"))
                largest += f" {format_interval(lower, upper, '+.3g')}"
        spread = "no intervals" if self.intervals is None else "95% intervals"
        if self.intervals is not None:
            spread += f" over {self.intervals.n_sequences} sequences"
        return short_repr(
            "AblationResult",
            f"{self.metric_name.split(':')[0]!r} baseline {self.baseline:.3g}",
            f"methods {', '.join(self.methods)}",
            shape_text(("layer", "head"), self.heads.shape[1:]),
            largest,
            spread,
        )

    def delta_table(self, method: int) -> tuple[list[list[Any]], list[str]]:
        """(rows, headers) of a layer x head table of deltas for `methods[method]`, plus attn, mlp columns."""
        rows = []
        for layer in range(self.heads.shape[1]):
            row = [layer, *(self.heads[method, layer] - self.baseline).tolist()]
            row.append(float(self.attn_layers[method, layer]) - self.baseline)
            if self.mlp_layers is not None:
                row.append(float(self.mlp_layers[method, layer]) - self.baseline)
            rows.append(row)
        headers = ["layer", *(f"H{h}" for h in range(self.heads.shape[2])), "attn"]
        return rows, headers + (["mlp"] if self.mlp_layers is not None else [])

    def interval_table(self, method: int) -> tuple[list[list[Any]], list[str]] | None:
        """(rows, headers) laid out as `delta_table`, each cell the delta's 95% interval "[lower, upper]";
        None without intervals."""
        if self.intervals is None:
            return None
        iv = self.intervals
        rows = []
        for layer in range(self.heads.shape[1]):
            row: list[Any] = [layer]
            row += [
                format_interval(lo, hi)
                for lo, hi in zip(iv.heads_lower[method, layer], iv.heads_upper[method, layer])
            ]
            row.append(format_interval(iv.attn_lower[method, layer], iv.attn_upper[method, layer]))
            if iv.mlp_lower is not None:
                row.append(format_interval(iv.mlp_lower[method, layer], iv.mlp_upper[method, layer]))
            rows.append(row)
        return rows, self.delta_table(method)[1]

    def to_dict(self) -> dict[str, Any]:
        iv = self.intervals
        interval = None
        if iv is not None:
            interval = (
                f"95% percentile bootstrap over {iv.n_sequences} sequences ({RESAMPLES} resamples) of each "
                "delta, every sequence paired with itself in the unablated run"
            )
        return {
            "metric": self.metric_name,
            "baseline": self.baseline,
            "methods": list(self.methods),
            "axes": {"heads": ["method", "layer", "head"], "layers": ["method", "layer"]},
            "interval": interval,
            "results": self.rows(),
            **self.info,
        }


def task_metric(
    task: Any, name: str, n: int, *, generator: torch.Generator
) -> tuple[Tensor, SequenceMetric, str]:
    """Inputs and a metric from a task: "loss" or "accuracy" on an eval batch, "logit_diff" on its patching
    pair, each a `SequenceMetric` (so ablations of it get intervals over sequences).

    "loss" is the masked cross-entropy (the tasks' `loss`): per sequence the summed loss at its masked
    positions, over the masked positions; "accuracy" the hits at them; "logit_diff" one value per prompt.

    Returns (tokens, metric, description).
    """
    if name == "logit_diff":
        pair = task.patching_pair(n, generator=generator)
        metric = SequenceMetric(pair.logit_diff_per_prompt, torch.ones(len(pair.clean)))
        return pair.clean, metric, "logit difference (correct - incorrect) at the answer position"
    batch = task.eval_batch(n, generator=generator)
    mask = batch.loss_mask.float()
    if name == "loss":
        return (
            batch.tokens,
            SequenceMetric(sequence_losses(batch), mask.sum(-1)),
            "task loss on an eval batch",
        )
    if name == "accuracy":

        def hits(logits: Tensor) -> Tensor:
            right = logits.argmax(-1) == batch.targets.to(logits.device)
            return (right.float() * mask.to(logits.device)).sum(-1)

        return batch.tokens, SequenceMetric(hits, mask.sum(-1)), "masked accuracy on an eval batch"
    raise ValueError(f"unknown metric {name!r} (loss, accuracy, logit_diff)")


def sequence_losses(batch: Any) -> Callable[[Tensor], Tensor]:
    """logits [batch pos d_vocab] -> each sequence's cross-entropy summed over its masked positions [batch]
    (over the batch's masked positions: `masked_cross_entropy`, the tasks' loss)."""

    def losses(logits: Tensor) -> Tensor:
        targets, mask = batch.targets.to(logits.device), batch.loss_mask.to(logits.device)
        per_pos = F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), reduction="none")
        return (per_pos.view(targets.shape) * mask).sum(-1)

    return losses


def method_setter(
    method: str, reference: Int[Tensor, "ref pos"], generator: torch.Generator | None = None
) -> Setter:
    """The engine setter of an ablation method: zero(), mean(reference) or resample(reference, generator)."""
    if method not in METHODS:
        raise ValueError(f"unknown ablation method {method!r} ({', '.join(METHODS)})")
    if method == "zero":
        return zero()
    return mean(reference) if method == "mean" else resample(reference, generator)


def reference_tokens(tokens: Tensor, reference: Tensor | None) -> Tensor:
    """The sequences means and resamples come from: `reference`, else the inputs themselves (same length)."""
    reference = tokens if reference is None else reference
    if reference.shape[1] != tokens.shape[1]:
        raise ValueError(
            f"reference sequences have length {reference.shape[1]}, the inputs {tokens.shape[1]}"
        )
    return reference


def component_hooks(model: torch.nn.Module, layer: int) -> tuple[str, str | None]:
    """(the layer's head outputs `hook_z`, its `hook_mlp_out` or None on an attention-only model)."""
    mlp = None if model.cfg.attn_only else f"blocks.{layer}.hook_mlp_out"
    return f"blocks.{layer}.attn.hook_z", mlp


def ablated_hooks(model: torch.nn.Module) -> list[str]:
    """Every hook an ablation replaces: each layer's `hook_z` and `hook_mlp_out` (if any)."""
    return [h for layer in range(model.cfg.n_layers) for h in component_hooks(model, layer) if h]


def layer_variants(
    model: torch.nn.Module, layer: int, setter: Callable[[str, tuple], Setter]
) -> list[Intervention]:
    """Ablations of one layer, in order: each head, all heads, the MLP (if any); setter(hook, index)."""
    z, mlp = component_hooks(model, layer)
    heads = [(slice(None), head) for head in range(model.cfg.n_heads)]
    variants = [Intervention(z, index, setter(z, index)) for index in heads + [()]]
    return variants + ([Intervention(mlp, (), setter(mlp, ()))] if mlp else [])


def _replay(values: dict[str, Tensor]) -> Callable[[str, tuple], Setter]:
    """Setters writing precomputed replacement values (hook -> full activation) into the slice."""
    return lambda hook, index: apply(lambda act, _hook: values[hook][(slice(None), *index)])


@torch.no_grad()
def ablation_values(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    method: str,
    *,
    reference: Int[Tensor, "ref pos"] | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, Tensor]:
    """Replacement values for every `hook_z` and `hook_mlp_out`, each shaped like the activation on `tokens`.

    `reference` (default: `tokens`) is the batch the mean is taken over and resampled sequences come from.
    """
    setter = method_setter(method, reference_tokens(tokens, reference), generator)
    return setter_values(model, tokens, setter, ablated_hooks(model))


@torch.no_grad()
def ablate_layer_components(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    metric: Metric,
    values: dict[str, Tensor],
    layer: int,
) -> tuple[Float[Tensor, " head"], float, float | None]:
    """Metric after ablating each head of `layer`, the whole attention layer, and its MLP (None if absent).

    `values` are the replacement activations (from `ablation_values`); the engine runs from `layer` onward.
    """
    out = intervene(model, tokens, layer_variants(model, layer, _replay(values)), metric).tolist()
    n_heads = model.cfg.n_heads
    return torch.tensor(out[:n_heads]), out[n_heads], (out[n_heads + 1] if len(out) > n_heads + 1 else None)


@torch.no_grad()
def ablate_heads(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    metric: Metric,
    *,
    methods: tuple[str, ...] = METHODS,
    reference: Int[Tensor, "ref pos"] | None = None,
    generator: torch.Generator | None = None,
    metric_name: str = "metric",
) -> AblationResult:
    """Ablate every head, every attention layer and every MLP layer with each method; return the metrics.

    Args:
        model: a HookedTransformer.
        tokens: the inputs the metric is measured on.
        metric: logits [batch pos d_vocab] -> scalar (closes over the targets of `tokens`).
        methods: any of "zero", "mean", "resample" (as the engine's setters; "mean" is the one mean ablation,
            per position over `reference`).
        reference: the batch means and resamples come from (default: `tokens`); use another draw from the
        task's
            evaluation distribution to keep the two apart.
        generator: draws the resampled sequences.
        metric_name: a description stored with the result.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> loss = lambda logits: task.loss(logits, batch)    # the task's next-token loss
        >>> result = mechmem.ablate_heads(model, batch.tokens, loss, methods=("zero",))
        >>> rows, headers = result.delta_table(0)     # one row per layer: layer, H0, H1, H2, attn
        >>> [[round(delta) for delta in row[1:4]] for row in rows]    # the loss rises without L0H2 or L1H1
        [[0, 0, 3], [0, 2, 0]]
    """
    cfg = model.cfg
    reference = reference_tokens(tokens, reference)
    setters = [method_setter(method, reference, generator) for method in methods]
    variants: list[Any] = [[]]  # the unablated baseline
    for setter in setters:
        for layer in range(cfg.n_layers):
            variants += layer_variants(model, layer, lambda hook, index, setter=setter: setter)
    parts = metric.parts if isinstance(metric, SequenceMetric) else metric
    out = intervene(model, tokens, variants, parts).double()
    intervals = None
    if out.ndim == 2:  # [variant sequence]: a ratio of sums over sequences
        weights = metric.weights if isinstance(metric, SequenceMetric) else torch.ones(out.shape[1])
        weights = weights.double().cpu()
        deltas = (out[1:] - out[0]).T  # [sequence variant], paired
        gen = torch.Generator().manual_seed(0)
        bounds = bootstrap_ratio(deltas, weights, generator=gen)
        intervals = delta_intervals(*bounds, len(methods), cfg, n_sequences=out.shape[1])
        out = out.sum(1) / weights.sum()
    baseline, per_layer = float(out[0]), out[1:].float().reshape(len(methods), cfg.n_layers, -1)
    heads, attn = per_layer[..., : cfg.n_heads], per_layer[..., cfg.n_heads]
    mlp = None if cfg.attn_only else per_layer[..., cfg.n_heads + 1].float()
    return AblationResult(
        metric_name, baseline, tuple(methods), heads.float(), attn.float(), mlp, intervals=intervals
    )


def delta_intervals(
    lower: Tensor, upper: Tensor, n_methods: int, cfg: Any, *, n_sequences: int
) -> AblationIntervals:
    """`AblationIntervals` from the bounds of every ablation in `ablate_heads`' order (per method and layer:
    each head, the attention layer, the MLP), over `n_sequences` sequences."""
    lower, upper = (b.reshape(n_methods, cfg.n_layers, -1) for b in (lower, upper))
    h = cfg.n_heads
    mlp = (None, None) if cfg.attn_only else (lower[..., h + 1], upper[..., h + 1])
    return AblationIntervals(n_sequences, lower[..., :h], upper[..., :h], lower[..., h], upper[..., h], *mlp)


def n_variants(model: torch.nn.Module) -> int:
    """Ablations `ablate_heads` makes per method: per layer each head, the attention layer and the MLP."""
    cfg = model.cfg
    return cfg.n_layers * (cfg.n_heads + 1 + (0 if cfg.attn_only else 1))


def variant_names(model: torch.nn.Module) -> list[str]:
    """Names of one method's ablations in the engine's order: per layer "L0H0".., "L0 attn", "L0 mlp"."""
    cfg, out = model.cfg, []
    for layer in range(cfg.n_layers):
        out += [f"L{layer}H{head}" for head in range(cfg.n_heads)] + [f"L{layer} attn"]
        out += [] if cfg.attn_only else [f"L{layer} mlp"]
    return out


@torch.no_grad()
def naive_head_ablation(
    model: torch.nn.Module, tokens: Int[Tensor, "batch pos"], metric: Metric, values: dict[str, Tensor]
) -> Float[Tensor, "layer head"]:
    """Reference implementation: one full forward pass per head with `run_with_hooks` (`naive_intervene`)."""
    cfg = model.cfg
    variants = []
    for layer in range(cfg.n_layers):
        variants += layer_variants(model, layer, _replay(values))[: cfg.n_heads]
    return naive_intervene(model, tokens, variants, metric).reshape(cfg.n_layers, cfg.n_heads).float()


def plot_ablation(result: AblationResult) -> Any:
    """Heatmaps of delta (metric change) per layer x head, one panel per method; returns the Figure. Cells
    whose delta's 95% interval includes 0 are hatched (not told apart from no change)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    deltas = result.heads - result.baseline
    lim = float(deltas.abs().max()) or 1.0
    n = len(result.methods)
    n_layers, n_heads = deltas.shape[1:]
    iv = result.intervals
    undecided = None if iv is None else covers(iv.heads_lower, iv.heads_upper).numpy()
    fig, axes = plt.subplots(
        1,
        n,
        figsize=(1.0 + (1.2 + 0.7 * n_heads) * n, 1.2 + 0.6 * n_layers),
        squeeze=False,
        layout="constrained",
    )
    for k, (ax, method, d) in enumerate(zip(axes[0], result.methods, deltas)):
        im = ax.imshow(d.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set(title=f"{method} ablation", xlabel="head", xticks=range(n_heads), yticks=range(n_layers))
        for (i, j), v in np.ndenumerate(d.numpy()):
            color = "w" if abs(v) > 0.6 * lim else "k"
            ax.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=7, color=color)
        if undecided is not None:
            boxes = [Rectangle((j - 0.5, i - 0.5), 1, 1) for i, j in zip(*np.nonzero(undecided[k]))]
            ax.add_collection(PatchCollection(boxes, facecolor="none", edgecolor="0.45", hatch="///", lw=0))
    axes[0][0].set_ylabel("layer")
    if iv is not None:
        fig.suptitle(
            f"hatched: 95% interval of the delta includes 0 ({iv.n_sequences} sequences)", fontsize=8
        )
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=f"delta {result.metric_name.split(':')[0]}")
    return fig
