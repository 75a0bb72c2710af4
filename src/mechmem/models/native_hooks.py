"""HookedTransformer's on-request attention hooks for TransformerLens 4's natively built models.

HookedTransformer fires per-head input hooks (`use_split_qkv_input`: `blocks.L.hook_q_input`, `hook_k_input`,
`hook_v_input` [batch pos head_index d_model]), `hook_attn_in` (`use_attn_in`) and `attn.hook_result`
(`use_attn_result`) on request; TransformerLens 4.3's native attention has these hook points but never fires
them. `ForkingAttentionBridge` honours the flags (TransformerLens's own forward while none is on) and
`NativeHookBridge` accepts them, so every backend shows the same hooks and numbers. TransformerLens 4 fires
`attn.hook_attn_scores` after the fact with the pattern; here, whenever that hook is hooked (a cache, an
edit), the forking forward runs and it holds the masked scores before the softmax, as HookedTransformer's
does. `ResidMidBlockBridge` puts `hook_resid_mid` on the residual stream between attention and MLP
(TransformerLens 4 aliases it to the second norm's input). Imported by `mechmem.models.backend` under
TransformerLens 4 only.
"""

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformer_lens import TransformerBridge
from transformer_lens.hook_points import HookPoint
from transformer_lens.model_bridge.generalized_components import AttentionBridge, BlockBridge, LinearBridge
from transformer_lens.model_bridge.sources.native.model import NativeBlock

FLAGS = ("use_split_qkv_input", "use_attn_in", "use_attn_result")
"""The configuration flags of the on-request attention hooks."""


class ForkingAttentionBridge(AttentionBridge):
    """A native model's attention bridge that fires the on-request hooks when their flag is on."""

    supports_attn_result = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        split, shared, result = (bool(getattr(self.config, flag, False)) for flag in FLAGS)
        if not (split or shared or result or self.hook_attn_scores.has_hooks()):
            return super().forward(*args, **kwargs)
        hidden = kwargs.pop("hidden_states") if "hidden_states" in kwargs else args[0]
        mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
        try:
            out, pattern = self._attend(self.hook_in(hidden), split, shared, result, mask, positions)
        finally:
            self._captured_pre_ln_residual = None
        return self.hook_out(out), pattern

    def _forks(self, hidden: Tensor, split: bool, shared: bool) -> list[Tensor | None]:
        """Per-head inputs of the query, key and value projections [batch pos head d_model], normalised, or
        None where a projection reads the shared normalised input."""
        attn = self.original_component
        resid = self._captured_pre_ln_residual
        source = hidden if resid is None else resid  # the block captures its residual before the first norm

        def fork(hook: Any, n_heads: int) -> Tensor:
            x = hook(source[:, :, None, :].expand(*source.shape[:2], n_heads, source.shape[-1]).clone())
            return self._apply_ln1_per_head(x) if resid is not None else x

        if split:
            return [
                fork(self.hook_q_input, attn.n_heads),
                fork(self.hook_k_input, attn.n_kv_heads),
                fork(self.hook_v_input, attn.n_kv_heads),
            ]
        if shared:
            if attn.n_kv_heads != attn.n_heads:
                raise ValueError("hook_attn_in with grouped-query attention (one copy per query head only)")
            x = fork(self.hook_attn_in, attn.n_heads)
            return [x, x, x]
        return [None, None, None]

    @staticmethod
    def _project(linear: LinearBridge, x: Tensor | None, hidden: Tensor, d_head: int) -> Tensor:
        """A projection [batch pos (head d_head)]: of each head's own input x, or of the shared input."""
        if x is None:
            return linear(hidden)
        layer = linear.original_component
        weight = layer.weight.reshape(x.shape[-2], d_head, x.shape[-1])
        out = torch.einsum("bshm,hdm->bshd", x, weight)
        if layer.bias is not None:
            out = out + layer.bias.reshape(x.shape[-2], d_head)
        return linear.hook_out(out.flatten(-2))

    def _attend(
        self, hidden: Tensor, split: bool, shared: bool, result: bool, mask: Tensor | None, positions: Any
    ) -> tuple[Tensor, Tensor]:
        """The wrapped `NativeAttention`'s computation with the per-head inputs and outputs hooked."""
        attn = self.original_component
        batch, seq, _ = hidden.shape
        d_head = attn.d_head
        q_in, k_in, v_in = self._forks(hidden, split, shared)
        q, k, v = (
            self._project(linear, x, hidden, d_head).view(batch, seq, -1, d_head).transpose(1, 2)
            for linear, x in ((attn.q, q_in), (attn.k, k_in), (attn.v, v_in))
        )
        if attn.rotary is not None:
            q, k = attn.rotary.apply_rope(q, k, position_ids=positions)
        if attn.kv_repeats > 1:
            k, v = k.repeat_interleave(attn.kv_repeats, dim=1), v.repeat_interleave(attn.kv_repeats, dim=1)
        scores = q @ k.transpose(-2, -1) / attn.scale
        if attn.attn_scores_soft_cap > 0:
            scores = attn.attn_scores_soft_cap * torch.tanh(scores / attn.attn_scores_soft_cap)
        block = attn.causal_mask[:seq, :seq] if attn.causal else torch.zeros(seq, seq, dtype=torch.bool)
        if mask is not None:
            block = attn._combine_attention_mask(block, mask, batch=batch)
        scores = self.hook_attn_scores(scores.masked_fill(block, -math.inf))
        pattern = F.softmax(scores, dim=-1).masked_fill(block, 0.0)
        pattern = self.hook_pattern(pattern)
        z = (pattern @ v).transpose(1, 2).reshape(batch, seq, -1)
        if not result:
            return attn.o(z), pattern
        z = attn.o.hook_in(z)  # hook_z
        layer = attn.o.original_component
        per_head = torch.einsum(
            "bshd,mhd->bshm",
            z.view(batch, seq, attn.n_heads, d_head),
            layer.weight.view(-1, attn.n_heads, d_head),
        )
        out = self.hook_result(per_head).sum(-2)
        return attn.o.hook_out(out if layer.bias is None else out + layer.bias), pattern


class NativeHookBridge(TransformerBridge):
    """A `TransformerBridge` of a native model whose setters accept the on-request attention flags."""

    def set_use_split_qkv_input(self, use_split_qkv_input: bool) -> None:
        self._set_attention_flag("use_split_qkv_input", use_split_qkv_input, "use_attn_in")

    def set_use_attn_in(self, use_attn_in: bool) -> None:
        self._set_attention_flag("use_attn_in", use_attn_in, "use_split_qkv_input")

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        self._set_attention_flag("use_attn_result", use_attn_result, None)

    def _set_attention_flag(self, flag: str, value: bool, exclusive: str | None) -> None:
        if value and exclusive is not None and bool(getattr(self.cfg, exclusive, False)):
            raise ValueError(f"{flag} and {exclusive} are mutually exclusive; set {exclusive} off first")
        self.cfg._set_bridge_managed_hook_flag(flag, value)
        self._propagate_attention_flag(flag, value)

    def __deepcopy__(self, memo: dict[int, Any]) -> "NativeHookBridge":
        """A deep copy whose blocks capture their own residual stream (the copied forward pre-hooks hold weak
        proxies of the original's modules)."""
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        copied.__setstate__(copy.deepcopy(self.__dict__, memo))
        for block in copied.blocks:
            block._teardown_capture_hooks()  # the copied hooks write to the original's attention
            block._maybe_wire_capture_hooks()
        return attach(copied)


class ResidMidBlockBridge(BlockBridge):
    """A native model's block bridge whose `hook_resid_mid` is a hook point on the residual stream itself."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hook_mid = HookPoint()


class MidHookedNativeBlock(NativeBlock):
    """TransformerLens's native block, firing its bridge's residual hook between attention and MLP."""

    def forward(
        self, hidden_states: Tensor, attention_mask: Any = None, position_ids: Any = None, **kwargs: Any
    ) -> tuple[Tensor]:
        attn_out, _ = self.attn(
            self.ln1(hidden_states), attention_mask=attention_mask, position_ids=position_ids
        )
        hidden_states = hidden_states + attn_out
        if not self.cfg.attn_only:
            hook = self.__dict__.get("mid_hook")  # set by `attach`; not a submodule of the native block
            hidden_states = hook(hidden_states) if hook is not None else hidden_states
            hidden_states = hidden_states + self.mlp(self.ln2(hidden_states))
        return (hidden_states,)


def prepare(model: torch.nn.Module) -> None:
    """Before bridging: the native model's blocks become `MidHookedNativeBlock`s (their class only)."""
    for block in model.layers:
        block.__class__ = MidHookedNativeBlock


def use_hooked_components(adapter: Any) -> None:
    """`build_bridge_from_module`'s post-adapter hook: the blocks become `ResidMidBlockBridge`s and their
    attention `ForkingAttentionBridge`."""
    plain = adapter.component_mapping["blocks"]
    submodules = dict(plain.submodules)
    attn = submodules["attn"]
    submodules["attn"] = ForkingAttentionBridge(
        name=attn.name, config=attn.config, submodules=dict(attn.submodules)
    )
    block = ResidMidBlockBridge(name=plain.name, config=plain.config, submodules=submodules)
    block.hook_aliases = dict(plain.hook_aliases)
    if "hook_resid_mid" in block.hook_aliases:  # attention-only blocks have none
        block.hook_aliases["hook_resid_mid"] = "hook_mid"
    adapter.component_mapping["blocks"] = block


def attach(bridge: TransformerBridge) -> TransformerBridge:
    """The native `bridge` as a `NativeHookBridge` (its class only; its modules and weights are unchanged),
    each native block wired to its bridge's residual hook."""
    bridge.__class__ = NativeHookBridge
    for block in bridge.blocks:
        object.__setattr__(block.original_component, "mid_hook", block.hook_mid)
    return bridge
