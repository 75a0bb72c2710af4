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

On large models `analysis.ablation.attribution` estimates every ablation from one gradient pass instead.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.frames import concat, grid_frame, shape_text, short_repr
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
from mechmem.tasks.base import masked_accuracy

METHODS = ABLATION_METHODS
Metric = Callable[[Tensor], Tensor]
"""logits [batch pos d_vocab] -> a scalar tensor."""


@dataclass
class AblationResult:
    """Metric after ablating each head ([method layer head]) and each layer ([method layer])."""

    metric_name: str
    baseline: float
    methods: tuple[str, ...]
    heads: Float[Tensor, "method layer head"]
    attn_layers: Float[Tensor, "method layer"]
    mlp_layers: Float[Tensor, "method layer"] | None = None
    info: dict[str, Any] = field(default_factory=dict)

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
        """One record per ablation: layer, head (None for a whole layer), component, method, metric, delta."""
        out = []
        for i, method in enumerate(self.methods):
            for layer in range(self.heads.shape[1]):
                for head in range(self.heads.shape[2]):
                    out.append(self._row(layer, head, "head", method, self.heads[i, layer, head]))
                out.append(self._row(layer, None, "attn", method, self.attn_layers[i, layer]))
                if self.mlp_layers is not None:
                    out.append(self._row(layer, None, "mlp", method, self.mlp_layers[i, layer]))
        return out

    def _row(
        self, layer: int, head: int | None, component: str, method: str, value: Tensor
    ) -> dict[str, Any]:
        v = float(value)
        return {
            "layer": layer,
            "head": head,
            "component": component,
            "method": method,
            "metric": v,
            "delta": v - self.baseline,
        }

    def to_dataframe(self) -> Any:
        """One row per ablation: `method`, `component` ("head", "attn" for a whole attention layer, "mlp"),
        `layer`, `head` (<NA> for a whole layer), `value` (the metric after the ablation) and `delta` (value -
        baseline). Ablation values have no interval, so there are no `lower` / `upper` columns."""
        methods = {"method": self.methods}
        parts = [
            grid_frame(self.heads, ("method", "layer", "head"), labels=methods, leading={"component": "head"})
        ]
        for component, values in (("attn", self.attn_layers), ("mlp", self.mlp_layers)):
            if values is not None:
                parts.append(
                    grid_frame(values, ("method", "layer"), labels=methods, leading={"component": component})
                )
        columns = ["method", "component", "layer", "head", "value"]
        frame = concat(parts, columns)[columns]
        frame["head"] = frame["head"].astype("Int64")
        frame["delta"] = frame["value"] - self.baseline
        return frame

    def __repr__(self) -> str:
        deltas, largest = self.heads - self.baseline, ""
        if deltas.numel():
            method, layer, head = np.unravel_index(int(deltas.abs().argmax()), tuple(deltas.shape))
            where = f"L{layer}H{head} {self.methods[method]}"
            largest = f"largest head delta {float(deltas[method, layer, head]):+.3g} ({where})"
        return short_repr(
            "AblationResult",
            f"{self.metric_name.split(':')[0]!r} baseline {self.baseline:.3g}",
            f"methods {', '.join(self.methods)}",
            shape_text(("layer", "head"), self.heads.shape[1:]),
            largest,
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric_name,
            "baseline": self.baseline,
            "methods": list(self.methods),
            "axes": {"heads": ["method", "layer", "head"], "layers": ["method", "layer"]},
            "results": self.rows(),
            **self.info,
        }


def task_metric(task: Any, name: str, n: int, *, generator: torch.Generator) -> tuple[Tensor, Metric, str]:
    """Inputs and a metric from a task: "loss" or "accuracy" on an eval batch, "logit_diff" on its patching
    pair.

    Returns (tokens, metric, description).
    """
    if name == "logit_diff":
        pair = task.patching_pair(n, generator=generator)
        return pair.clean, pair.logit_diff, "logit difference (correct - incorrect) at the answer position"
    batch = task.eval_batch(n, generator=generator)
    if name == "loss":
        return (
            batch.tokens,
            lambda logits: task.loss(logits, batch.to(logits.device)),
            "task loss on an eval batch",
        )
    if name == "accuracy":

        def accuracy(logits: Tensor) -> Tensor:
            b = batch.to(logits.device)
            return torch.tensor(masked_accuracy(logits, b.targets, b.loss_mask))

        return batch.tokens, accuracy, "masked accuracy on an eval batch"
    raise ValueError(f"unknown metric {name!r} (loss, accuracy, logit_diff)")


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
    out = intervene(model, tokens, variants, metric)
    baseline, per_layer = float(out[0]), out[1:].reshape(len(methods), cfg.n_layers, -1)
    heads, attn = per_layer[..., : cfg.n_heads], per_layer[..., cfg.n_heads]
    mlp = None if cfg.attn_only else per_layer[..., cfg.n_heads + 1].float()
    return AblationResult(metric_name, baseline, tuple(methods), heads.float(), attn.float(), mlp)


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
    """Heatmaps of delta (metric change) per layer x head, one panel per method; returns the Figure."""
    deltas = result.heads - result.baseline
    lim = float(deltas.abs().max()) or 1.0
    n = len(result.methods)
    n_layers, n_heads = deltas.shape[1:]
    fig, axes = plt.subplots(
        1,
        n,
        figsize=(1.0 + (1.2 + 0.7 * n_heads) * n, 1.2 + 0.6 * n_layers),
        squeeze=False,
        layout="constrained",
    )
    for ax, method, d in zip(axes[0], result.methods, deltas):
        im = ax.imshow(d.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set(title=f"{method} ablation", xlabel="head", xticks=range(n_heads), yticks=range(n_layers))
        for (i, j), v in np.ndenumerate(d.numpy()):
            color = "w" if abs(v) > 0.6 * lim else "k"
            ax.text(j, i, f"{v:+.2f}", ha="center", va="center", fontsize=7, color=color)
    axes[0][0].set_ylabel("layer")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label=f"delta {result.metric_name.split(':')[0]}")
    return fig
