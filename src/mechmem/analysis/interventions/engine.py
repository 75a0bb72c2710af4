"""The intervention engine: run a model with some activations replaced, many variants per forward pass.

An `Intervention` names an activation (a TransformerLens hook name), a slice of it and a setter (`zero`,
`mean`, `resample`, `from_run`, `apply`; `interventions.spec`); `index` indexes the axes after the batch:

    Intervention("blocks.0.attn.hook_z", (slice(None), 1), zero())       head 1's z at every position -> 0
    Intervention("blocks.1.hook_resid_pre", (3,), from_run(clean))       position 3 of the residual, clean run
    Intervention("blocks.0.mlp.hook_post", (slice(None), [2, 5]), mean(ref))    neurons 2 and 5 -> their mean

A *variant* is one intervention or a list applied together; `intervene` returns the metric of every variant,
equal to one `run_with_hooks` per variant (`interventions.reference.naive_intervene`, tested). A variant
replacing one activation the hook-free replay resumes from runs on the replay (`interventions.replay`),
everything else on hooks (`interventions.hooked`).

Caveats: an intervention fixes one activation and lets everything downstream react; effects of several
interventions need not add up. Mean and resample ablation depend on the reference distribution: name it.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.interventions.hooked import (
    Megabytes,
    activation_grads,
    add_rows,
    capture_acts,
    capture_run,
    check_hooks,
    run_hooked,
)
from mechmem.analysis.interventions.metric import PatchingMetric, callable_metric
from mechmem.analysis.interventions.replay import (
    STAGE_AXES,
    STAGE_HOOKS,
    STAGES,
    Replay,
    RunActs,
    model_stages,
    stage_of,
    truncate,
)
from mechmem.analysis.interventions.replay.cells import CellPatches
from mechmem.analysis.interventions.spec import Intervention, Variant, apply, as_lists
from mechmem.errors import MechmemError
from mechmem.models.checks import check_callable, check_memory_mb, check_model, check_tokens
from mechmem.models.parts import model_device

Metric = Callable[[Tensor], Any] | PatchingMetric
"""logits [batch pos d_vocab] -> a tensor (a scalar or one value per sequence), or it in batched form."""

GATHER_FACTOR = 4
"""`Engine._gather` chunks are a quarter of `row_chunks`' (it keeps a few stages of each chunk's run)."""
GRADIENT_FACTOR = 2
"""`Engine.gradients` chunks are half of `row_chunks`' (a replayed run with its graph costs about four
cached runs)."""


def _cell(index: tuple, shape: Sequence[int]) -> list[int] | None:
    """An index of ints and full slices as one int per axis (-1: every entry), or None for anything else."""
    out = []
    for i, size in zip(index, shape):
        if isinstance(i, int) and not isinstance(i, bool) and -size <= i < size:
            out.append(i % size)
        elif isinstance(i, slice) and i == slice(None):
            out.append(-1)
        else:
            return None
    return out if len(index) <= len(shape) else None


def _cell_patches(
    act: Tensor, variants: list[list[Intervention]], values: dict, stage: str, keep: int
) -> CellPatches | None:
    """The variants as `CellPatches` on `act` cut after position `keep` - 1 when each is one intervention
    indexing single entries or whole axes, all sharing one from_run/mean/resample setter; None otherwise."""
    ivs = [v[0] for v in variants if len(v) == 1]
    cells = [_cell(iv.index, act.shape[1:]) for iv in ivs]
    same = len(ivs) == len(variants) and len({id(iv.setter) for iv in ivs}) == 1
    if not (same and ivs[0].setter.kind in ("from_run", "mean", "resample") and None not in cells):
        return None
    source = values[(id(ivs[0].setter), ivs[0].hook)]
    ivs[0].check_source(source, act)
    act, source = truncate(stage, act, keep), truncate(stage, source, keep).to(act.dtype)
    at = torch.tensor([c + [-1] * (act.ndim - 1 - len(c)) for c in cells], dtype=torch.long)
    return CellPatches(act, source, at.reshape(len(ivs), act.ndim - 1), STAGE_AXES[stage][1])


def _stacked(act: Tensor, variants: list[list[Intervention]], values: dict, hook: Any) -> Tensor:
    """[variant, *act]: `act` with each variant's interventions applied (all at `hook`)."""
    new = act.expand(len(variants), *act.shape).clone()
    for slot, variant in enumerate(variants):
        for iv in variant:
            iv.set(new[slot], values.get((id(iv.setter), iv.hook)), hook)
    return new


def _by_stage(keys: list[tuple[str, int]], tensors: Iterable[Tensor]) -> dict[str, list[Tensor]]:
    """`tensors` (one per (stage, layer) key) as `out[stage][layer]`, detached; every stage present."""
    out: dict[str, list[Tensor]] = {s: [] for s in STAGES}
    for (s, _), t in zip(keys, tensors):
        out[s].append(t.detach())
    return out


class Engine:
    """One model and one metric; `run` gives the metric under each variant, `gradients` its activation
    gradients. Replay and hooks give the same numbers (tests).

    Args are those of `intervene`, plus:
        readout: positions the metric reads (see `callable_metric`); None: found by a dependency check.
        cache_mb: budget for the replay's cached run; above it the sequences are replayed in chunks of rows
            (None: `memory_mb`, so that one budget bounds both the cached runs and the batched passes).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        metric: Any,
        *,
        readout: Any = None,
        memory_mb: Megabytes = 256.0,
        cache_mb: Megabytes | None = None,
    ) -> None:
        check_model(model, cfg=False)  # any HookedRootModule runs on hooks
        if not isinstance(metric, PatchingMetric):
            check_callable("metric", metric)
        self.model, self.metric, self.readout = model, metric, readout
        self.memory_mb = check_memory_mb(memory_mb)
        self.cache_mb = self.memory_mb if cache_mb is None else check_memory_mb(cache_mb, "cache_mb")
        try:
            self.replay: Replay | None = Replay(model)
        except MechmemError:  # a model the replay cannot run: the engine uses hooks
            self.replay = None
        self.pass_overhead = 256
        """Fixed cost of one replayed pass, in token-layers (see `replay.schedule.start_groups`)."""
        self._compiled = metric if isinstance(metric, PatchingMetric) else None
        self._runs: dict[tuple[int, bool], tuple[Tensor, RunActs]] = {}

    @property
    def strategy(self) -> str:
        """ "replay" where the model supports it (for variants it can replay), else "hooks"."""
        return "hooks" if self.replay is None else "replay"

    def compiled(self, tokens: Int[Tensor, "batch pos"]) -> PatchingMetric:
        """The metric in batched form (a callable is checked on the logits of `tokens`, once)."""
        if self._compiled is None:
            tokens = tokens.to(model_device(self.model))
            every = torch.arange(tokens.shape[1], device=tokens.device).expand(tokens.shape[0], -1)
            if self.replay is None:
                probe = self.model(tokens)
            else:
                rows = self.row_chunks(tokens)
                probe = torch.cat([self.replay.run(tokens[r], every[r]).logits for r in rows])
            self._compiled = callable_metric(self.metric, probe, readout=self.readout)
        return self._compiled

    def replay_run(self, tokens: Int[Tensor, "batch pos"], readout: bool = True) -> RunActs:
        """Every stage activation of the replayed run on `tokens` (full length), cached per token tensor; with
        `readout`, the logits at the metric's read-out positions."""
        key = (id(tokens), readout)
        read = self._runs.get((id(tokens), True))
        if not readout and read is not None and read[0] is tokens:
            return read[1]  # the same activations; its extra read-out logits are never read
        if key not in self._runs or self._runs[key][0] is not tokens:
            x = tokens.to(model_device(self.model))
            rows = self.compiled(x).readout if readout else torch.zeros(len(x), 1, dtype=torch.long)
            self._runs[key] = (tokens, self.replay.run(x, rows.to(x.device)))
        return self._runs[key][1]

    def replay_key(self, variant: list[Intervention]) -> tuple[int, str] | str | None:
        """(layer, stage) where the replay runs `variant`, "clean" for no intervention, None: hooks."""
        if self.replay is None:
            return None
        if not variant:
            return "clean"
        keys = {stage_of(iv.hook) for iv in variant}
        return keys.pop() if len(keys) == 1 and None not in keys else None

    def row_chunks(self, tokens: Int[Tensor, "batch pos"], factor: int = 1) -> list[slice]:
        """Slices of the sequences whose cached replayed run (`RunActs`, every stage of every layer, times
        `factor`) fits in `cache_mb`; one slice when all of them fit."""
        cfg = self.model.cfg
        batch, pos = tokens.shape
        width = cfg.n_heads * cfg.d_head
        # resid_pre, attn_out, resid_mid, mlp_out, resid_post; z, k, v; the pattern [head q k].
        floats = cfg.n_layers * pos * (5 * cfg.d_model + 3 * width + cfg.n_heads * pos)
        itemsize = next(self.model.parameters()).element_size()
        rows = max(1, int(self.cache_mb * 2**20 // (factor * floats * itemsize)))
        return [slice(lo, min(lo + rows, batch)) for lo in range(0, batch, rows)]

    def _chunk(self, readout: Tensor, keep: int) -> int:
        """Patches per replayed pass within `memory_mb`."""
        cfg = self.model.cfg
        batch, read = readout.shape
        width = cfg.n_heads * cfg.d_head
        floats = batch * keep * (4 * cfg.d_model + 2 * (cfg.d_mlp or 0) + 4 * width + 3 * cfg.n_heads * keep)
        floats += batch * read * 2 * cfg.d_vocab_out
        return max(1, int(self.memory_mb * 2**20 // (4 * floats)))

    def _run_replay(
        self,
        tokens: Tensor,
        variants: list[list[Intervention]],
        keys: list[Any],
        members: list[int],
        results: list,
    ) -> list[int]:
        """Replay `members` (indices into `variants`, at `keys[i]`) into `results`; returns those left to the
        hooks. Above `cache_mb` (and without `apply` setters) the rows are replayed in chunks: per variant,
        the logits at the read-out positions of every chunk, then the metric once on all of them, so
        batch-averaging metrics give the unchunked numbers."""
        metric = self.compiled(tokens)
        readout = metric.readout.to(model_device(self.model))
        keep = int(readout.max()) + 1
        groups: dict[Any, list[int]] = {}
        for i in members:
            groups.setdefault(keys[i], []).append(i)
        clean = groups.pop("clean", [])
        rows = self.row_chunks(tokens)
        if len(rows) == 1 or any(iv.setter.kind == "apply" for i in members for iv in variants[i]):
            full = self.replay_run(tokens)
            base = full.truncated(keep)
            base_value = metric.fn(base.logits[None])[0].clone()
            for i in clean:
                results[i] = base_value
            values = self._setter_values(tokens, variants, groups)
            return self._replay_groups(
                full, base, readout, keep, groups, variants, values, metric.fn, results
            )
        per_variant = len(tokens) * readout.shape[1] * self.model.cfg.d_vocab_out * 4
        wave = max(1, int(self.cache_mb * 2**20 // per_variant))
        todo = [i for g in groups.values() for i in g]
        values = self._setter_values(tokens, variants, groups, slice(None))  # mean, resample
        left: set[int] = set()
        for lo in range(0, max(len(todo), 1), wave):
            part = set(todo[lo : lo + wave])
            wave_groups = {k: [i for i in g if i in part] for k, g in groups.items()}
            wave_groups = {k: g for k, g in wave_groups.items() if g}
            logits: dict[Any, list[Tensor]] = {i: [] for i in part}
            logits["clean"] = []
            for r in rows:
                full = self.replay.run(tokens[r].to(readout.device), readout[r])
                base = full.truncated(keep)
                logits["clean"].append(base.logits)
                chunk_values = {k: v[r] if v.shape[0] == len(tokens) else v for k, v in values.items()}
                chunk_values |= self._setter_values(tokens, variants, wave_groups, r, row_wise=True)
                out: list = [None] * len(variants)
                left |= set(
                    self._replay_groups(
                        full, base, readout[r], keep, wave_groups, variants, chunk_values, _identity, out
                    )
                )
                for i in part:
                    logits[i].append(out[i])
                del full, base, out, chunk_values  # before the next chunk's run: one chunk at a time
            for i in part - left:
                results[i] = metric.fn(torch.cat(logits[i], dim=-3)[None])[0]
            if lo == 0:
                base_value = metric.fn(torch.cat(logits["clean"], dim=-3)[None])[0]
                for i in clean:
                    results[i] = base_value
        return sorted(left)

    def _setter_values(
        self,
        tokens: Tensor,
        variants: list[list[Intervention]],
        groups: dict[Any, list[int]],
        rows: slice | None = None,
        row_wise: bool = False,
    ) -> dict[tuple[int, str], Tensor]:
        """Setter values ((id(setter), hook) -> [batch or 1, *act]) of the variants in `groups`, from the
        replayed runs on each setter's tokens. rows None: every setter, from cached whole runs; otherwise,
        gathered over chunks of rows, the own-row `from_run` setters for `rows` (`row_wise`) or the others
        for all rows."""
        needed: dict[int, tuple[Tensor, dict[tuple[str, int], list[Intervention]]]] = {}
        for i in (i for g in groups.values() for i in g):
            for iv in (iv for iv in variants[i] if iv.setter.tokens is not None):
                own_rows = iv.setter.kind == "from_run" and len(iv.setter.tokens) == len(tokens)
                if rows is not None and row_wise != own_rows:
                    continue
                entry = needed.setdefault(id(iv.setter.tokens), (iv.setter.tokens, {}))
                layer, stage = stage_of(iv.hook)
                entry[1].setdefault((stage, layer), []).append(iv)
        values = {}
        batch = len(tokens) if rows is None or not row_wise else len(tokens[rows])
        for ref_tokens, by_stage in needed.values():
            # a mean's reference batch is read once and reduced: gather only its stages, chunk by chunk
            means_only = all(iv.setter.kind == "mean" for ivs in by_stage.values() for iv in ivs)
            if rows is None and not means_only:
                run = self.replay_run(ref_tokens, readout=False)
                acts = {(s, l): run.acts[s][l] for s, l in by_stage}
            else:
                acts = self._gather(ref_tokens[rows] if row_wise else ref_tokens, list(by_stage), means_only)[
                    0
                ]
            for key, ivs in by_stage.items():
                for iv in ivs:
                    if (id(iv.setter), iv.hook) not in values:
                        values[(id(iv.setter), iv.hook)] = iv.setter.source(acts[key], batch)
        return values

    def _gather(
        self,
        tokens: Tensor,
        keys: list[tuple[str, int]],
        mean: bool = False,
        readout: Tensor | None = None,
        factor: int = GATHER_FACTOR,
    ) -> tuple[dict[tuple[str, int], Tensor], Tensor]:
        """The activations `keys` ((stage, layer)) of the replayed run on `tokens` and its logits at `readout`
        (default: position 0), gathered chunk by chunk of `row_chunks(factor)`; with `mean`, the activations'
        mean over the sequences, [1, ...] (a running float64 sum)."""
        x = tokens.to(model_device(self.model))
        readout = torch.zeros(len(x), 1, dtype=torch.long, device=x.device) if readout is None else readout
        out: dict[tuple[str, int], Tensor] = {}
        logits, dtype = [], torch.get_default_dtype()
        for r in self.row_chunks(x, factor=factor):
            run = self.replay.run(x[r], readout[r])
            for s, l in keys:
                dtype = run.acts[s][l].dtype
                add_rows(out, (s, l), run.acts[s][l], r, len(x), mean)
            logits.append(run.logits)
            del run
        if mean:
            out = {key: (total / len(x)).to(dtype) for key, total in out.items()}
        return out, torch.cat(logits)

    def _replay_groups(
        self,
        full: RunActs,
        base: RunActs,
        readout: Tensor,
        keep: int,
        groups: dict[Any, list[int]],
        variants: list[list[Intervention]],
        values: dict,
        fn: Callable[[Tensor], Tensor],
        results: list,
    ) -> list[int]:
        """`fn` of the patched logits of every variant in `groups` ({(layer, stage): indices}) resumed from
        `base` (`full` cut after position `keep` - 1) into `results`; returns those left to the hooks."""
        step, left = self._chunk(readout, keep), []
        base_value = fn(base.logits[None])[0]

        def evaluate(chunk: list[int], new: Tensor | CellPatches, max_cells: int | None = None) -> None:
            out = self.replay.patched_metric(
                layer, stage, new, base, readout, fn, self.pass_overhead, base_value, max_cells
            )
            for i, value in zip(chunk, out):
                results[i] = value

        for (layer, stage), group in groups.items():
            act, hook = full.acts[stage][layer], self.model.hook_dict[STAGE_HOOKS[stage].format(layer)]
            cells = _cell_patches(act, [variants[i] for i in group], values, stage, keep)
            if cells is not None:  # one comparison for the group; passes of at most `step` cells
                evaluate(group, cells, step)
                continue
            for lo in range(0, len(group), step):
                chunk = group[lo : lo + step]
                new = _stacked(act, [variants[i] for i in chunk], values, hook)
                if stage == "pattern" and keep < act.shape[-1]:
                    # Attention from a kept query to a cut key would read a cut position: hooks run those.
                    leaks = (new[..., :keep, keep:] != 0).flatten(1).any(1).tolist()
                    left += [i for i, leak in zip(chunk, leaks) if leak]
                    chunk = [i for i, leak in zip(chunk, leaks) if not leak]
                    new = new[[not leak for leak in leaks]]
                if chunk:
                    evaluate(chunk, truncate(stage, new, keep))
        return left

    @torch.no_grad()
    def run(self, tokens: Int[Tensor, "batch pos"], variants: Sequence[Variant]) -> list[Tensor]:
        """The metric on `tokens` under each variant (on the model's device), by the strategy it picks."""
        variants = as_lists(variants)
        hooks = check_hooks(self.model, variants)
        # TransformerLens 3 keeps MLP hook points on attention-only blocks: an intervention there never fires
        mlp = sorted(h for h in hooks if ".hook_mlp_" in h or ".mlp." in h)
        if mlp and getattr(getattr(self.model, "cfg", None), "attn_only", False):
            raise ValueError(f"{', '.join(mlp)} on an attention-only model (it has no MLP)")
        results: list[Any] = [None] * len(variants)
        keys = [self.replay_key(v) for v in variants]
        replayed = [i for i, key in enumerate(keys) if key is not None]
        hooked = [i for i, key in enumerate(keys) if key is None]
        if replayed:
            hooked += self._run_replay(tokens, variants, keys, replayed, results)
        if hooked:
            metric = self._compiled if self._compiled is not None else self.metric
            out = run_hooked(self.model, tokens, [variants[i] for i in hooked], metric, self.memory_mb)
            for i, value in zip(hooked, out):
                results[i] = value
        return results

    def _keys(self, stages: Sequence[str] | None) -> list[tuple[str, int]]:
        """(stage, layer) of every layer of each stage the model computes (of `stages` only, if given)."""
        chosen = [s for s in model_stages(self.model.cfg) if stages is None or s in stages]
        return [(s, l) for s in chosen for l in range(self.model.cfg.n_layers)]

    def _hook_names(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The hook name of each (stage, layer) key whose hook the model has."""
        names = {key: STAGE_HOOKS[key[0]].format(key[1]) for key in keys}
        return {key: name for key, name in names.items() if name in self.model.hook_dict}

    def _chunked_gradients(
        self,
        tokens: Tensor,
        embed: Tensor | None,
        keys: list[tuple[str, int]],
        rows: list[slice],
        each: Callable[[slice, list[Tensor], list[Tensor]], None],
    ) -> Tensor:
        """`gradients` on the replay, chunk by chunk of rows (see there): the metric; every chunk's
        activations and gradients go to `each` (rows, activations, gradients in the order of `keys`)."""
        metric = self.compiled(tokens)
        readout = metric.readout.to(tokens.device)
        part = [None if embed is None else embed[r] for r in rows]
        with torch.no_grad():
            runs = (self.replay.run(tokens[r], readout[r], embed=e) for r, e in zip(rows, part))
            logits = torch.cat([run.logits for run in runs])
        with torch.enable_grad():
            leaf = logits.requires_grad_(True)
            value = _differentiable(metric, leaf)
            (at_logits,) = torch.autograd.grad(value, leaf)
        for r, e in zip(rows, part):
            run = self.replay.run(tokens[r], readout[r], grad=True, embed=e)
            chunk = [run.acts[s][l] for s, l in keys]
            with torch.enable_grad():
                found = torch.autograd.grad(run.logits, chunk, at_logits[r], materialize_grads=True)
            each(r, [a.detach() for a in chunk], list(found))
            del run, chunk, found
        return value

    def gradient_sums(
        self,
        tokens: Int[Tensor, "batch pos"],
        stages: Sequence[str],
        reduce: Callable[[slice, dict[str, list[Tensor]], dict[str, list[Tensor]]], Tensor],
    ) -> tuple[float, Tensor]:
        """(the metric, `reduce` of every chunk of rows concatenated on the first axis): `gradients` reduced
        chunk by chunk (`acts[stage][layer]` of those rows), equal to reducing `gradients`'s output row by
        row."""
        tokens = tokens.to(model_device(self.model))
        rows = self.row_chunks(tokens, factor=GRADIENT_FACTOR) if self.replay is not None else []
        if len(rows) <= 1:
            value, acts, grads = self.gradients(tokens, stages=stages)
            return value, reduce(slice(None), acts, grads)
        keys = self._keys(stages)
        parts: list[Tensor] = []

        def each(r: slice, acts: list[Tensor], grads: list[Tensor]) -> None:
            parts.append(reduce(r, _by_stage(keys, acts), _by_stage(keys, grads)))

        value = self._chunked_gradients(tokens, None, keys, rows, each)
        return float(value.detach()), torch.cat(parts)

    @torch.no_grad()
    def activations(
        self, tokens: Int[Tensor, "batch pos"], stages: Sequence[str] | None = None
    ) -> tuple[float, dict[str, list[Tensor]]]:
        """The metric on `tokens` and every stage activation, `acts[stage][layer]`: `gradients`'s first two
        outputs from one forward pass without gradients, chunked by rows as `gradients` is."""
        tokens = tokens.to(model_device(self.model))
        keys = self._keys(stages)
        if self.replay is None:
            names = self._hook_names(keys)
            value, seen = capture_run(self.model, tokens, list(names.values()), [], self.metric)
            keys = [key for key, name in names.items() if name in seen]
            return float(value), _by_stage(keys, [seen[names[key]] for key in keys])
        metric = self.compiled(tokens)
        readout = metric.readout.to(tokens.device)
        acts, logits = self._gather(tokens, keys, readout=readout, factor=GRADIENT_FACTOR)
        return float(metric.fn(logits[None])[0]), _by_stage(list(acts), acts.values())

    def gradients(
        self,
        tokens: Int[Tensor, "batch pos"],
        embed: Float[Tensor, "batch pos d_model"] | None = None,
        stages: Sequence[str] | None = None,
    ) -> tuple[float, dict[str, list[Tensor]], dict[str, list[Tensor]]]:
        """The metric (a scalar) on `tokens`, every stage activation and its gradient, `acts[stage][layer]`.

        `embed` replaces the token embedding (hook_embed), e.g. for integrated gradients. `stages`: only
        these (default: every stage the model computes; others are empty lists). Above `cache_mb`, one pass
        without gradients gives the metric's gradient with respect to the logits, which each chunk of rows
        carries back (the chain rule: the same gradients).
        """
        tokens = tokens.to(model_device(self.model))
        keys = self._keys(stages)
        rows = self.row_chunks(tokens, factor=GRADIENT_FACTOR) if self.replay is not None else []
        if self.replay is not None and len(rows) == 1:
            metric = self.compiled(tokens)
            with torch.enable_grad():  # also under a caller's no_grad (build_report runs under one)
                run = self.replay.run(tokens, metric.readout.to(tokens.device), grad=True, embed=embed)
                value = _differentiable(metric, run.logits)
                acts = [run.acts[s][l] for s, l in keys]
                grads = torch.autograd.grad(value, acts, materialize_grads=True)
        elif self.replay is not None:
            # Filled chunk by chunk in place: concatenating the chunks at the end would hold every activation
            # and gradient twice at the peak.
            by_key: tuple[dict, dict] = ({}, {})

            def fill(r: slice, chunk_acts: list[Tensor], chunk_grads: list[Tensor]) -> None:
                for key, a, g in zip(keys, chunk_acts, chunk_grads):
                    add_rows(by_key[0], key, a, r, len(tokens), mean=False)
                    add_rows(by_key[1], key, g, r, len(tokens), mean=False)

            value = self._chunked_gradients(tokens, embed, keys, rows, fill)
            acts, grads = list(by_key[0].values()), list(by_key[1].values())
        else:
            names = self._hook_names(keys)
            extra = [] if embed is None else [Intervention("hook_embed", (), apply(lambda x, h: embed))]
            seen = capture_acts(self.model, tokens, list(names.values()), extra)  # the hooks the pass reaches
            names = {key: name for key, name in names.items() if name in seen}
            value, by_hook = activation_grads(self.model, tokens, list(names.values()), self.metric, extra)
            keys, found = list(names), list(names.values())
            acts, grads = [seen[n] for n in found], [by_hook[n] for n in found]
        return float(value.detach()), _by_stage(keys, acts), _by_stage(keys, grads)


@torch.no_grad()
def intervene(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    variants: Sequence[Variant],
    metric: Any,
    *,
    memory_mb: Megabytes = 256.0,
) -> Tensor:
    """The metric of the model on `tokens` under each variant, stacked: [variant, *metric output], on CPU.

    Args:
        model: a HookedTransformer or another TL `HookedRootModule` (the latter always runs on hooks).
        tokens: the inputs [batch pos].
        variants: each an `Intervention` or a list of them applied together (an empty list: the clean run).
        metric: logits [batch pos d_vocab] -> tensor (scalar or per sequence), or a `PatchingMetric`.
        memory_mb: budget for the activations of one batched pass and for the cached runs; variants and
            sequences are chunked to fit.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> loss = lambda logits: task.loss(logits, batch)    # the task's next-token loss
        >>> head_1_1 = (slice(None), 1)     # the index skips the batch: every position, head 1
        >>> knock_out = mechmem.Intervention("blocks.1.attn.hook_z", head_1_1, mechmem.zero())
        >>> clean, ablated = mechmem.intervene(model, batch.tokens, [[], knock_out], loss)
        >>> bool(clean < 0.01 < 0.1 < ablated)      # the induction head carries the loss
        True
    """
    engine = Engine(model, metric, memory_mb=memory_mb)
    out = engine.run(check_tokens(model, tokens), as_lists(variants))
    return torch.stack(out).detach().cpu() if out else torch.zeros(0)


@torch.no_grad()
def intervened_logits(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    variant: Variant,
    *,
    memory_mb: Megabytes = 256.0,
) -> Float[Tensor, "batch pos d_vocab"]:
    """Logits on `tokens` under one variant (an intervention or a list of them), on the model's device."""
    every = list(range(tokens.shape[1]))
    return Engine(model, _identity, readout=every, memory_mb=memory_mb).run(tokens, [variant])[0]


def _identity(logits: Tensor) -> Tensor:
    return logits


def _differentiable(metric: PatchingMetric, logits: Tensor) -> Tensor:
    """The metric of `logits` (at its read-out), refused when no gradient reaches it."""
    value = metric.fn(logits[None])[0]
    if not value.requires_grad:
        raise MechmemError(f"attribution needs a differentiable metric; {metric.name!r} is not")
    return value
