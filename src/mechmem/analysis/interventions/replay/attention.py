"""The replay's attention: TransformerLens's arithmetic from a block's weights, and its output z for many
patched runs at once, laid out so that shared keys are never copied.

`AttentionReplay.attend` computes a block's pattern, keys, values and z in TransformerLens's order of
operations (whole runs and gradients); `attend_z` computes only z for a resumed pass, by `attention_z`:
the patch axis sits next to the query positions ([batch, head, patch, query, ...]) so the base run's
past keys meet every patch's queries in one product, the causal mask is a 0 / -inf bias on the fresh
part only, and the scale is applied to the queries.

Where every score is finite the result equals TransformerLens's up to float rounding. A NaN or infinite
score may make its row NaN where TransformerLens's masked fill gives something else; `attend_z` then
recomputes that pass with `attend`.
"""

import math
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.analysis.interventions.replay.cells import take_pos
from mechmem.analysis.interventions.replay.support import attention_weights, rotary_tables
from mechmem.models.backend import attention_scale, is_bridge


def attention_z(
    q: Float[Tensor, "*patch batch query head d_head"],
    k: Float[Tensor, "*patch batch key head d_head"],
    v: Float[Tensor, "*patch batch key head d_head"],
    mask: Bool[Tensor, "*mb query all_keys"],
    scale: float,
    past: tuple[Tensor, Tensor] | None = None,
) -> Float[Tensor, "*patch batch query head d_head"]:
    """softmax(q . [past_k, k] / scale, masked) @ [past_v, v] per patch. `past` = (k, v) [batch, start,
    head, d_head] of the first positions, shared by every patch; `k`, `v` hold the positions from
    `start` on. `mask` (True: attend) is [query, all_keys] or [batch, query, all_keys]."""
    *lead, batch, n_query, heads, d_head = q.shape
    n_fresh = k.shape[-3]
    start = 0 if past is None else past[0].shape[-3]
    patches = math.prod(lead)

    def to_blocks(x: Tensor) -> Tensor:  # [*patch, batch, pos, head, d] -> [batch, head, patch, pos, d]
        return x.reshape(patches, batch, x.shape[-3], heads, d_head).permute(1, 3, 0, 2, 4)

    queries = to_blocks(q).contiguous().div_(scale)
    bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, -torch.inf)
    if bias.dim() == 3:  # per prompt: [batch, 1 (head), 1 (patch), query, key]
        bias = bias[:, None, None]
    scores = queries @ to_blocks(k).transpose(-1, -2)
    past_hidden = start > 0 and bool((bias[..., :start] != 0).any())  # a window or read-out hides some
    if not past_hidden:
        scores = scores.add_(bias[..., start:])
    if start:
        past_k, past_v = past
        flat_queries = queries.view(batch, heads, patches * n_query, d_head)
        past_scores = (flat_queries @ past_k.permute(0, 2, 3, 1)).view(batch, heads, patches, n_query, start)
        scores = torch.cat([past_scores, scores], -1)
        if past_hidden:
            scores = scores.add_(bias)
    pattern = torch.softmax(scores, -1)
    z = pattern[..., start:] @ to_blocks(v)
    if start:
        flat_pattern = pattern.view(batch, heads, patches * n_query, start + n_fresh)[..., :start]
        z.view(batch, heads, patches * n_query, d_head).add_(flat_pattern @ past_v.permute(0, 2, 1, 3))
    return z.permute(2, 0, 3, 1, 4).reshape(*lead, batch, n_query, heads, d_head)


class AttentionReplay:
    """Each block's attention of a TransformerLens model, computed from its weights outside the hooks."""

    def __init__(self, model: Any) -> None:
        cfg = model.cfg
        self.model, self.cfg = model, cfg
        self.rotary = cfg.positional_embedding_type == "rotary"
        self.nan_to_zero = not is_bridge(model)
        """HookedTransformer sets every NaN of a pattern to 0, a TransformerLens 4 bridge masked entries."""
        self.local = [getattr(block.attn, "attn_type", "global") == "local" for block in model.blocks]
        """Per layer: local attention (keys window_size or more positions back are masked; TL's attn_type)."""
        self.weights = []
        self.scales = [attention_scale(model, layer) for layer in range(cfg.n_layers)]
        for layer in range(cfg.n_layers):
            w = attention_weights(model, layer)
            flat = [x.detach().permute(0, 2, 1).reshape(-1, cfg.d_model) for x in (w.W_Q, w.W_K, w.W_V)]
            biases = [b.detach().reshape(-1) for b in (w.b_Q, w.b_K, w.b_V)]
            w_o = w.W_O.detach().reshape(-1, cfg.d_model).T.contiguous()
            self.weights.append((*flat, *biases, w_o, w.b_O.detach()))
        self.kv_heads = w.W_K.shape[0]
        """Key/value heads (grouped-query attention: each repeated over its group's query heads)."""

    def attend(
        self,
        layer: int,
        h: Float[Tensor, "... pos d_model"],
        readout: Int[Tensor, "batch read"] | None = None,
        past: tuple[Tensor, Tensor] | None = None,
        h_read: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Attention on normalised input `h`; queries at all its positions, or only at `readout`.

        With `past` = (k, v) of the first positions, `h` holds only the later positions and queries at
        `readout` need `h_read` (`split_take`). Returns (pattern [... head q k] over all keys, k and v
        [... pos head d_head] of the positions of `h`, z [... q head d_head]).
        """
        q, k, v, mask = self.attention_inputs(layer, h, readout, past, h_read)
        start = 0 if past is None else past[0].shape[-3]
        mask = mask if readout is None else mask.unsqueeze(-3)
        scores = self.scores(layer, q, k)
        if past is not None:
            scores = torch.cat([self.scores(layer, q, past[0]), scores], -1)
        # The mask and the backend's clean-up after softmax (HookedTransformer: every NaN to 0;
        # TransformerLens 4: the masked entries to 0), in place where no gradient is taken (`scores` and
        # `pattern` are fresh tensors here; softmax's backward reads its output).
        scores = scores.masked_fill_(~mask, -torch.inf)
        pattern = F.softmax(scores, dim=-1)
        grad = pattern.requires_grad
        if self.nan_to_zero:
            pattern = torch.nan_to_num(pattern, nan=0.0) if grad else pattern.nan_to_num_(0.0)
        else:
            pattern = pattern.masked_fill(~mask, 0.0) if grad else pattern.masked_fill_(~mask, 0.0)
        if past is None:
            return pattern, k, v, self.z_from_pattern(pattern, v)
        z = self.z_from_pattern(pattern[..., :start], past[1]) + self.z_from_pattern(pattern[..., start:], v)
        return pattern, k, v, z

    def attend_z(
        self,
        layer: int,
        h: Float[Tensor, "... pos d_model"],
        readout: Int[Tensor, "batch read"] | None = None,
        past: tuple[Tensor, Tensor] | None = None,
        h_read: Tensor | None = None,
    ) -> Float[Tensor, "... q head_index d_head"]:
        """`attend`'s z alone for a resumed pass (no pattern, no gradient), by `attention_z`; by `attend`
        where that gives a NaN."""
        q, k, v, mask = self.attention_inputs(layer, h, readout, past, h_read)
        z = attention_z(q, k, v, mask, self.scales[layer], past)
        if bool(z.isnan().any()):
            return self.attend(layer, h, readout, past, h_read)[-1]
        return z

    def attention_inputs(
        self,
        layer: int,
        h: Float[Tensor, "... pos d_model"],
        readout: Int[Tensor, "batch read"] | None,
        past: tuple[Tensor, Tensor] | None,
        h_read: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Queries, the keys and values of the positions of `h`, and the mask ([q, k], or [batch, read, k]
        with `readout`; True: attend) of `attend`."""
        start = 0 if past is None else past[0].shape[-3]
        k, v = self.keys_values(layer, h, start)
        keys = torch.arange(start + k.shape[-3], device=h.device)
        if readout is None:
            hq, queries = h, keys[start:]
        else:
            hq = take_pos(h, readout, -3, -2) if h_read is None else h_read
            queries = readout
        return self.queries(layer, hq, queries), k, v, self.attention_mask(layer, queries, keys)

    def keys_values(
        self, layer: int, h: Float[Tensor, "... pos d_model"], start: int = 0
    ) -> tuple[Tensor, Tensor]:
        """Keys (rotated to positions start, start + 1, ...) and values [... pos head d_head] of `h`,
        grouped-query heads repeated over their query heads."""
        _, w_k, w_v, _, b_k, b_v, _, _ = self.weights[layer]
        k = F.linear(h, w_k, b_k).unflatten(-1, (self.kv_heads, self.cfg.d_head))
        v = F.linear(h, w_v, b_v).unflatten(-1, (self.kv_heads, self.cfg.d_head))
        k = self.rotate(layer, k, torch.arange(start, start + k.shape[-3], device=h.device))
        if self.kv_heads != self.cfg.n_heads:
            k, v = (x.repeat_interleave(self.cfg.n_heads // self.kv_heads, dim=-2) for x in (k, v))
        return k, v

    def queries(
        self, layer: int, h: Float[Tensor, "... q d_model"], positions: Int[Tensor, "*b q"]
    ) -> Float[Tensor, "... q head_index d_head"]:
        """Queries of normalised input `h` whose rows sit at `positions` (rotated there)."""
        w_q, b_q = self.weights[layer][0], self.weights[layer][3]
        q = F.linear(h, w_q, b_q).unflatten(-1, (self.cfg.n_heads, self.cfg.d_head))
        return self.rotate(layer, q, positions)

    def attention_mask(self, layer: int, queries: Tensor, keys: Int[Tensor, " k"]) -> Tensor:
        """Which keys each query attends to ([*queries.shape, k]): causal, and within a local window."""
        mask = queries[..., None] >= keys
        if self.local[layer]:
            mask = mask & (keys > queries[..., None] - self.cfg.window_size)
        return mask

    def scores(
        self, layer: int, q: Float[Tensor, "... q head d_head"], k: Float[Tensor, "... k head d_head"]
    ) -> Float[Tensor, "... head q k"]:
        """Attention scores before masking: q . k / the layer's attention scale."""
        return (q.movedim(-2, -3) @ k.movedim(-3, -1)).div_(self.scales[layer])

    def rotate(
        self, layer: int, x: Float[Tensor, "... pos head_index d_head"], positions: Int[Tensor, "*b pos"]
    ) -> Float[Tensor, "... pos head_index d_head"]:
        """Queries or keys `x` rotated by their absolute `positions` ([pos] or [batch read]) on the first
        rotary_dim dimensions with the module's own sin/cos tables (TransformerLens's `apply_rotary` at
        offset 0); unchanged without rotary positions."""
        if not self.rotary:
            return x
        needed = int(positions.max()) + 1 if positions.numel() else 0
        cos, sin, rotate = rotary_tables(self.model, layer, needed)
        dim = cos.shape[-1]
        cos, sin = (t[positions].unsqueeze(-2).to(x.dtype) for t in (cos, sin))
        x_rot, x_pass = x[..., :dim], x[..., dim:]
        return torch.cat([x_rot * cos + rotate(x_rot) * sin, x_pass], dim=-1)

    @staticmethod
    def z_from_pattern(
        pattern: Float[Tensor, "*pb head_index q k"], v: Float[Tensor, "*vb k head_index d_head"]
    ) -> Float[Tensor, "*pb q head_index d_head"]:
        return (pattern.to(v.dtype) @ v.movedim(-3, -2)).movedim(-3, -2)


__all__ = ["AttentionReplay", "attention_z"]
