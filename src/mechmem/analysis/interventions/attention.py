"""Attention's output z for many patched runs at once, laid out so that shared keys are never copied.

A resumed pass (`Replay.resume`) needs only z, not the pattern, and its inputs have a leading *patch* axis:
queries, keys and values of the positions a patch changes differ per patch, while the keys and values of the
earlier positions (`past`) are the base run's, one copy shared by every patch. Written the obvious way
(`q @ k.T` per patch, the past part broadcast), a matrix product copies the past keys and values once per
patch and the scores are concatenated, masked, cleaned and sliced again, several passes over the largest
tensor of the pass. Here the patch axis is moved next to the query positions ([batch, head, patch, query,
...]), so that the past keys meet every patch's queries in one product with nothing copied, the causal mask is
added as a 0 / -inf bias to the fresh part only (the past keys precede every query unless a window or a
read-out query hides some), and the scale is applied to the queries rather than to the scores.

Where every score is finite, the result equals TransformerLens's arithmetic up to float rounding (a causal row
always sees its own key, so no row is wholly masked). A NaN or infinite score, masked or not, may make its
row NaN, where TransformerLens's masked fill and its backend's clean-up (HookedTransformer: every NaN to 0)
give something else; the caller checks z for NaN and recomputes such a pass TransformerLens's way
(`Replay.attend_z`).
"""

import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor


def attention_z(
    q: Float[Tensor, "*patch batch query head d_head"],
    k: Float[Tensor, "*patch batch key head d_head"],
    v: Float[Tensor, "*patch batch key head d_head"],
    mask: Bool[Tensor, "*mb query all_keys"],
    scale: float,
    past: tuple[Tensor, Tensor] | None = None,
) -> Float[Tensor, "*patch batch query head d_head"]:
    """softmax(q . [past_k, k] / scale, masked) @ [past_v, v] per patch; None where the result has a NaN.

    `past` = (k, v) [batch, start, head, d_head] of the first positions, shared by every patch; `k`, `v` hold
    the positions from `start` on. `mask` (True: attend) is [query, all_keys] or [batch, query, all_keys].
    """
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
    past_hidden = start and bool((bias[..., :start] != 0).any())
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


__all__ = ["attention_z"]
