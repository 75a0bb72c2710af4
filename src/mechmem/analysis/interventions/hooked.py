"""The hook strategy of the intervention engine, and the source runs setters read.

`run_hooked` stacks variants along the batch axis and, on a TransformerLens transformer, resumes at the
earliest intervened layer from the cached clean residual stream (`model(resid, start_at_layer=L)`), in
chunks that fit a memory budget. Hooks TransformerLens computes only on request get their flag switched on
for the call (`tl_flags`). `source_values` runs each distinct source token tensor once, chunked by sequences,
caching only the hooks read.
"""

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.analysis.interventions.metric import PatchingMetric
from mechmem.analysis.interventions.replay import take_pos
from mechmem.analysis.interventions.spec import Intervention, Setter, apply
from mechmem.errors import BadArgument, MechmemError
from mechmem.models.backend import is_transformer_lens_model, last_start_layer
from mechmem.models.checks import check_tokens
from mechmem.models.parts import model_device

Megabytes = int | float
"""A memory budget in MiB (an int or a float: the runtime type checks tell them apart)."""
SOURCE_MB = 256.0
"""Activations of one pass over a setter's source sequences are kept under this many MB."""

# Hooks TransformerLens only computes with a config flag on: hook-name suffix -> the flag.
FLAGS = {"hook_mlp_in": "use_hook_mlp_in", "hook_attn_in": "use_attn_in"}
FLAGS |= {"attn.hook_result": "use_attn_result"} | {f"hook_{x}_input": "use_split_qkv_input" for x in "qkv"}


@contextlib.contextmanager
def tl_flags(model: torch.nn.Module, hooks: set[str]) -> Iterator[None]:
    """Switch on TL's flags for the on-request hooks in `hooks`; restore the old values afterwards."""
    wanted = sorted({flag for h in hooks for suffix, flag in FLAGS.items() if h.endswith(suffix)})
    if not wanted:
        yield
        return
    if not is_transformer_lens_model(model):
        raise ValueError(f"hooks needing TransformerLens flags {wanted} on a {type(model).__name__}")
    if "use_hook_mlp_in" in wanted and model.cfg.attn_only:
        raise ValueError("hook_mlp_in on an attention-only model")
    if {"use_attn_in", "use_split_qkv_input"} <= set(wanted):
        raise ValueError("hook_attn_in and hook_q/k/v_input together (TransformerLens ignores attn_in)")
    old = {flag: getattr(model.cfg, flag) for flag in wanted}
    try:
        for flag in wanted:
            getattr(model, f"set_{flag}")(True)  # set_use_hook_mlp_in, set_use_attn_in, ...
        yield
    finally:
        for flag, value in old.items():
            getattr(model, f"set_{flag}")(value)


def start_layer(model: torch.nn.Module, variant: list[Intervention]) -> int | None:
    """Block where a pass for `variant` may start (n_layers: final norm and unembedding only); None = full."""
    last = last_start_layer(model)
    if last is None:
        return None
    layers = []
    for iv in variant:
        head = iv.hook.split(".")
        if head[0] == "blocks":
            layers.append(int(head[1]))
        elif head[0] == "ln_final":
            layers.append(model.cfg.n_layers)
        else:
            return None
    return min(*layers, last) if layers else last


def resid_name(model: torch.nn.Module, layer: int) -> str:
    """Residual stream entering block `layer` (the last block's output for layer = n_layers)."""
    if layer < model.cfg.n_layers:
        return f"blocks.{layer}.hook_resid_pre"
    return f"blocks.{layer - 1}.hook_resid_post"


def source_values(
    model: torch.nn.Module, tokens: Tensor, variants: list[list[Intervention]], extra: set[str] | None = None
) -> tuple[dict[tuple[int, str], Tensor], dict[str, Tensor]]:
    """Setter values ((id(setter), hook) -> [batch or 1, ...]) and the clean activations `extra` on
    `tokens`: one run per distinct token tensor in chunks of sequences; a hook read only by mean setters
    keeps a running float64 sum."""
    needs: dict[int, tuple[Tensor, set[str]]] = {id(tokens): (tokens, set(extra or ()))}
    readers: dict[tuple[int, str], set[str]] = {(id(tokens), name): {"clean"} for name in extra or ()}
    for iv in (iv for variant in variants for iv in variant if iv.setter.tokens is not None):
        needs.setdefault(id(iv.setter.tokens), (iv.setter.tokens, set()))[1].add(iv.hook)
        readers.setdefault((id(iv.setter.tokens), iv.hook), set()).add(iv.setter.kind)
    runs: dict[tuple[int, str], Tensor] = {}
    for key, (run_tokens, names) in needs.items():
        if not names:
            continue
        keep, n = names.__contains__, run_tokens.shape[0]
        averaged = {name for name in names if readers[(key, name)] == {"mean"}}
        dtypes: dict[str, torch.dtype] = {}
        run_tokens = run_tokens.to(model_device(model))
        step = max(1, int(SOURCE_MB * 2**20 // per_sequence_bytes(model, run_tokens[:1])))
        for lo in range(0, n, step):  # a pass's peak memory grows with the batch, the kept hooks do not
            _, cache = model.run_with_cache(run_tokens[lo : lo + step], names_filter=keep)
            for name in names:
                dtypes[name] = cache[name].dtype
                add_rows(runs, (key, name), cache[name], slice(lo, lo + step), n, name in averaged)
            del cache
        for name in averaged:  # the mean over every sequence, [1, ...], in the activation's dtype
            runs[(key, name)] = (runs[(key, name)] / n).to(dtypes[name])
    values = {}
    for iv in (iv for variant in variants for iv in variant if iv.setter.tokens is not None):
        if (id(iv.setter), iv.hook) not in values:
            ref = runs[(id(iv.setter.tokens), iv.hook)]
            values[(id(iv.setter), iv.hook)] = iv.setter.source(ref, tokens.shape[0])
    return values, {name: runs[(id(tokens), name)] for name in extra or ()}


def add_rows(out: dict, key: Any, act: Tensor, rows: slice, n: int, mean: bool) -> None:
    """Gather one chunk's activation `act` (the sequences `rows` of `n`) under `key`: filled in place into
    one [n, ...] tensor, or with `mean` added to a running float64 sum [1, ...]."""
    if mean:
        part = act.double().sum(0, keepdim=True)
        out[key] = out[key] + part if key in out else part
        return
    if key not in out:
        out[key] = act.new_empty((n, *act.shape[1:]))
    out[key][rows] = act


def check_hooks(model: torch.nn.Module, variants: list[list[Intervention]]) -> set[str]:
    """Every hook the variants name; a one-line error for a hook the model lacks or for setter tokens it
    cannot read."""
    hooks = {iv.hook for variant in variants for iv in variant}
    if unknown := sorted(hooks - set(model.hook_dict)):
        raise BadArgument(f"unknown hook(s) {', '.join(unknown)} (the model's hook names: model.hook_dict)")
    setters = {
        id(iv.setter): iv.setter for variant in variants for iv in variant if iv.setter.tokens is not None
    }
    for setter in setters.values():
        check_tokens(model, setter.tokens, f"the {setter.kind} setter's tokens")
    return hooks


def _stacked_hook(
    name: str, slots: list[tuple[int, Intervention]], n: int, batch: int, values: dict
) -> Callable[[Tensor, Any], Tensor]:
    """A hook on `name` for n stacked variants: slot s intervenes on rows s * batch .. (s + 1) * batch."""

    def hook_fn(act: Tensor, hook: Any) -> Tensor:
        out = act.unflatten(0, (n, batch)).clone()
        for slot, iv in slots:
            iv.set(out[slot], values.get((id(iv.setter), name)), hook)
        return out.flatten(0, 1)

    return hook_fn


def per_sequence_bytes(model: torch.nn.Module, tokens: Tensor) -> int:
    """Bytes of all hooked activations and logits of one sequence: a generous cost of one row of a pass."""
    total = [0]

    def count(act: Tensor, hook: Any) -> None:
        total[0] += act.numel() * act.element_size()

    with warnings.catch_warnings():  # TransformerLens 4 warns about every hook whose flag is off
        warnings.simplefilter("ignore", UserWarning)
        with model.hooks(fwd_hooks=[(lambda name: True, count)]):
            logits = model(tokens[:1])
    return total[0] + logits.numel() * logits.element_size()


def _evaluate(metric: Any, logits: Tensor, n: int) -> list[Tensor]:
    """The metric of each of the n variants stacked in `logits` [n * batch, pos, d_vocab]."""
    stacked = logits.unflatten(0, (n, logits.shape[0] // n))
    if isinstance(metric, PatchingMetric):
        readout = metric.readout.to(logits.device)
        return [torch.as_tensor(metric.fn(take_pos(x, readout, -3, -2)[None])[0]) for x in stacked]
    return [torch.as_tensor(metric(x)) for x in stacked]


def run_hooked(
    model: torch.nn.Module,
    tokens: Tensor,
    variants: list[list[Intervention]],
    metric: Any,
    memory_mb: Megabytes,
) -> list[Tensor]:
    """The hook strategy: per start layer, chunks of stacked variants resumed from the clean residuals."""
    hooks = check_hooks(model, variants)
    tokens = tokens.to(model_device(model))
    batch = tokens.shape[0]
    starts = [start_layer(model, v) for v in variants]
    results: list[Tensor] = [torch.zeros(0)] * len(variants)
    with tl_flags(model, hooks):
        resid = {resid_name(model, s) for s in starts if s is not None}
        values, clean = source_values(model, tokens, variants, resid)
        step = max(1, int(memory_mb * 2**20 // (batch * per_sequence_bytes(model, tokens))))
        for start in sorted(set(starts), key=lambda s: -1 if s is None else s):
            group = [i for i, s in enumerate(starts) if s == start]
            for lo in range(0, len(group), step):
                chunk = group[lo : lo + step]
                slots: dict[str, list[tuple[int, Intervention]]] = {}
                for slot, i in enumerate(chunk):
                    for iv in variants[i]:
                        slots.setdefault(iv.hook, []).append((slot, iv))
                fwd = [(h, _stacked_hook(h, s, len(chunk), batch, values)) for h, s in slots.items()]
                with model.hooks(fwd_hooks=fwd):
                    if start is None:
                        logits = model(tokens.repeat(len(chunk), 1))
                    else:
                        x = clean[resid_name(model, start)].repeat(len(chunk), 1, 1)
                        logits = model(x, start_at_layer=start)
                for i, value in zip(chunk, _evaluate(metric, logits, len(chunk))):
                    results[i] = value
    return results


def activation_grads(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    hooks: Sequence[str],
    metric: Any,
    variant: Sequence[Intervention] = (),
) -> tuple[Tensor, dict[str, Tensor]]:
    """The metric (a scalar) on `tokens` and its gradient with respect to each hook's whole activation:
    (metric value, {hook: gradient shaped like the activation}), zeros for a hook the metric does not
    depend on; `variant`'s interventions are applied too."""
    leaves: dict[str, Tensor] = {}

    def capture(name: str, act: Tensor) -> Tensor:
        leaves[name] = torch.zeros_like(act, requires_grad=True)
        return act + leaves[name]

    taps = _taps(hooks, capture)
    with torch.enable_grad():
        value = run_hooked(model, tokens, [[*variant, *taps]], metric, 1.0)[0]
        if not value.requires_grad:  # as the replay strategy says it (Engine.gradients)
            raise MechmemError("attribution needs a differentiable metric; this one is not")
        grads = torch.autograd.grad(
            value, [leaves[h] for h in hooks], allow_unused=True, materialize_grads=True
        )
    return value.detach(), {h: g.detach() for h, g in zip(hooks, grads)}


@torch.no_grad()
def capture_acts(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    hooks: Sequence[str],
    variant: Sequence[Intervention],
) -> dict[str, Tensor]:
    """The activations at `hooks` in the run on `tokens` under `variant` (those the pass reaches)."""
    return capture_run(model, tokens, hooks, variant, lambda x: x[:0])[1]


def capture_run(
    model: torch.nn.Module, tokens: Tensor, hooks: Sequence[str], variant: Sequence[Intervention], metric: Any
) -> tuple[Tensor, dict[str, Tensor]]:
    """`capture_acts` and the metric of the same run (what `Engine.activations` reads on hooks)."""
    seen: dict[str, Tensor] = {}

    def keep(name: str, act: Tensor) -> Tensor:
        seen[name] = act.clone()
        return act

    value = run_hooked(model, tokens, [[*variant, *_taps(hooks, keep)]], metric, 1.0)[0]
    return value, seen


def _taps(hooks: Sequence[str], fn: Callable[[str, Tensor], Tensor]) -> list[Intervention]:
    """One intervention per hook setting its whole activation to fn(name, act). Keyed by the requested name:
    a TransformerLens 4 hook point may carry another (its canonical) name."""
    return [Intervention(h, (), apply(lambda act, hook, h=h: fn(h, act))) for h in hooks]


@torch.no_grad()
def setter_values(
    model: torch.nn.Module, tokens: Int[Tensor, "batch pos"], setter: Setter, hooks: Sequence[str]
) -> dict[str, Tensor]:
    """The whole activation each hook gets from `setter` on `tokens` (an intervention with index ())."""
    variants = [[Intervention(hook, (), setter)] for hook in hooks]
    check_hooks(model, variants)
    with tl_flags(model, set(hooks)):
        values, clean = source_values(model, tokens.to(model_device(model)), variants, set(hooks))
    out = {}
    for hook in hooks:
        act = clean[hook].clone()
        Intervention(hook, (), setter).set(act, values.get((id(setter), hook)), model.hook_dict[hook])
        out[hook] = act
    return out
