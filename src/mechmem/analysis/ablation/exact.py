"""Head and layer ablation: knock a component out and measure how much a metric moves.

Each attention head's output z (`blocks.L.attn.hook_z`, before W_O) is set by `METHODS`: zero (the head
writes only its share of b_O), mean (its mean over a reference batch, per position) or resample (its
value on another reference sequence). A whole attention layer is ablated on all its heads, an MLP layer
on `blocks.L.hook_mlp_out`. A `SequenceMetric` gives every delta a paired 95% bootstrap interval over
sequences (`ablation.result`); `naive_head_ablation` is the engine's reference.

Caveats: zero ablation can push the model off-distribution; ablations measure necessity one component at
a time, so redundant (backup) heads each look unimportant.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.ablation.result import AblationResult, SequenceChanges
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
from mechmem.models.checks import (
    check_callable,
    check_choices,
    check_generator,
    check_metric_value,
    check_model,
    check_tokens,
)
from mechmem.models.parts import Head

METHODS = ("zero", "mean", "resample")
"""What an ablated head's output z is set to (`mechmem.cli.args.ABLATION_METHODS` names the same)."""
Metric = Callable[[Tensor], Tensor]
"""logits [batch pos d_vocab] -> a scalar tensor (or one value per sequence, or a `SequenceMetric`)."""


@dataclass(frozen=True)
class SequenceMetric:
    """A metric that is a ratio of sums over sequences: sum_i parts(logits)_i / sum_i weights_i. Called on
    logits it gives that scalar; `ablate_heads` reads the parts for intervals over sequences."""

    parts: Callable[[Tensor], Tensor]
    """logits [batch pos d_vocab] -> each sequence's share of the numerator [batch]."""
    weights: Float[Tensor, " batch"]
    """Each sequence's share of the denominator (masked positions for a loss; 1 for a mean over prompts)."""

    def __call__(self, logits: Float[Tensor, "batch pos d_vocab"]) -> Float[Tensor, ""]:
        return self.parts(logits).sum() / self.weights.to(logits.device).sum().clamp_min(1e-12)


def task_metric(
    task: Any, name: str, n: int, *, generator: torch.Generator
) -> tuple[Tensor, SequenceMetric, str]:
    """(tokens, metric, description) from a task: "loss" (masked cross-entropy) or "accuracy" on an eval
    batch, "logit_diff" on its patching pair, each a `SequenceMetric`."""
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
    """logits [batch pos d_vocab] -> each sequence's cross-entropy summed over its masked positions."""

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
    """(the layer's `hook_z`, its `hook_mlp_out` or None on an attention-only model)."""
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


def layer_parts(
    model: torch.nn.Module, values: Tensor, n_methods: int
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(heads [method layer head], attn, mlp [method layer] or None) from `layer_variants` order."""
    cfg = model.cfg
    per_layer = values.float().reshape(n_methods, cfg.n_layers, -1)
    mlp = None if cfg.attn_only else per_layer[..., cfg.n_heads + 1]
    return per_layer[..., : cfg.n_heads], per_layer[..., cfg.n_heads], mlp


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
    """Replacement values for every `hook_z` and `hook_mlp_out`, shaped like the activation on `tokens`;
    `reference` (default: `tokens`) is the batch means and resamples come from."""
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
    """Metric after ablating each head of `layer`, the attention layer and its MLP (None if absent)."""
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
    """Ablate every head, every attention layer and every MLP layer with each method of `METHODS`.

    Args:
        metric: logits [batch pos d_vocab] -> scalar (closes over the targets of `tokens`).
        reference: the batch means and resamples come from (default: `tokens`).
        generator: draws the resampled sequences.

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
    check_model(model)
    tokens = check_tokens(model, tokens)
    if not isinstance(metric, SequenceMetric):
        check_callable("metric", metric)
    methods = tuple(check_choices("methods", methods))  # each one is checked by `method_setter`
    reference = None if reference is None else check_tokens(model, reference, "reference")
    check_generator(generator)
    cfg = model.cfg
    reference = reference_tokens(tokens, reference)
    setters = [method_setter(method, reference, generator) for method in methods]
    variants: list[Any] = [[]]  # the unablated baseline
    for setter in setters:
        for layer in range(cfg.n_layers):
            variants += layer_variants(model, layer, lambda hook, index, setter=setter: setter)
    parts = metric.parts if isinstance(metric, SequenceMetric) else metric
    out = intervene(model, tokens, variants, parts).double()
    check_metric_value(out[0], metric_name, batch=len(tokens), finite_logits=False)
    intervals, sequences = None, None
    if out.ndim == 2:  # [variant sequence]: a ratio of sums over sequences
        weights = metric.weights if isinstance(metric, SequenceMetric) else torch.ones(out.shape[1])
        weights = weights.double().cpu()
        sequences = SequenceChanges((out[1:] - out[0]).T.cpu(), weights, out[0].cpu())  # paired changes
        intervals = sequences.intervals(len(methods), cfg)
        out = out.sum(1) / weights.sum()
    baseline, (heads, attn, mlp) = float(out[0]), layer_parts(model, out[1:], len(methods))
    return AblationResult(
        metric_name, baseline, tuple(methods), heads, attn, mlp, intervals=intervals, sequences=sequences
    )


def n_variants(model: torch.nn.Module) -> int:
    """Ablations `ablate_heads` makes per method: per layer each head, the attention layer and the MLP."""
    return len(variant_names(model))


def variant_names(model: torch.nn.Module) -> list[str]:
    """Names of one method's ablations in the engine's order: per layer "L0H0".., "L0 attn", "L0 mlp"."""
    cfg, out = model.cfg, []
    for layer in range(cfg.n_layers):
        out += [str(Head(layer, head)) for head in range(cfg.n_heads)] + [f"L{layer} attn"]
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
