"""The intervention engine: run a model with some activations replaced, many variants per forward pass.

An *intervention* names an activation (a TransformerLens hook name), a slice of it and a *setter* giving the
slice its new values:

    Intervention("blocks.0.attn.hook_z", (slice(None), 1), zero())       head 1's z at every position -> 0
    Intervention("blocks.1.hook_resid_pre", (3,), from_run(clean))       position 3 of the residual, clean run
    Intervention("blocks.0.mlp.hook_post", (slice(None), [2, 5]), mean(ref))    neurons 2 and 5 -> their mean

`index` indexes the activation's axes after the batch axis. Setters:
    zero()                          zeros;
    mean(reference_tokens)          THE mean ablation of mechmem: the activation's mean over the reference
                                    batch's sequences, separately at each position (and head, neuron, ...);
    resample(reference_tokens, g)   the activation on another reference sequence (drawn once per setter);
    from_run(source_tokens)         the same sequence's activation in another run (activation patching);
    apply(fn)                       fn(act_slice, hook) -> new values: anything else.
Setters that read activations of other inputs get them from one cached run on those inputs (only the hooks
they need), shared by every variant and setter that uses the same token tensor.

A *variant* is one intervention or a list applied together; `intervene` returns the metric of every variant.
It equals one `run_with_hooks` per variant (`naive_intervene`, the reference it is tested against), but stacks
variants along the batch axis and, on a `HookedTransformer`, resumes each pass at the earliest intervened
layer from the cached clean residual stream (`model(resid, start_at_layer=L)`), chunked to a memory budget.
Hooks before the first block (`hook_embed`, `hook_pos_embed`), shortformer models and models without
`start_at_layer` (other `HookedRootModule`s) get full runs. Hooks TransformerLens computes only on request
(`hook_mlp_in`, `hook_attn_in`, `hook_q/k/v_input`, `attn.hook_result`) get their flag switched on for the
call and restored afterwards, also when a hook or the metric raises.

Caveats: an intervention fixes one activation and lets everything downstream react; effects of several
interventions need not add up. Mean and resample ablation depend on the reference distribution: name it.
"""

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.models.adapter import is_hooked_transformer, last_start_layer

Metric = Callable[[Tensor], Any]
"""logits [batch pos d_vocab] -> a tensor (a scalar or one value per sequence)."""

# Hooks TransformerLens only computes with a config flag on: hook-name suffix -> the flag.
_FLAGS = {"hook_mlp_in": "use_hook_mlp_in", "hook_attn_in": "use_attn_in"}
_FLAGS |= {"attn.hook_result": "use_attn_result"} | {f"hook_{x}_input": "use_split_qkv_input" for x in "qkv"}
_KINDS = ("zero", "mean", "resample", "from_run", "apply")


@dataclass(eq=False)
class Setter:
    """How an intervention sets its slice; built by `zero`, `mean`, `resample`, `from_run` or `apply`."""

    kind: str
    """One of "zero", "mean", "resample", "from_run", "apply"."""
    tokens: Tensor | None = None
    """The inputs whose activations the setter reads (mean, resample, from_run), else None."""
    fn: Callable[[Tensor, Any], Tensor] | None = None
    """For "apply": fn(act_slice, hook) -> new values."""
    generator: torch.Generator | None = None
    """For "resample": draws which reference sequence each input gets (once per batch size)."""
    _draws: dict[int, Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown setter {self.kind!r} ({', '.join(_KINDS)})")

    def source(self, ref: Tensor, batch: int) -> Tensor:
        """Replacement values for the whole activation, [batch or 1, *act], from the reference activation."""
        if self.kind == "mean":
            return ref.mean(0, keepdim=True)
        if self.kind == "resample":
            return ref[self.draw(batch, ref.shape[0]).to(ref.device)]
        if ref.shape[0] not in (1, batch):
            raise ValueError(f"from_run: the source run has {ref.shape[0]} sequences, the inputs {batch}")
        return ref

    def draw(self, batch: int, n_ref: int) -> Int[Tensor, " batch"]:
        """Reference sequence of each input: (i + offset_i) mod n_ref, offset_i uniform in 1..n_ref-1.

        With the inputs themselves as reference, every sequence gets another one. Drawn once per batch size.
        """
        if batch not in self._draws:
            offset = torch.randint(1, n_ref, (batch,), generator=self.generator) if n_ref > 1 else 0
            self._draws[batch] = (torch.arange(batch) + offset) % n_ref
        return self._draws[batch]


def zero() -> Setter:
    """Set the slice to zero."""
    return Setter("zero")


def mean(reference_tokens: Int[Tensor, "ref pos"]) -> Setter:
    """Set the slice to its mean over the reference sequences, at each position separately (mean ablation)."""
    return Setter("mean", tokens=reference_tokens)


def resample(reference_tokens: Int[Tensor, "ref pos"], generator: torch.Generator | None = None) -> Setter:
    """Set the slice to its value on another reference sequence (drawn once; default seed 0)."""
    gen = generator if generator is not None else torch.Generator().manual_seed(0)
    return Setter("resample", tokens=reference_tokens, generator=gen)


def from_run(source_tokens: Int[Tensor, "batch pos"]) -> Setter:
    """Set the slice to its value in the run on `source_tokens` (same sequence index): activation patching."""
    return Setter("from_run", tokens=source_tokens)


def apply(fn: Callable[[Tensor, Any], Tensor]) -> Setter:
    """Set the slice to `fn(act_slice, hook)`, act_slice being the current values [batch, *sliced axes]."""
    return Setter("apply", fn=fn)


@dataclass(frozen=True, eq=False)
class Intervention:
    """Replace `act[:, *index]` of the activation at `hook` by the values `setter` gives."""

    hook: str
    """TransformerLens hook name, e.g. "blocks.0.attn.hook_z"."""
    index: tuple = ()
    """Indices into the axes after batch: (slice(None), 1) = head 1 of hook_z at every position."""
    setter: Setter = field(default_factory=zero)
    """What the slice becomes."""

    def set(self, act: Tensor, source: Tensor | None, hook: Any) -> None:
        """Write the new values into `act` [batch, ...] in place (`source`: the setter's full values)."""
        idx = (slice(None), *self.index)
        kind = self.setter.kind
        if kind == "zero":
            act[idx] = 0.0
        elif kind == "apply":
            act[idx] = self.setter.fn(act[idx], hook)
        else:
            if tuple(source.shape[1:]) != tuple(act.shape[1:]):
                raise ValueError(
                    f"{kind} values at {self.hook} have shape {tuple(source.shape[1:])} after the batch "
                    f"axis, the activation {tuple(act.shape[1:])} (reference inputs of another length?)"
                )
            act[idx] = source.expand_as(act)[idx].to(act.dtype)


Variant = Intervention | Sequence[Intervention]


def _as_lists(variants: Sequence[Variant]) -> list[list[Intervention]]:
    return [[v] if isinstance(v, Intervention) else list(v) for v in variants]


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextlib.contextmanager
def _flags(model: torch.nn.Module, hooks: set[str]) -> Iterator[None]:
    """Switch on TL's flags for the on-request hooks in `hooks`; restore the old values afterwards."""
    wanted = sorted({flag for h in hooks for suffix, flag in _FLAGS.items() if h.endswith(suffix)})
    if not wanted:
        yield
        return
    if not is_hooked_transformer(model):
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


def _start_layer(model: torch.nn.Module, variant: list[Intervention]) -> int | None:
    """Block where a pass for `variant` may start (n_layers: final norm and unembedding only); None = full.

    The model's backend bounds it (`last_start_layer`: shortformer models always run in full).
    """
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


def _resid_name(model: torch.nn.Module, layer: int) -> str:
    """Residual stream entering block `layer` (the last block's output for layer = n_layers)."""
    if layer < model.cfg.n_layers:
        return f"blocks.{layer}.hook_resid_pre"
    return f"blocks.{layer - 1}.hook_resid_post"


def _sources(
    model: torch.nn.Module, tokens: Tensor, variants: list[list[Intervention]], extra: set[str] | None = None
) -> tuple[dict[tuple[int, str], Tensor], dict[str, Tensor]]:
    """Setter values ((id(setter), hook) -> [batch or 1, ...]) and the clean activations `extra` on `tokens`.

    One run per distinct token tensor, caching only the hooks read from it.
    """
    needs: dict[int, tuple[Tensor, set[str]]] = {id(tokens): (tokens, set(extra or ()))}
    for iv in (iv for variant in variants for iv in variant if iv.setter.tokens is not None):
        needs.setdefault(id(iv.setter.tokens), (iv.setter.tokens, set()))[1].add(iv.hook)
    runs: dict[tuple[int, str], Tensor] = {}
    for key, (run_tokens, names) in needs.items():
        if names:
            keep = names.__contains__
            _, cache = model.run_with_cache(run_tokens.to(_device(model)), names_filter=keep)
            runs.update({(key, name): cache[name] for name in names})
    values = {}
    for iv in (iv for variant in variants for iv in variant if iv.setter.tokens is not None):
        if (id(iv.setter), iv.hook) not in values:
            ref = runs[(id(iv.setter.tokens), iv.hook)]
            values[(id(iv.setter), iv.hook)] = iv.setter.source(ref, tokens.shape[0])
    return values, {name: runs[(id(tokens), name)] for name in extra or ()}


def _check_hooks(model: torch.nn.Module, variants: list[list[Intervention]]) -> set[str]:
    hooks = {iv.hook for variant in variants for iv in variant}
    if unknown := sorted(hooks - set(model.hook_dict)):
        raise ValueError(f"unknown hook(s) {', '.join(unknown)}")
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


def _per_sequence_bytes(model: torch.nn.Module, tokens: Tensor) -> int:
    """Bytes of all hooked activations and logits of one sequence: a generous cost of one row of a pass."""
    total = [0]

    def count(act: Tensor, hook: Any) -> None:
        total[0] += act.numel() * act.element_size()

    with model.hooks(fwd_hooks=[(lambda name: True, count)]):
        logits = model(tokens[:1])
    return total[0] + logits.numel() * logits.element_size()


def _evaluate(metric: Metric, logits: Tensor, n: int, batched: bool) -> list[Tensor]:
    """The metric of each of the n variants stacked in `logits` [n * batch, pos, d_vocab]."""
    stacked = logits.unflatten(0, (n, logits.shape[0] // n))
    if batched:
        return list(torch.as_tensor(metric(stacked)).unbind(0))
    return [torch.as_tensor(metric(x)) for x in stacked]


def _run(
    model: torch.nn.Module,
    tokens: Tensor,
    variants: list[list[Intervention]],
    metric: Metric,
    memory_mb: float | int,
    batched_metric: bool,
) -> list[Tensor]:
    """The engine: per start layer, chunks of stacked variants resumed from the clean residual stream."""
    hooks = _check_hooks(model, variants)
    tokens = tokens.to(_device(model))
    batch = tokens.shape[0]
    starts = [_start_layer(model, v) for v in variants]
    results: list[Tensor] = [torch.zeros(0)] * len(variants)
    with _flags(model, hooks):
        resid = {_resid_name(model, s) for s in starts if s is not None}
        values, clean = _sources(model, tokens, variants, resid)
        step = max(1, int(memory_mb * 2**20 // (batch * _per_sequence_bytes(model, tokens))))
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
                        x = clean[_resid_name(model, start)].repeat(len(chunk), 1, 1)
                        logits = model(x, start_at_layer=start)
                for i, value in zip(chunk, _evaluate(metric, logits, len(chunk), batched_metric)):
                    results[i] = value
    return results


@torch.no_grad()
def intervene(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    variants: Sequence[Variant],
    metric: Metric,
    *,
    memory_mb: float | int = 256.0,
    batched_metric: bool = False,
) -> Tensor:
    """The metric of the model on `tokens` under each variant, stacked: [variant, *metric output], on CPU.

    Args:
        model: a HookedTransformer or another TL `HookedRootModule` (the latter always runs in full).
        tokens: the inputs [batch pos].
        variants: each an `Intervention` or a list of them applied together (an empty list: the clean run).
        metric: logits [batch pos d_vocab] -> tensor (scalar or per sequence); with `batched_metric`, logits
            [variant batch pos d_vocab] -> [variant, ...] instead (one call per pass).
        memory_mb: budget for the activations of one batched pass; variants are chunked to fit.
        batched_metric: see `metric`.
    """
    out = _run(model, tokens, _as_lists(variants), metric, memory_mb, batched_metric)
    return torch.stack(out).detach().cpu() if out else torch.zeros(0)


def _single_hook(iv: Intervention, values: dict) -> Callable[[Tensor, Any], Tensor]:
    def hook_fn(act: Tensor, hook: Any) -> Tensor:
        act = act.clone()
        iv.set(act, values.get((id(iv.setter), iv.hook)), hook)
        return act

    return hook_fn


@torch.no_grad()
def naive_intervene(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    variants: Sequence[Variant],
    metric: Metric,
    *,
    batched_metric: bool = False,
) -> Tensor:
    """Reference for `intervene`: one full `run_with_hooks` per variant, same setters, same output."""
    variants = _as_lists(variants)
    hooks = _check_hooks(model, variants)
    tokens = tokens.to(_device(model))
    out = []
    with _flags(model, hooks):
        values, _ = _sources(model, tokens, variants)
        for variant in variants:
            fwd = [(iv.hook, _single_hook(iv, values)) for iv in variant]
            logits = model.run_with_hooks(tokens, fwd_hooks=fwd)
            out.extend(_evaluate(metric, logits, 1, batched_metric))
    return torch.stack(out).detach().cpu() if out else torch.zeros(0)


@torch.no_grad()
def intervened_logits(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    variant: Variant,
    *,
    memory_mb: float | int = 256.0,
) -> Float[Tensor, "batch pos d_vocab"]:
    """Logits on `tokens` under one variant (an intervention or a list of them), on the model's device."""
    return _run(model, tokens, _as_lists([variant]), lambda x: x, memory_mb, False)[0]


@torch.no_grad()
def setter_values(
    model: torch.nn.Module, tokens: Int[Tensor, "batch pos"], setter: Setter, hooks: Sequence[str]
) -> dict[str, Tensor]:
    """The whole activation each hook gets from `setter` on `tokens` (an intervention with index ()).

    Shaped like the activation on `tokens`; for inspection and for references that replay the values.
    """
    variants = [[Intervention(hook, (), setter)] for hook in hooks]
    _check_hooks(model, variants)
    with _flags(model, set(hooks)):
        values, clean = _sources(model, tokens.to(_device(model)), variants, set(hooks))
    out = {}
    for hook in hooks:
        act = clean[hook].clone()
        Intervention(hook, (), setter).set(act, values.get((id(setter), hook)), model.hook_dict[hook])
        out[hook] = act
    return out
