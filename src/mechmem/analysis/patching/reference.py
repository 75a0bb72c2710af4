"""TransformerLens's own patching functions, keyed by mechmem sweep name: the reference the engine must
equal (tests); resid_post by layer x position is assembled from TL's generic engine and setter."""

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import transformer_lens.patching as tlp

TL_SWEEPS: dict[str, Callable[..., Any]] = {
    "resid_pre": tlp.get_act_patch_resid_pre,
    "resid_mid": tlp.get_act_patch_resid_mid,
    "resid_post": partial(
        tlp.generic_activation_patch,
        patch_setter=tlp.layer_pos_patch_setter,
        activation_name="resid_post",
        index_axis_names=("layer", "pos"),
    ),
    "attn_out": tlp.get_act_patch_attn_out,
    "mlp_out": tlp.get_act_patch_mlp_out,
    "attn_head_out_all_pos": tlp.get_act_patch_attn_head_out_all_pos,
    "attn_head_out_by_pos": tlp.get_act_patch_attn_head_out_by_pos,
    "attn_head_pattern_all_pos": tlp.get_act_patch_attn_head_pattern_all_pos,
    "attn_head_pattern_by_pos": tlp.get_act_patch_attn_head_pattern_by_pos,
}
"""Sweep name -> TL function `(model, base_tokens, source_cache, metric) -> Tensor`."""
