"""Head and layer ablation: knock a component out and measure how much a metric moves.

Each attention head's output z (`blocks.L.attn.hook_z`, before W_O) is replaced by
    zero      zeros: the head writes nothing but its share of the bias b_O;
    mean      its mean over a reference batch from the task's evaluation distribution, per position;
    resample  its value on another, randomly chosen reference sequence (same position).
A whole attention layer is ablated the same way on all its heads at once, an MLP layer on `blocks.L.hook_mlp_out`.
The result holds the metric after each ablation and its change from the unablated baseline ("delta").

Intuition: zero ablation asks "what if the head were absent" and can push the model off-distribution; mean
ablation keeps the head's average contribution and removes only its input-dependent part; resample ablation
keeps the activation's distribution but cuts its dependence on the current input. They differ most on heads
whose average output is large. Caveat: ablations measure necessity one component at a time; redundant heads
(backup heads) each look unimportant.

Speed: all ablations at layer L share everything before L, so the engine caches the clean residual stream, starts
each forward pass at layer L, and stacks the ablations of one layer along the batch axis (chunked by memory).
`naive_head_ablation` is the one-run-per-head reference it is tested against.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.plotting import plt
from mechmem.tasks.base import masked_accuracy

METHODS = ("zero", "mean", "resample")
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

    def delta_table(self, method: int) -> tuple[list[list[Any]], list[str]]:
        """(rows, headers) of a layer x head table of deltas for `methods[method]`, plus attn and mlp columns."""
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
    """Inputs and a metric from a task: "loss" or "accuracy" on an eval batch, "logit_diff" on its patching pair.

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
    if method not in METHODS:
        raise ValueError(f"unknown ablation method {method!r} ({', '.join(METHODS)})")
    reference = tokens if reference is None else reference
    if reference.shape[1] != tokens.shape[1]:
        raise ValueError(
            f"reference sequences have length {reference.shape[1]}, the inputs {tokens.shape[1]}"
        )
    _, cache = model.run_with_cache(
        reference.to(model.cfg.device), names_filter=lambda n: n.endswith(("attn.hook_z", "hook_mlp_out"))
    )
    batch, n_ref = tokens.shape[0], reference.shape[0]
    if method == "resample":
        gen = generator if generator is not None else torch.Generator().manual_seed(0)
        offset = torch.randint(1, max(n_ref, 2), (batch,), generator=gen) if n_ref > 1 else torch.zeros(batch)
        idx = ((torch.arange(batch) + offset) % n_ref).long().to(model.cfg.device)
    out = {}
    for name, act in cache.items():
        if method == "zero":
            out[name] = torch.zeros((batch, *act.shape[1:]), dtype=act.dtype, device=act.device)
        elif method == "mean":
            out[name] = act.mean(0, keepdim=True).expand(batch, *act.shape[1:]).clone()
        else:
            out[name] = act[idx]
    return out


def _chunks(model: torch.nn.Module, batch: int, pos: int) -> int:
    cfg = model.cfg
    width = max(cfg.d_model, cfg.d_mlp or 0, cfg.n_heads * pos, cfg.d_vocab_out)
    return max(1, int(2**26 // max(1, batch * pos * width)))


@torch.no_grad()
def ablate_layer_components(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    metric: Metric,
    values: dict[str, Tensor],
    layer: int,
    resid_pre: Float[Tensor, "batch pos d_model"],
) -> tuple[Float[Tensor, " head"], float, float | None]:
    """Metric after ablating each head of `layer`, the whole attention layer, and its MLP (None if absent).

    Stacks the ablations along the batch axis and runs from `resid_pre` at `layer` onward.
    """
    cfg = model.cfg
    batch, pos = tokens.shape
    has_mlp = not cfg.attn_only
    # Copy c ablates: head c for c < n_heads; all heads for c == n_heads; the MLP for c == n_heads + 1.
    n_copies = cfg.n_heads + 1 + int(has_mlp)
    z_name, mlp_name = f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_mlp_out"
    results: list[float] = []
    step = _chunks(model, batch, pos)
    for lo in range(0, n_copies, step):
        copies = list(range(lo, min(n_copies, lo + step)))

        def patch_z(z: Tensor, hook: Any, copies: list[int] = copies) -> Tensor:
            z = z.view(len(copies), batch, *z.shape[1:]).clone()
            for i, c in enumerate(copies):
                if c < cfg.n_heads:
                    z[i, :, :, c] = values[z_name][:, :, c]
                elif c == cfg.n_heads:
                    z[i] = values[z_name]
            return z.flatten(0, 1)

        def patch_mlp(out: Tensor, hook: Any, copies: list[int] = copies) -> Tensor:
            out = out.view(len(copies), batch, *out.shape[1:]).clone()
            for i, c in enumerate(copies):
                if c == cfg.n_heads + 1:
                    out[i] = values[mlp_name]
            return out.flatten(0, 1)

        hooks = [(z_name, patch_z)] + ([(mlp_name, patch_mlp)] if has_mlp else [])
        x = resid_pre.repeat(len(copies), 1, 1)
        with model.hooks(fwd_hooks=hooks):
            logits = model(x, start_at_layer=layer)
        logits = logits.view(len(copies), batch, *logits.shape[1:])
        results.extend(float(metric(logits[i])) for i in range(len(copies)))
    heads = torch.tensor(results[: cfg.n_heads])
    return heads, results[cfg.n_heads], (results[cfg.n_heads + 1] if has_mlp else None)


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
        methods: any of "zero", "mean", "resample".
        reference: the batch means and resamples come from (default: `tokens`); use another draw from the task's
            evaluation distribution to keep the two apart.
        generator: draws the resampled sequences.
        metric_name: a description stored with the result.
    """
    cfg = model.cfg
    tokens = tokens.to(cfg.device)
    logits, cache = model.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_resid_pre"))
    baseline = float(metric(logits))
    heads = torch.zeros(len(methods), cfg.n_layers, cfg.n_heads)
    attn = torch.zeros(len(methods), cfg.n_layers)
    mlp = None if cfg.attn_only else torch.zeros(len(methods), cfg.n_layers)
    for i, method in enumerate(methods):
        values = ablation_values(model, tokens, method, reference=reference, generator=generator)
        for layer in range(cfg.n_layers):
            h, a, m = ablate_layer_components(
                model, tokens, metric, values, layer, cache[f"blocks.{layer}.hook_resid_pre"]
            )
            heads[i, layer], attn[i, layer] = h, a
            if mlp is not None:
                mlp[i, layer] = m
    return AblationResult(metric_name, baseline, tuple(methods), heads, attn, mlp)


@torch.no_grad()
def naive_head_ablation(
    model: torch.nn.Module, tokens: Int[Tensor, "batch pos"], metric: Metric, values: dict[str, Tensor]
) -> Float[Tensor, "layer head"]:
    """Reference implementation: one full forward pass per head with `run_with_hooks`."""
    cfg = model.cfg
    out = torch.zeros(cfg.n_layers, cfg.n_heads)
    for layer in range(cfg.n_layers):
        name = f"blocks.{layer}.attn.hook_z"
        for head in range(cfg.n_heads):

            def hook(z: Tensor, hook: Any, head: int = head, name: str = name) -> Tensor:
                z = z.clone()
                z[:, :, head] = values[name][:, :, head]
                return z

            out[layer, head] = float(metric(model.run_with_hooks(tokens, fwd_hooks=[(name, hook)])))
    return out


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
