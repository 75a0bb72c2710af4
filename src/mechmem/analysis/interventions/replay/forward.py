"""A hook-free replay of a `HookedTransformer` forward pass that can resume at any activation.

Activation patching needs one forward pass per patch, but every patched run is identical to the unpatched run
up to the patched activation. `Replay` therefore (1) runs a model once and keeps every activation a patch may
replace (`resid_pre`, `pattern`, `z`, `attn_out`, `resid_mid`, `mlp_out`, `resid_post` per layer), and (2)
resumes a forward pass from a replaced activation, with a leading *patch* axis so that many patched runs share
one pass.

Three shortcuts make the resumed pass cheaper while leaving its result unchanged:
    - causal attention: logits at the read-out positions depend only on earlier positions, so inputs may be
      truncated after the last read-out position;
    - everything after the last layer's attention is position-wise, so the last layer computes queries, MLP,
      final norm and unembedding only at the read-out positions (`readout`, one row of positions per prompt);
    - the rest of the patched block after its attention is position-wise too, so it is computed only on the
      rows a patch changed (`finish_rows`); the others keep the base run's values.
A resumed pass keeps no attention pattern; its attention (`attention.attention_z`) reads the base run's keys
and values of the unchanged positions where they are, for every patch at once.

The replay mirrors TransformerLens's own arithmetic (same `F.linear` projections, causal mask with the
module's `IGNORE` value, softmax, the backend's NaN clean-up), calling the model's own norm, MLP and
unembedding modules; results equal TransformerLens's forward up to float rounding. It bypasses hook points, so
hooks attached to the model are ignored (and none are ever added). Supported: decoder-only
`HookedTransformer`s and TransformerLens 4 bridges around TransformerLens's native model (what mechmem
builds), with learned (standard) or rotary positions (also rotary on the first `rotary_dim < d_head`
dimensions of a head: queries and keys are rotated by their absolute positions with the model's own sin/cos
tables and rotation before the pattern, HookedTransformer's halves or the native model's adjacent pairs, from
`support.rotary_tables`), grouped-query attention (the shared key/value heads of `support.attention_weights`,
computed once per group and repeated over its query heads, as TransformerLens does), local attention
(`attn_types`: a local layer's mask also hides keys `window_size` or more positions back), sequential or
parallel attention and MLP (a parallel block's MLP reads `resid_pre` and there is no `resid_mid`), any norm
and MLP TransformerLens builds (gated, LN / LNPre / RMS / RMSPre: the model's own modules are called), a
custom attention scale and any output vocabulary. Other configurations (shortformer positions, QK norms, soft
caps, post-norms, ...) raise `MechmemError`, and the engine runs those models on hooks; so do TransformerLens
4 bridges of Hugging Face models with rotary positions or grouped-query attention, whose rotary embedding and
key/value weights live in the Hugging Face modules (`support.replay_unsupported` says so).

This is the execution strategy the intervention engine (`mechmem.analysis.interventions`) picks for variants
that replace one activation of a model the replay supports (`stage_of` names the hooks,
`Replay.patched_metric` runs them); the engine uses hooks for everything else.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.interventions.replay.attention import AttentionReplay
from mechmem.analysis.interventions.replay.cells import CellPatches, take_pos
from mechmem.analysis.interventions.replay.schedule import first_position, start_groups
from mechmem.analysis.interventions.replay.support import replay_unsupported
from mechmem.errors import MechmemError

# Activations a patch may replace, in forward order within a block.
STAGES = ("resid_pre", "pattern", "z", "attn_out", "resid_mid", "mlp_out", "resid_post")
# (batch axis, position axis) of each stage's activation, counted from the end so a leading patch axis is
# allowed.
STAGE_AXES = {"pattern": (-4, -2), "z": (-4, -3)} | {s: (-3, -2) for s in STAGES if s not in ("pattern", "z")}

# TransformerLens hook of each stage, per layer.
STAGE_HOOKS = {
    "resid_pre": "blocks.{}.hook_resid_pre",
    "pattern": "blocks.{}.attn.hook_pattern",
    "z": "blocks.{}.attn.hook_z",
    "attn_out": "blocks.{}.hook_attn_out",
    "resid_mid": "blocks.{}.hook_resid_mid",
    "mlp_out": "blocks.{}.hook_mlp_out",
    "resid_post": "blocks.{}.hook_resid_post",
}
_BY_HOOK = {
    tuple(template.split("{}")): stage for stage, template in STAGE_HOOKS.items()
}  # (prefix, suffix) -> stage

_UNSUPPORTED = {
    "use_attn_in": False,
    "use_split_qkv_input": False,
    "use_normalization_before_and_after": False,
    "post_embedding_ln": False,
    "use_qk_norm": False,
    "use_attention_sinks": False,
    "use_logn_attn": False,
    "use_dynamic_ntk_rope": False,
    "attn_scores_soft_cap": -1.0,
    "output_logits_soft_cap": -1.0,
    "clip_qkv": None,
}
_POSITIONS = ("standard", "rotary")


def model_stages(cfg: Any) -> tuple[str, ...]:
    """The stages a model with TransformerLens config `cfg` computes: no `resid_mid` / `mlp_out` in an
    attention-only model, no `resid_mid` where attention and MLP run in parallel."""
    if cfg.attn_only:
        return tuple(s for s in STAGES if s not in ("resid_mid", "mlp_out"))
    if getattr(cfg, "parallel_attn_mlp", False):
        return tuple(s for s in STAGES if s != "resid_mid")
    return STAGES


def split_take(
    late: Float[Tensor, "... batch later d"], whole: Float[Tensor, "batch pos d"], readout: Tensor, start: int
) -> Tensor:
    """Rows at `readout` of a residual stream held as `late` (positions `start` on, patched) after the
    first `start` positions of `whole` (the base run's, unchanged by the patch)."""
    if not start:
        return take_pos(late, readout, -3, -2)
    after = take_pos(late, (readout - start).clamp(min=0), -3, -2)
    before = take_pos(whole[:, :start], readout.clamp(max=start - 1), -3, -2)
    return torch.where((readout >= start)[..., None], after, before)


def stage_of(hook: str) -> tuple[int, str] | None:
    """(layer, stage) of a hook name the replay can resume from, e.g. "blocks.2.attn.hook_z" -> (2, "z")."""
    parts = hook.split(".", 2)
    if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit():
        return None
    stage = _BY_HOOK.get(("blocks.", "." + parts[2]))
    return None if stage is None else (int(parts[1]), stage)


def truncate(stage: str, act: Tensor, keep: int) -> Tensor:
    """An activation cut after position `keep` - 1 (both position axes of an attention pattern)."""
    x = act.narrow(STAGE_AXES[stage][1], 0, keep)
    return x.narrow(-1, 0, keep) if stage == "pattern" else x


@dataclass
class RunActs:
    """Every patchable activation of one run, `acts[stage][layer]`, and the logits at the read-out
    positions."""

    acts: dict[str, list[Tensor]]
    k: list[Float[Tensor, "batch pos head_index d_head"]]
    v: list[Float[Tensor, "batch pos head_index d_head"]]
    logits: Float[Tensor, "batch read d_vocab"]

    def truncated(self, keep: int) -> "RunActs":
        """The same run seen through its first `keep` positions (views, no copies)."""
        acts = {s: [truncate(s, a, keep) for a in layers] for s, layers in self.acts.items()}
        return RunActs(acts, [k[:, :keep] for k in self.k], [v[:, :keep] for v in self.v], self.logits)


class Replay(AttentionReplay):
    """Run and resume a `HookedTransformer`'s forward pass outside its hooks (see the module docstring); the
    attention of each block is `AttentionReplay`'s."""

    def __init__(self, model: torch.nn.Module) -> None:
        cfg = getattr(model, "cfg", None)
        if cfg is None or not hasattr(model, "blocks"):
            raise MechmemError("patching needs a TransformerLens HookedTransformer")
        if reason := replay_unsupported(model):  # `support`'s predicate, for either backend
            raise MechmemError(f"patching: {reason}")
        bad = [k for k, default in _UNSUPPORTED.items() if getattr(cfg, k, default) != default]
        if cfg.positional_embedding_type not in _POSITIONS:
            bad.append(f"positional_embedding_type={cfg.positional_embedding_type}")
        if cfg.attention_dir != "causal":
            bad.append(f"attention_dir={cfg.attention_dir}")
        if getattr(cfg, "original_architecture", None) in (
            "Olmo2ForCausalLM",
            "Olmo3ForCausalLM",
            "OlmoeForCausalLM",
        ):
            bad.append("post-norm architecture")
        if bad:
            raise MechmemError(f"patching does not support this model configuration ({', '.join(bad)})")
        super().__init__(model)
        self.n_layers, self.attn_only = cfg.n_layers, bool(cfg.attn_only)
        self.parallel = bool(getattr(cfg, "parallel_attn_mlp", False)) and not self.attn_only
        self.has_final_norm = cfg.normalization_type is not None

    # -- pieces of a block ------------------------------------------------------------------------------
    def attn_out(
        self, layer: int, z: Float[Tensor, "... pos head_index d_head"]
    ) -> Float[Tensor, "... pos d_model"]:
        w_o, b_o = self.weights[layer][6:]
        return F.linear(z.flatten(-2), w_o, b_o)

    def mlp_out(
        self, layer: int, resid: Float[Tensor, "... pos d_model"]
    ) -> Float[Tensor, "... pos d_model"]:
        """The MLP's output on the residual stream it reads (resid_mid; resid_pre in a parallel block)."""
        block = self.model.blocks[layer]
        flat = resid.reshape(-1, *resid.shape[-2:]).contiguous()
        return block.mlp(block.ln2(flat)).reshape(resid.shape)

    def unembed(self, resid: Float[Tensor, "... pos d_model"]) -> Float[Tensor, "... pos d_vocab"]:
        flat = resid.reshape(-1, *resid.shape[-2:])
        if self.has_final_norm:
            flat = self.model.ln_final(flat)
        out = self.model.unembed(flat)
        return out.reshape(*resid.shape[:-1], out.shape[-1])

    def ln1(self, layer: int, resid: Float[Tensor, "... pos d_model"]) -> Float[Tensor, "... pos d_model"]:
        flat = resid.reshape(-1, *resid.shape[-2:])
        return self.model.blocks[layer].ln1(flat).reshape(resid.shape)

    # -- whole runs -------------------------------------------------------------------------------------
    def run(
        self,
        tokens: Int[Tensor, "batch pos"],
        readout: Int[Tensor, "batch read"],
        grad: bool = False,
        embed: Float[Tensor, "batch pos d_model"] | None = None,
    ) -> RunActs:
        """Run the model on `tokens`, keeping every patchable activation and the logits at `readout`.

        With `grad`, the activations stay in the autograd graph (attribution patching differentiates through
        them). `embed` replaces the token embedding (hook_embed) when given.
        """
        with torch.set_grad_enabled(grad):
            return self._run(tokens, readout, embed)

    def _run(
        self, tokens: Int[Tensor, "batch pos"], readout: Int[Tensor, "batch read"], embed: Tensor | None
    ) -> RunActs:
        model = self.model
        # W_E[tokens] (+ W_pos[:pos]) is what either backend's embedding modules compute (no hook fires).
        resid = model.W_E[tokens] if embed is None else embed
        if not self.rotary:
            resid = resid + model.W_pos[: tokens.shape[-1]]
        if torch.is_grad_enabled():  # gradients w.r.t. activations, even where the parameters are frozen
            resid = resid.detach().requires_grad_(True)
        acts: dict[str, list[Tensor]] = {s: [] for s in STAGES}
        ks, vs = [], []
        for layer in range(self.n_layers):
            acts["resid_pre"].append(resid)
            pattern, k, v, z = self.attend(layer, self.ln1(layer, resid))
            attn_out = self.attn_out(layer, z)
            ks.append(k)
            vs.append(v)
            for name, act in (("pattern", pattern), ("z", z), ("attn_out", attn_out)):
                acts[name].append(act)
            if self.parallel:  # attention and MLP both read resid_pre
                mlp_out = self.mlp_out(layer, resid)
                acts["mlp_out"].append(mlp_out)
                resid = resid + attn_out + mlp_out
            else:
                resid = resid + attn_out
                if not self.attn_only:
                    acts["resid_mid"].append(resid)
                    mlp_out = self.mlp_out(layer, resid)
                    acts["mlp_out"].append(mlp_out)
                    resid = resid + mlp_out
            acts["resid_post"].append(resid)
        logits = self.unembed(take_pos(resid, readout, -3, -2))
        return RunActs(acts, ks, vs, logits)

    @torch.no_grad()
    def resume(
        self,
        layer: int,
        stage: str,
        act: Tensor,
        base: RunActs,
        readout: Int[Tensor, "batch read"],
        start: int = 0,
        prompts: Int[Tensor, " prompt"] | None = None,
    ) -> Float[Tensor, "patch batch read d_vocab"]:
        """Logits at `readout` after replacing activation `stage` of `layer` by `act` (leading patch axis).

        With `prompts`, `act` and `readout` hold those prompts of `base` only.

        In the last layer `act` holds only the read-out positions (see `effective`), except for `resid_pre`,
        whose keys and values are needed at every position. Elsewhere, and for that `resid_pre`, `act` may
        start at position `start` when the patch leaves every earlier position unchanged (causal attention
        keeps them so in later layers too): their keys and values are the base run's.
        """
        last = self.n_layers - 1

        def pick(x: Tensor) -> Tensor:  # the base run's values of the resumed prompts
            return x if prompts is None else x.index_select(0, prompts)

        if stage == "resid_pre":
            resid, first = act, layer
        else:
            read = ("resid_pre", "attn_out", "mlp_out") if self.parallel else ("resid_pre", "resid_mid")
            pieces = {n: pick(base.acts[n][layer][:, start:]) for n in read if base.acts[n]}
            if layer == last:
                pieces = {n: take_pos(x, readout, -3, -2) for n, x in pieces.items()}
                return self.unembed(self.finish_block(layer, stage, act, v=pick(base.v[layer]), **pieces))
            pos_axis = STAGE_AXES[stage][1]
            base_act = pick(base.acts[stage][layer]).narrow(pos_axis, start, act.shape[pos_axis])
            base_post = pick(base.acts["resid_post"][layer][:, start:])
            resid = self.finish_rows(layer, stage, act, base_act, base_post, pieces, pick(base.v[layer]))
            first = layer + 1
        for l in range(first, last):
            past = (pick(base.k[l][:, :start]), pick(base.v[l][:, :start])) if start else None
            z = self.attend_z(l, self.ln1(l, resid), past=past)
            resid = self.finish_block(l, "z", z, resid_pre=resid)
        # The last layer: keys and values of the positions from `start` on (the earlier ones are the base
        # run's), queries and the rest of the block at the read-out positions only.
        past = (pick(base.k[last][:, :start]), pick(base.v[last][:, :start])) if start else None
        resid_read = split_take(resid, pick(base.acts["resid_pre"][last][:, :start]), readout, start)
        z = self.attend_z(last, self.ln1(last, resid), readout, past, self.ln1(last, resid_read))
        return self.unembed(self.finish_block(last, "z", z, resid_pre=resid_read))

    def finish_rows(
        self,
        layer: int,
        stage: str,
        act: Tensor,
        base_act: Tensor,
        base_post: Float[Tensor, "batch pos d_model"],
        pieces: dict[str, Tensor],
        v: Float[Tensor, "batch key head_index d_head"],
    ) -> Float[Tensor, "patch batch pos d_model"]:
        """`finish_block` after any stage but `resid_pre` (whose attention mixes positions): the rest of the
        block is position-wise (per query row for `pattern`), so it is computed only on the rows (patch,
        prompt, position) where `act` differs from the base run's `base_act`; the others are the base run's
        `base_post`, the value a recomputation gives. Dense where most rows differ."""
        if stage == "resid_post":  # nothing left to compute
            return act
        if stage == "pattern":  # [..., head, q, k]: a row is a query position across heads and keys
            differs = (act != base_act).any(-1).any(-2)
        else:  # z: [..., pos, head, d_head]; the others [..., pos, d_model]
            differs = (act != base_act).flatten(STAGE_AXES[stage][1] + 1).any(-1)
        n_rows = int(differs.sum())  # differs: [patch, batch, pos]
        if n_rows * 2 > differs.numel():
            return self.finish_block(layer, stage, act, v=v, **pieces)
        out = base_post.expand(*differs.shape, base_post.shape[-1]).clone()
        if not n_rows:
            return out
        patch, prompt, pos = differs.nonzero(as_tuple=True)
        if stage == "pattern":  # each row's z from its pattern row and its prompt's values
            rows = self.z_from_pattern(act.transpose(-3, -2)[patch, prompt, pos].unsqueeze(-2), v[prompt])
            stage = "z"
        else:
            rows = act[patch, prompt, pos].unsqueeze(STAGE_AXES[stage][1])  # one position per row
        row_pieces = {n: x[prompt, pos].unsqueeze(-2) for n, x in pieces.items()}
        out[patch, prompt, pos] = self.finish_block(layer, stage, rows, **row_pieces).squeeze(-2)
        return out

    def pattern_cells_as_z(self, layer: int, cells: CellPatches, base: RunActs) -> CellPatches:
        """Cells of whole pattern rows (a head, a query position or all, every key) as the same cells of z.

        A pattern row enters the rest of the block only through its z (the row times the values), so the
        source's z, computed once for every row, stands for the source's pattern: each cell's z patch is one
        row per prompt instead of a pattern row of every key to build, compare and multiply per cell. Rows
        where the source's pattern equals the base run's keep the base run's z, so a cell that changes no
        pattern changes no z either and is not run."""
        act, source = torch.broadcast_tensors(cells.act, cells.source)  # [batch, head, q, k]
        base_z = base.acts["z"][layer]  # [batch, q, head, d_head]
        same = (act == source).all(-1).transpose(-1, -2).unsqueeze(-1)  # [batch, q, head, 1]
        source_z = torch.where(same, base_z, self.z_from_pattern(source, base.v[layer]))
        return CellPatches(base_z, source_z, cells.cells[:, [1, 0, 2]], STAGE_AXES["z"][1])

    def effective(self, layer: int, stage: str, act: Tensor, readout: Int[Tensor, "batch read"]) -> Tensor:
        """The part of an activation a resumed run reads: after the last attention, the read-out positions."""
        if layer == self.n_layers - 1 and stage != "resid_pre":
            return take_pos(act, readout, *STAGE_AXES[stage])
        return act

    def finish_block(
        self,
        layer: int,
        stage: str,
        act: Tensor,
        *,
        resid_pre: Tensor | None = None,
        resid_mid: Tensor | None = None,
        attn_out: Tensor | None = None,
        mlp_out: Tensor | None = None,
        v: Tensor | None = None,
    ) -> Float[Tensor, "... pos d_model"]:
        """The rest of block `layer` after `stage` holds `act`, with the unpatched inputs the rest reads.

        `v` is needed after `pattern`, `resid_pre` after `pattern`/`z`/`attn_out`, `resid_mid` after
        `mlp_out`. A parallel block reads `resid_pre` and the unpatched `attn_out` after `mlp_out`, and the
        unpatched `mlp_out` (recomputed from `resid_pre` when not given) after an attention stage.
        """
        x = act
        if stage == "pattern":
            x = self.z_from_pattern(x, v)
        if stage in ("pattern", "z"):
            x = self.attn_out(layer, x)
        if self.parallel and stage != "resid_post":  # resid_post = resid_pre + attn_out + mlp_out
            if stage == "mlp_out":
                return resid_pre + attn_out + x
            return resid_pre + x + (self.mlp_out(layer, resid_pre) if mlp_out is None else mlp_out)
        if stage in ("pattern", "z", "attn_out"):
            x = resid_pre + x
        if self.attn_only:
            return x
        if stage == "mlp_out":
            return resid_mid + x
        if stage != "resid_post":
            x = x + self.mlp_out(layer, x)
        return x

    @torch.no_grad()
    def patched_metric(
        self,
        layer: int,
        stage: str,
        new: Tensor | CellPatches,
        base: RunActs,
        readout: Int[Tensor, "batch read"],
        fn: Callable[[Tensor], Tensor],
        pass_overhead: int = 256,
        base_value: Tensor | None = None,
        max_cells: int | None = None,
    ) -> Tensor:
        """The metric `fn` after replacing activation `stage` of `layer` by each row of `new` [patch, *act].

        `base` and `new` (a tensor or `CellPatches`) are cut after the last read-out position
        (`RunActs.truncated`). Patches that change nothing the read-out depends on are not run: they get the
        base run's metric, the value a run gives. The others resume at the first position they change
        (`start_groups`), after the last layer's attention at the read-out positions only, on the prompts
        they change; the other prompts keep the base run's logits, so `fn` always sees the whole batch.
        Pattern cells of whole rows run as the same cells of z (`pattern_cells_as_z`).
        `base_value`: fn on the base run, if known; `max_cells`: at most that many patches per pass. Returns
        [patch, *metric output].
        """
        base_value = fn(base.logits[None])[0] if base_value is None else base_value
        out = base_value.expand(len(new), *base_value.shape).clone()
        if stage == "pattern" and isinstance(new, CellPatches) and bool((new.cells[:, -1] < 0).all()):
            new, stage = self.pattern_cells_as_z(layer, new, base), "z"
        pos_dim = STAGE_AXES[stage][1]
        last = layer == self.n_layers - 1
        at_readout = readout if last and stage != "resid_pre" else None  # `effective`'s view
        if isinstance(new, CellPatches):
            changed, first = new.changes(at_readout)
        else:
            eff_base = self.effective(layer, stage, base.acts[stage][layer], readout)
            eff_new = self.effective(layer, stage, new, readout)
            hit = eff_new != eff_base
            changed = hit.flatten(2).any(2).cpu()
            first = first_position(hit, pos_dim) if at_readout is None else None
        idx = changed.any(1).nonzero().flatten()
        if not len(idx):
            return out
        # last layer: read-out positions only (resid_pre: keys and values from its first change on)
        starts = torch.zeros(len(idx), dtype=torch.long) if at_readout is not None else first[idx]
        batch = len(readout)
        groups = start_groups(starts, batch, pass_overhead)
        if max_cells is not None:
            groups = [g[lo : lo + max_cells] for g in groups for lo in range(0, len(g), max_cells)]
        for group in groups:
            start, cells = int(starts[group].min()), idx[group]
            # Only the prompts some cell of the group changes are resumed; the others keep the base run's
            # logits, and the metric sees every prompt's.
            prompts = changed[cells].any(0).nonzero().flatten()
            every = len(prompts) == batch
            sub = None if every else prompts.to(readout.device)
            if isinstance(new, CellPatches):
                rows = new.rows(cells, start, at_readout, sub)
            else:
                rows = eff_new[cells.to(eff_new.device)]
                rows = rows if every else rows[:, sub]
                rows = rows.narrow(pos_dim, start, rows.shape[pos_dim] - start)
            sub_readout = readout if every else readout[sub]
            logits = self.resume(layer, stage, rows.contiguous(), base, sub_readout, start, sub)
            if not every:
                full = base.logits.expand(len(cells), *base.logits.shape).clone()
                full[:, sub] = logits.to(full.dtype)
                logits = full
            out[cells.to(out.device)] = fn(logits).to(out.dtype)
        return out


__all__ = [
    "STAGES",
    "STAGE_AXES",
    "STAGE_HOOKS",
    "Replay",
    "RunActs",
    "model_stages",
    "stage_of",
    "take_pos",
    "truncate",
]
