"""MLP neurons: direct effect on a target logit, the top neurons, and neuron ablation.

Neuron n of layer l writes act_n * W_out[l][n] into the residual stream; its *direct effect* on the
logit of token t is that vector read straight through the unembedding,

    DE_n(t) = act_n * (W_out[l][n] / scale) . (w_ln * W_U[:, t])

with `scale` the final norm's per-position scale (LayerNorm centres the vector first) and `w_ln` its
weight; both 1 without a final norm.

Caveats: the direct effect ignores paths through later layers and freezes the clean run's norm scale;
confirm candidates by ablation (`ablate_neurons`).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.interventions import Intervention, intervened_logits, mean, zero


def _final_norm_read(model: Any, vectors: Float[Tensor, "*batch d_model"], scale: Tensor | None) -> Tensor:
    """Map residual-stream write vectors through the final norm (frozen scale), ready for W_U."""
    norm = model.cfg.normalization_type
    if getattr(model.cfg, "final_rms", False) and norm is not None:
        norm = "RMS" if norm == "LN" else "RMSPre"  # TL builds an RMS final norm in this case
    if norm in ("LN", "LNPre"):
        vectors = vectors - vectors.mean(-1, keepdim=True)
    if norm is not None and scale is None:
        raise ValueError("a model with a final norm needs the norm scale")
    if scale is not None and norm is not None:
        vectors = vectors / scale
    if norm in ("LN", "RMS"):
        vectors = vectors * model.ln_final.w
    return vectors


@torch.no_grad()
def neuron_direct_effect(
    model: Any,
    tokens: Int[Tensor, "batch pos"],
    layer: int,
    pos: Int[Tensor, " batch"],
    target: Int[Tensor, " batch"],
) -> Float[Tensor, "batch d_mlp"]:
    """Per sequence, the direct effect of every neuron of `layer`'s MLP at `pos` on the logit of `target`."""
    names = {f"blocks.{layer}.mlp.hook_post", "ln_final.hook_scale"}
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in names)
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    pos, target = pos.to(tokens.device), target.to(tokens.device)
    acts = cache[f"blocks.{layer}.mlp.hook_post"][rows, pos]  # [batch d_mlp]
    scale = cache["ln_final.hook_scale"][rows, pos] if "ln_final.hook_scale" in cache else None  # [batch 1]
    w_out = model.blocks[layer].mlp.W_out  # [d_mlp d_model]
    directions = model.W_U[:, target].T  # [batch d_model]
    if model.cfg.normalization_type is None:
        per_unit = directions @ w_out.T  # [batch d_mlp]
    else:
        # The frozen scale differs per sequence; the read is linear in the write vector, so each neuron's
        # vector goes through the norm at scale 1 once and each sequence's scale divides the dot products
        # (no [batch d_mlp d_model] tensor: 4.8 GB for 512 sequences of a d_model 768 model).
        read = _final_norm_read(model, w_out, torch.ones_like(scale[:1]))  # [d_mlp d_model]
        per_unit = (directions @ read.T) / scale  # [batch d_mlp]
    return acts * per_unit


@dataclass
class NeuronRanking:
    """Neurons of one layer ranked by their mean direct effect on a target logit."""

    layer: int
    """MLP layer index."""
    mean_effect: Float[Tensor, " d_mlp"]
    """Mean direct effect over the sequences, per neuron."""
    order: Int[Tensor, " d_mlp"]
    """Neuron indices sorted by mean direct effect, largest first."""

    def __post_init__(self) -> None:
        if self.mean_effect.shape != self.order.shape:
            raise ValueError("mean_effect and order must both be [d_mlp]")

    def top(self, k: int) -> list[int]:
        """The k neurons with the largest mean direct effect."""
        return self.order[:k].tolist()

    def share(self, k: int) -> float:
        """Fraction of the total positive mean direct effect carried by the top k neurons."""
        positive = self.mean_effect.clamp_min(0)
        total = float(positive.sum())
        return float(positive[self.order[:k]].sum()) / total if total > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "axes": ["d_mlp"],
            "mean_effect": self.mean_effect.tolist(),
            "order": self.order.tolist(),
        }


def rank_neurons(effects: Float[Tensor, "batch d_mlp"], layer: int) -> NeuronRanking:
    """Rank neurons by mean direct effect over the batch."""
    mean = effects.mean(0).cpu()
    return NeuronRanking(layer, mean, mean.argsort(descending=True))


@torch.no_grad()
def ablate_neurons(
    model: Any,
    tokens: Int[Tensor, "batch pos"],
    layer: int,
    neurons: Sequence[int],
    *,
    mode: str = "zero",
    reference: Int[Tensor, "ref pos"] | None = None,
) -> Float[Tensor, "batch pos d_vocab"]:
    """Logits with the given neurons of `layer`'s MLP ablated at every position: "zero" sets them to 0,
    "mean" to their mean over the `reference` sequences (default: `tokens`) at each position."""
    if mode not in ("zero", "mean"):
        raise ValueError("mode must be 'zero' or 'mean'")
    setter = zero() if mode == "zero" else mean(tokens if reference is None else reference)
    index = (slice(None), [int(n) for n in neurons])
    return intervened_logits(model, tokens, Intervention(f"blocks.{layer}.mlp.hook_post", index, setter))
