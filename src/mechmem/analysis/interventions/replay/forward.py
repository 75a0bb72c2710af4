"""A hook-free replay of a `HookedTransformer` forward pass that can resume at any activation.

`Replay` runs a model once, keeping every activation a patch may replace (`STAGES` per layer), and resumes
a forward pass from a replaced activation with a leading *patch* axis, so many patched runs share one pass.
It truncates inputs after the last read-out position, computes the last layer only at the read-out
positions, recomputes only the rows a patch changed (`finish_rows`) and reuses the base run's keys and values.

It mirrors TransformerLens's arithmetic and calls the model's own norm, MLP and unembedding modules, so
results equal TransformerLens's forward up to float rounding (tested); hooks on the model are ignored.
`support.replay_unsupported` names the models it cannot run (the engine runs those on hooks).
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

# TransformerLens hook of each stage, per layer: "blocks.{}.hook_resid_pre", "blocks.{}.attn.hook_z", ...
STAGE_HOOKS = {s: "blocks.{}." + ("attn." if s in ("pattern", "z") else "") + f"hook_{s}" for s in STAGES}
_BY_SUFFIX = {hook.split("{}.")[1]: stage for stage, hook in STAGE_HOOKS.items()}  # "attn.hook_z" -> "z"

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
    "attention_dir": "causal",
}
_POST_NORM = ("Olmo2ForCausalLM", "Olmo3ForCausalLM", "OlmoeForCausalLM")


def model_stages(cfg: Any) -> tuple[str, ...]:
    """The stages a model with config `cfg` computes: no `resid_mid` / `mlp_out` in an attention-only
    model, no `resid_mid` where attention and MLP run in parallel."""
    if cfg.attn_only:
        return tuple(s for s in STAGES if s not in ("resid_mid", "mlp_out"))
    if getattr(cfg, "parallel_attn_mlp", False):
        return tuple(s for s in STAGES if s != "resid_mid")
    return STAGES


def _by_rows(fn: Callable[[Tensor], Tensor], x: Float[Tensor, "... pos d"]) -> Tensor:
    """`fn` of `x` with its leading axes flattened into one batch axis, unflattened again."""
    out = fn(x.reshape(-1, *x.shape[-2:]))
    return out.reshape(*x.shape[:-1], out.shape[-1])


def split_take(
    late: Float[Tensor, "... batch later d"], whole: Float[Tensor, "batch pos d"], readout: Tensor, start: int
) -> Tensor:
    """Rows at `readout` of a residual stream held as `late` (positions `start` on, patched) after the
    first `start` positions of `whole` (the base run's)."""
    if not start:
        return take_pos(late, readout, -3, -2)
    after = take_pos(late, (readout - start).clamp(min=0), -3, -2)
    before = take_pos(whole[:, :start], readout.clamp(max=start - 1), -3, -2)
    return torch.where((readout >= start)[..., None], after, before)


def stage_of(hook: str) -> tuple[int, str] | None:
    """(layer, stage) of a hook name the replay can resume from, e.g. "blocks.2.attn.hook_z" -> (2, "z")."""
    parts = hook.split(".", 2)
    if len(parts) < 3 or parts[0] != "blocks" or not parts[1].isdigit() or parts[2] not in _BY_SUFFIX:
        return None
    return int(parts[1]), _BY_SUFFIX[parts[2]]


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
    """Run and resume a `HookedTransformer`'s forward pass outside its hooks (see the module docstring)."""

    def __init__(self, model: torch.nn.Module) -> None:
        if reason := replay_unsupported(model):  # `support`'s predicate, for either backend
            raise MechmemError(f"patching: {reason}")
        cfg = model.cfg
        bad = [f"{k}={getattr(cfg, k)}" for k, ok in _UNSUPPORTED.items() if getattr(cfg, k, ok) != ok]
        if getattr(cfg, "original_architecture", None) in _POST_NORM:
            bad.append("post-norm architecture")
        if bad:
            raise MechmemError(f"patching does not support this model configuration ({', '.join(bad)})")
        super().__init__(model)
        self.n_layers, self.attn_only = cfg.n_layers, bool(cfg.attn_only)
        self.parallel = bool(getattr(cfg, "parallel_attn_mlp", False)) and not self.attn_only
        self.has_final_norm = cfg.normalization_type is not None

    # -- pieces of a block: TransformerLens's modules take [batch pos d], so leading axes are flattened ----
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
        return _by_rows(lambda x: block.mlp(block.ln2(x.contiguous())), resid)

    def unembed(self, resid: Float[Tensor, "... pos d_model"]) -> Float[Tensor, "... pos d_vocab"]:
        model = self.model
        return _by_rows(lambda x: model.unembed(model.ln_final(x) if self.has_final_norm else x), resid)

    def ln1(self, layer: int, resid: Float[Tensor, "... pos d_model"]) -> Float[Tensor, "... pos d_model"]:
        return _by_rows(self.model.blocks[layer].ln1, resid)

    # -- whole runs -------------------------------------------------------------------------------------
    def run(
        self,
        tokens: Int[Tensor, "batch pos"],
        readout: Int[Tensor, "batch read"],
        grad: bool = False,
        embed: Float[Tensor, "batch pos d_model"] | None = None,
    ) -> RunActs:
        """Run the model on `tokens`, keeping every patchable activation and the logits at `readout`; with
        `grad` the activations stay in the autograd graph; `embed` replaces the token embedding
        (hook_embed)."""
        with torch.set_grad_enabled(grad):
            # W_E[tokens] (+ W_pos[:pos]) is what either backend's embedding modules compute (no hook fires).
            resid = self.model.W_E[tokens] if embed is None else embed
            if not self.rotary:
                resid = resid + self.model.W_pos[: tokens.shape[-1]]
            if grad:  # gradients w.r.t. activations, even where the parameters are frozen
                resid = resid.detach().requires_grad_(True)
            acts: dict[str, list[Tensor]] = {s: [] for s in STAGES}
            ks, vs = [], []
            for layer in range(self.n_layers):
                pattern, k, v, z = self.attend(layer, self.ln1(layer, resid))
                now = {"resid_pre": resid, "pattern": pattern, "z": z, "attn_out": self.attn_out(layer, z)}
                if self.parallel:  # attention and MLP both read resid_pre
                    now["mlp_out"] = self.mlp_out(layer, resid)
                    resid = resid + now["attn_out"] + now["mlp_out"]
                elif self.attn_only:
                    resid = resid + now["attn_out"]
                else:
                    now["resid_mid"] = resid = resid + now["attn_out"]
                    now["mlp_out"] = self.mlp_out(layer, resid)
                    resid = resid + now["mlp_out"]
                now["resid_post"] = resid
                for stage, act in now.items():
                    acts[stage].append(act)
                ks.append(k)
                vs.append(v)
            return RunActs(acts, ks, vs, self.unembed(take_pos(resid, readout, -3, -2)))

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

        With `prompts`, `act` and `readout` hold those prompts of `base` only. In the last layer `act`
        holds only the read-out positions, except for `resid_pre`. `act` may start at
        position `start` when the patch leaves every earlier position unchanged; their keys and values
        are the base run's.
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
        """`finish_block` after any stage but `resid_pre`, computed only on the rows (patch, prompt, position)
        where `act` differs from `base_act`; the others are `base_post`. Dense where most rows differ."""
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
        """Cells of whole pattern rows (a head, a query position or all, every key) as the same cells of z:
        a pattern row enters the block only through its z, so the source's z stands for its pattern
        (rows where the source's pattern equals the base run's keep the base z)."""
        act, source = torch.broadcast_tensors(cells.act, cells.source)  # [batch, head, q, k]
        base_z = base.acts["z"][layer]  # [batch, q, head, d_head]
        same = (act == source).all(-1).transpose(-1, -2).unsqueeze(-1)  # [batch, q, head, 1]
        source_z = torch.where(same, base_z, self.z_from_pattern(source, base.v[layer]))
        return CellPatches(base_z, source_z, cells.cells[:, [1, 0, 2]], STAGE_AXES["z"][1])

    def finish_block(
        self, layer: int, stage: str, act: Tensor, **inputs: Tensor
    ) -> Float[Tensor, "... pos d_model"]:
        """The rest of block `layer` after `stage` holds `act`, with the unpatched `inputs` the rest reads:
        `v` after `pattern`, `resid_pre` after `pattern`/`z`/`attn_out`, `resid_mid` after `mlp_out`; a
        parallel block reads `resid_pre` and the unpatched `attn_out` / `mlp_out`."""
        x, resid_pre = act, inputs.get("resid_pre")
        if stage == "pattern":
            x = self.z_from_pattern(x, inputs["v"])
        if stage in ("pattern", "z"):
            x = self.attn_out(layer, x)
        if self.parallel and stage != "resid_post":  # resid_post = resid_pre + attn_out + mlp_out
            if stage == "mlp_out":
                return resid_pre + inputs["attn_out"] + x
            mlp_out = inputs["mlp_out"] if "mlp_out" in inputs else self.mlp_out(layer, resid_pre)
            return resid_pre + x + mlp_out
        if stage in ("pattern", "z", "attn_out"):
            x = resid_pre + x
        if self.attn_only:
            return x
        if stage == "mlp_out":
            return inputs["resid_mid"] + x
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

        `base` and `new` (a tensor or `CellPatches`) are cut after the last read-out position. Patches
        that change nothing the read-out depends on get the base run's metric; the others resume at the
        first position they change (`start_groups`), on the prompts they change, so `fn` always sees the
        whole batch. `base_value`: fn on the base run, if known; `max_cells`: at most that many patches
        per pass. Returns [patch, *metric output].
        """
        base_value = fn(base.logits[None])[0] if base_value is None else base_value
        out = base_value.expand(len(new), *base_value.shape).clone()
        if stage == "pattern" and isinstance(new, CellPatches) and bool((new.cells[:, -1] < 0).all()):
            new, stage = self.pattern_cells_as_z(layer, new, base), "z"
        pos_dim = STAGE_AXES[stage][1]
        # After the last attention a resumed run reads only the read-out positions.
        at_readout = readout if layer == self.n_layers - 1 and stage != "resid_pre" else None
        if isinstance(new, CellPatches):
            changed, first = new.changes(at_readout)
        else:
            eff_base, eff_new = (
                x if at_readout is None else take_pos(x, readout, *STAGE_AXES[stage])
                for x in (base.acts[stage][layer], new)
            )
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
