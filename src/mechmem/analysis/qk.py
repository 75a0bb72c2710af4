"""Exact QK attribution: why a head attends where it does, split into pairs of residual-stream sources.

A head's attention score at (query q, key k) is q_rot . k_rot / attn_scale, where the query and key are
linear maps of the residual stream entering its layer (after the layer's norm, and rotary positions). That
stream is a sum of direct sources: the token embedding ("embed"), the position embedding ("pos", absent
under rotary), every earlier head's output z_h @ W_O[h] ("L0H2"), every earlier MLP's output ("MLP0", its
b_out included) and one "bias" source (the earlier attention layers' b_O, the norm's bias after the
normalisation, and b_Q on the query side / b_K on the key side). With each position's norm scale frozen at
its value in the run (TransformerLens's `apply_ln_to_stack`: centre each source for LN / LNPre, divide by
the position's scale, multiply by w), the query and the key are sums over sources, rotary is linear per
position, and the score is exactly sum over (query source i, key source j) of q_i . k_j / attn_scale. The
contributions sum to the model's `hook_attn_scores` to float rounding; each result records the largest gap.

Per prompt the contributions are averaged over its (query, key) pairs, then over prompts with a normal 95%
interval (`stats.mean_interval`). Marginals sum over the other side. `qk_patching_agreement` ranks the
same sources by exact path patching of the head's q or k edges.

Caveats: a frozen scale makes a source's share depend on the others (it is exact, not causal); a large
score need not matter once the softmax saturates; the "bias" source has no edge to patch. Soft-capped
scores and query/key norms are not linear in the sources and are refused. Source: Elhage et al. 2021, "A
Mathematical Framework for Transformer Circuits" (QK circuit, path expansion); TransformerLens's
`ActivationCache.decompose_resid` / `apply_ln_to_stack`.
"""

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.circuits import EdgePatcher, circuit_prompts
from mechmem.analysis.frames import concat, grid_frame, short_repr
from mechmem.analysis.heads import induction_pattern, previous_token_pattern, repeated_random_tokens
from mechmem.analysis.interventions.replay.attention import AttentionReplay
from mechmem.analysis.interventions.replay.support import attention_weights
from mechmem.analysis.patching.attribution import judge
from mechmem.analysis.stats import mean_interval
from mechmem.errors import MechmemError
from mechmem.io import strict_json
from mechmem.models.backend import attention_scale, is_transformer_lens_model
from mechmem.models.checks import check_count, check_heads, check_model, check_seed
from mechmem.models.parts import Head, model_device
from mechmem.plotting import plt
from mechmem.tasks.base import AttentionSites, check_task

METRIC = "the head's attention score before the softmax (q_rot . k_rot / attn_scale, hook_attn_scores)"
EXACT = "exact"
FROZEN = "exact with each position's norm scale frozen"
INTERVAL = "95% normal interval over prompts (each prompt: the mean over its query-key pairs)"
ROTARY = "rotary: each source's query and key rotated to its position with the model's own rotation"


class QKPair(NamedTuple):
    """One (query source, key source) term of a head's score, with its interval over prompts."""

    query_source: str
    key_source: str
    contribution: float
    lower: float
    upper: float


@dataclass(frozen=True)
class HeadQK:
    """One head's score on one set of sites, split into (query source, key source) terms."""

    head: str
    sites: str
    sources: tuple[str, ...]
    """The sources, the same on both sides, in residual order (embed, pos, heads and MLPs, bias)."""
    per_prompt: Float[Tensor, "prompt query_source key_source"]
    """Each prompt's terms, averaged over its pairs (float64)."""
    n_pairs: int
    max_error: float
    """Largest |sum of the terms - the model's hook_attn_scores| over the pairs."""
    note: str = ""

    def __post_init__(self) -> None:
        s = len(self.sources)
        if self.per_prompt.dim() != 3 or self.per_prompt.shape[1:] != (s, s):
            raise ValueError(f"per_prompt must be [prompt {s} {s}], got {tuple(self.per_prompt.shape)}")

    def interval(self, side: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """(mean, lower, upper) of the terms [source source], or of a marginal [source]: `side` "key" sums
        over the query sources, "query" over the key sources."""
        values = {None: self.per_prompt, "key": self.per_prompt.sum(1), "query": self.per_prompt.sum(2)}
        return mean_interval(values[side])

    def top(self, k: int = 5) -> list[QKPair]:
        """The `k` terms largest in absolute mean."""
        cells = torch.stack(self.interval(), -1).flatten(0, 1)  # [query_source * key_source, 3]
        n = len(self.sources)
        order = cells[:, 0].abs().argsort(descending=True)[:k].tolist()
        return [QKPair(self.sources[i // n], self.sources[i % n], *cells[i].tolist()) for i in order]


@dataclass(frozen=True)
class QKAgreement:
    """How one side's attribution marginal ranks the sources against exact path patching of their edges."""

    head: str
    side: str
    """"key" (edges into the head's k port) or "query" (its q port)."""
    sources: tuple[str, ...]
    attribution: tuple[float, ...]
    """Mean marginal on the patching pair (query: the answer position; key: the head's top key there)."""
    patching: tuple[float, ...]
    """Mean over prompts of metric(clean) - metric(edge ablated), per source's edge."""
    spearman: float
    """Rank correlation of |attribution| and |patching| (NaN below 3 sources or for a constant side)."""
    top_agrees: bool
    message: str
    prompts: str = ""
    """The patching pair's source in words (`circuit_pair`)."""

    def to_dict(self) -> dict[str, Any]:
        return strict_json({k: getattr(self, k) for k in self.__dataclass_fields__})


@dataclass(frozen=True)
class QKAttribution:
    """QK attribution of heads on sets of sites (`qk_attribution`)."""

    entries: tuple[HeadQK, ...]
    convention: str
    """`EXACT` without a norm before attention, else `FROZEN`."""
    rotary: str = ""
    agreement: tuple[QKAgreement, ...] = field(default=())

    def entry(self, head: str, sites: str | None = None) -> HeadQK:
        """The entry of `head` on `sites` (default: its first)."""
        for e in self.entries:
            if e.head == head and sites in (None, e.sites):
                return e
        raise KeyError(f"no attribution for head {head!r}" + (f" on {sites!r}" if sites else ""))

    def top(self, head: str, k: int = 5, sites: str | None = None) -> list[QKPair]:
        """The `k` largest (query source, key source) terms of `head` on `sites` (default: its first)."""
        return self.entry(head, sites).top(k)

    def to_dataframe(self) -> Any:
        """One row per head, site set and (query_source, key_source) term: `contribution`, `lower`,
        `upper`; marginals are rows whose other side is "all"."""
        columns = ["head", "sites", "query_source", "key_source", "contribution", "lower", "upper"]
        parts = []
        for e in self.entries:
            lead = {"head": e.head, "sites": e.sites}
            mean, low, up = e.interval()
            axes, names = ("query_source", "key_source"), {"query_source": e.sources, "key_source": e.sources}
            parts.append(grid_frame(mean, axes, lower=low, upper=up, labels=names, leading=lead))
            for side, other in (("key", "query_source"), ("query", "key_source")):
                mean, low, up = e.interval(side)
                axis, lead = f"{side}_source", lead | {other: "all"}
                parts.append(
                    grid_frame(mean, (axis,), lower=low, upper=up, labels={axis: e.sources}, leading=lead)
                )
        return concat(parts, columns).rename(columns={"value": "contribution"})[columns]

    def to_dict(self) -> dict[str, Any]:
        def stats(e: HeadQK, side: str | None) -> dict[str, Any]:
            return dict(zip(("mean", "lower", "upper"), (t.tolist() for t in e.interval(side))))

        entries = [
            {
                "head": e.head,
                "sites": e.sites,
                "note": e.note,
                "prompts": len(e.per_prompt),
                "pairs": e.n_pairs,
            }
            | {"max_error": e.max_error, "sources": list(e.sources), "contribution": stats(e, None)}
            | {"key_marginal": stats(e, "key"), "query_marginal": stats(e, "query")}
            for e in self.entries
        ]
        out = {"metric": METRIC, "axes": ["query_source", "key_source"], "convention": self.convention}
        out |= {"rotary": self.rotary, "interval": INTERVAL, "entries": entries}
        return strict_json(out | {"agreement": [a.to_dict() for a in self.agreement]})

    def __repr__(self) -> str:
        sites = ", ".join(dict.fromkeys(e.sites for e in self.entries))
        error = max((e.max_error for e in self.entries), default=0.0)
        best = [
            f"{e.head} on {e.sites}: {p.query_source} x {p.key_source} {p.contribution:.2f}"
            for e in self.entries[:2]
            for p in e.top(1)
        ]
        heads = f"{len({e.head for e in self.entries})} heads"
        return short_repr("QKAttribution", heads, f"sites {sites}", f"max error {error:.1e}", "; ".join(best))


def qk_unsupported(model: torch.nn.Module) -> str | None:
    """Why the score of `model`'s heads is not a sum over source pairs (None when it is)."""
    if not is_transformer_lens_model(model):
        return f"{type(model).__name__} is not a TransformerLens transformer"
    cfg = model.cfg
    if (getattr(cfg, "attn_scores_soft_cap", -1.0) or -1.0) > 0:
        return "its attention scores are soft-capped (tanh), which is not linear in the sources"
    if getattr(cfg, "use_qk_norm", False):
        return "it normalises queries and keys (query/key norms), which is not linear in the sources"
    if cfg.positional_embedding_type not in ("standard", "rotary"):
        return f"positional_embedding_type={cfg.positional_embedding_type!r} (standard and rotary only)"
    return None


def residual_sources(
    model: torch.nn.Module, cache: Any, layer: int
) -> tuple[list[str], Float[Tensor, "source batch pos d_model"]]:
    """The names and outputs (float64) of the direct sources of block `layer`'s residual input, bias last;
    they sum to `blocks.{layer}.hook_resid_pre`."""
    cfg = model.cfg
    names, parts = ["embed"], [cache["hook_embed"]]
    if cfg.positional_embedding_type == "standard":
        names.append("pos")
        parts.append(cache["hook_pos_embed"])
    bias = torch.zeros(cfg.d_model, dtype=torch.float64, device=parts[0].device)
    for l in range(layer):
        w = attention_weights(model, l)
        z = cache[f"blocks.{l}.attn.hook_z"].double()
        parts += list(torch.einsum("bphe,hem->hbpm", z, w.W_O.detach().double()))
        names += [Head(l, h).name for h in range(cfg.n_heads)]
        bias = bias + w.b_O.detach().double()
        if not cfg.attn_only:
            names.append(f"MLP{l}")
            parts.append(cache[f"blocks.{l}.hook_mlp_out"])
    stack = torch.stack([p.double() for p in parts])
    return [*names, "bias"], torch.cat([stack, bias.expand_as(stack[:1])])


def normalised(
    model: torch.nn.Module, cache: Any, layer: int, x: Float[Tensor, "source batch pos d_model"]
) -> Float[Tensor, "source batch pos d_model"]:
    """The sources through block `layer`'s first norm with each position's scale frozen (as TransformerLens's
    `apply_ln_to_stack`): centred (LN, LNPre), divided by the cached scale, times w (LN, RMS); the norm's
    bias joins the last source."""
    kind = model.cfg.normalization_type
    if kind is None:
        return x
    if kind in ("LN", "LNPre"):
        x = x - x.mean(-1, keepdim=True)
    x = x / cache[f"blocks.{layer}.ln1.hook_scale"].double()
    norm = model.blocks[layer].ln1
    if kind in ("LN", "RMS"):
        x = x * norm.w.detach().double()
    if kind == "LN":
        x = torch.cat([x[:-1], x[-1:] + norm.b.detach().double()])
    return x


def head_attribution(
    model: torch.nn.Module, cache: Any, head: Head, sites: AttentionSites, replay: AttentionReplay | None
) -> HeadQK:
    """`head`'s score on `sites` split over (query source, key source) pairs, from a run's `cache`; pairs
    the layer masks (outside a local window) are left out."""
    layer, cfg = head.layer, model.cfg
    names, x = residual_sources(model, cache, layer)
    x = normalised(model, cache, layer, x)
    w = attention_weights(model, layer)
    group = cfg.n_heads // w.W_K.shape[0]
    q = x @ w.W_Q[head.head].detach().double()
    k = x @ w.W_K[head.head // group].detach().double()
    q[-1] += w.b_Q[head.head].detach().double()
    k[-1] += w.b_K[head.head // group].detach().double()
    if replay is not None:
        positions = torch.arange(x.shape[2], device=x.device)
        q, k = (replay.rotate(layer, t.unsqueeze(-2), positions).squeeze(-2) for t in (q, k))
    b, qpos, kpos = sites.pairs.to(x.device).nonzero(as_tuple=True)
    scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][b, head.head, qpos, kpos].double()
    b, qpos, kpos, scores = (t[scores.isfinite()] for t in (b, qpos, kpos, scores))  # not masked (a window)
    terms = torch.einsum("ine,jne->nij", q[:, b, qpos], k[:, b, kpos]) / attention_scale(model, layer)
    error = float((terms.sum((1, 2)) - scores).abs().max()) if len(b) else 0.0
    sums = torch.zeros(len(sites.tokens), *terms.shape[1:], dtype=torch.float64, device=x.device)
    sums.index_add_(0, b, terms)
    counts = torch.bincount(b, minlength=len(sites.tokens))
    per_prompt = (sums[counts > 0] / counts[counts > 0, None, None]).cpu()
    return HeadQK(head.name, sites.name, tuple(names), per_prompt, len(b), error, sites.note)


def task_sites(
    model: torch.nn.Module, task: Any, n: int, *, generator: torch.Generator
) -> list[AttentionSites]:
    """The task's own sites (`Task.attention_sites`), then induction sites (a query at a repeated token, its
    key just after the token's earlier occurrence) and the previous-token sites they read (a query at such
    a key, its key one back): on the task's data where it repeats tokens, else on repeated random tokens
    [r, r], flagged as off the task's distribution."""
    sites = list(task.attention_sites(n, generator=generator)) if task is not None else []
    tokens = task.eval_batch(n, generator=generator).tokens if task is not None else None
    note = ""
    if tokens is None or not bool(induction_pattern(tokens).any()):
        half = min(model.cfg.n_ctx // 2, model.cfg.d_vocab)
        tokens = repeated_random_tokens(n, half, model.cfg.d_vocab, generator=generator)
        note = "repeated random tokens [r, r], off the task's distribution"
    induction = induction_pattern(tokens)
    previous = previous_token_pattern(tokens) & induction.any(1)[:, :, None]
    return [
        *sites,
        AttentionSites("induction", tokens, induction, note),
        AttentionSites("previous_token", tokens, previous, note),
    ]


def parse_heads(model: torch.nn.Module, heads: Any) -> list[Head]:
    """`heads` (names "L1H1" or `Head`s, or one; None: every head) checked against the model
    (`check_heads`)."""
    cfg = model.cfg
    if heads is None:
        return [Head(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    return check_heads(model, heads)


@torch.no_grad()
def qk_attribution(
    model: torch.nn.Module,
    task: Any = None,
    *,
    heads: Any = None,
    sites: AttentionSites | list[AttentionSites] | None = None,
    n: int = 64,
    seed: int = 0,
) -> QKAttribution:
    """Split each head's attention score at its sites into (query source, key source) contributions.

    Args:
        model: a TransformerLens transformer (no soft-capped scores, no query/key norms).
        task: gives the sites when `sites` is None (`task_sites`: its role probes, induction and
            previous-token sites; without a task, those on repeated random tokens).
        heads: names like "L1H1" (default: every head).
        sites: the prompts and (query, key) pairs to read instead of the task's.
        n: prompts per site set drawn from the task.
        seed: seeds the generator that draws them.

    Returns:
        A `QKAttribution`, one entry per head and site set; each entry's terms sum to the model's score.

    Example:
        >>> import mechmem
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> result = mechmem.qk_attribution(model, task, heads=["L1H1"], n=16)
        >>> best = result.top("L1H1", 1)[0]
        >>> best.query_source, best.key_source, result.entries[0].max_error < 1e-5
        ('embed', 'L0H2', True)
    """
    check_model(model)
    if task is not None:
        check_task(task, model)
    check_count("n", n)
    check_seed(seed)
    if reason := qk_unsupported(model):
        raise MechmemError(f"QK attribution does not apply: {reason}")
    chosen = parse_heads(model, heads)
    if sites is None:
        sites = task_sites(model, task, n, generator=torch.Generator().manual_seed(seed))
    sites = [sites] if isinstance(sites, AttentionSites) else list(sites)
    replay = AttentionReplay(model) if model.cfg.positional_embedding_type == "rotary" else None
    device, entries = model_device(model), []
    for s in sites:
        _, cache = model.run_with_cache(s.tokens.to(device))
        entries += [head_attribution(model, cache, h, s, replay) for h in chosen]
    convention = EXACT if model.cfg.normalization_type is None else FROZEN
    return QKAttribution(tuple(entries), convention, ROTARY if replay is not None else "")


def compare(
    head: str, side: str, sources: tuple[str, ...], attribution: Any, patching: Any, prompts: str
) -> QKAgreement:
    """The agreement record of one side of a head: rank correlation, top sources and a one-line message."""
    a, p = (torch.tensor(np.abs(v), dtype=torch.float64) for v in (attribution, patching))
    rho = judge(a, p)["spearman"] if len(a) >= 3 else float("nan")  # Spearman of |values|
    top_a, top_p = sources[int(np.abs(attribution).argmax())], sources[int(np.abs(patching).argmax())]
    message = f"{head} {side} side: top source {top_a} by both; Spearman {rho:.2f}"
    if top_a != top_p:
        message = (
            f"{head} {side} side: attribution ranks {top_a} first, patching {top_p} (Spearman {rho:.2f}); "
            "they can disagree: the attribution reads the clean score term by term (norm scales frozen), "
            "while patching an edge also moves the norm scale, passes through the softmax (a saturated "
            "pattern hides score changes) and reaches the logit difference through the OV path too; "
            "nearly tied sources swap places easily"
        )
    values = (tuple(attribution), tuple(patching), rho, top_a == top_p, message, prompts)
    return QKAgreement(head, side, sources, *values)


@torch.no_grad()
def qk_patching_agreement(
    model: torch.nn.Module,
    task: Any,
    heads: Any = None,
    *,
    n: int = 64,
    seed: int = 0,
    ablation: str = "zero",
) -> list[QKAgreement]:
    """Per head (names like "L1H1"; default: every head), for its key side and its query side: the
    attribution marginal on the task's patching pair (`circuit_prompts`; query at the answer position, key
    at the head's most attended position there) against exact path patching (`EdgePatcher.exact`,
    `ablation`) of the edges into its k and q ports, over the sources both have (the bias has no edge)."""
    chosen = parse_heads(model, heads)
    pair, prompts = circuit_prompts(model, task, n, seed)
    patcher = EdgePatcher(model, pair, ablation)
    _, cache = model.run_with_cache(pair.clean.to(model_device(model)))
    replay = AttentionReplay(model) if model.cfg.positional_embedding_type == "rotary" else None
    rows, group = torch.arange(len(pair)), model.cfg.n_heads // attention_weights(model, 0).W_K.shape[0]
    edges = {  # the k port of a grouped-query head is named after its group's first head
        (h, side): [e for e in patcher.graph.edges if e.port.name == f"{port}.{side[0]}"]
        for h in chosen
        for side, port in (("key", Head(h.layer, h.head // group * group)), ("query", h))
    }
    effects = iter(patcher.exact([e for part in edges.values() for e in part]).mean(-1).tolist())
    out = []
    for head in chosen:
        pattern = cache[f"blocks.{head.layer}.attn.hook_pattern"][rows, head.head, pair.answer_pos]
        pairs = torch.zeros(*pair.clean.shape, pair.clean.shape[1], dtype=torch.bool)
        pairs[rows, pair.answer_pos, pattern.argmax(-1).cpu()] = True
        entry = head_attribution(model, cache, head, AttentionSites("pair", pair.clean, pairs), replay)
        for side in ("key", "query"):
            sources = tuple(e.sender.name for e in edges[head, side])
            marginal = entry.interval(side)[0]
            attribution = [float(marginal[entry.sources.index(s)]) for s in sources]
            patching = [next(effects) for _ in sources]
            out.append(compare(head.name, side, sources, attribution, patching, prompts))
    return out


def plot_qk_attribution(result: QKAttribution, *, sites: str | None = None) -> Any:
    """One query source x key source heatmap of mean contributions per head (its first site set, or
    `sites`); returns the Figure."""
    entries = [e for e in result.entries if sites in (None, e.sites)]
    entries = list({e.head: e for e in reversed(entries)}.values())[::-1]
    n = max(1, len(entries))
    size = max(len(e.sources) for e in entries) if entries else 1
    fig, axes = plt.subplots(
        1, n, figsize=(0.35 * size * n + 2, 0.35 * size + 1.6), squeeze=False, layout="constrained"
    )
    for ax, e in zip(axes[0], entries):
        mean = e.interval()[0].numpy()
        bound = float(np.abs(mean).max()) or 1.0
        im = ax.imshow(mean, cmap="RdBu_r", vmin=-bound, vmax=bound)
        ticks = range(len(e.sources))
        ax.set_xticks(ticks, e.sources, rotation=90, fontsize=7)
        ax.set_yticks(ticks, e.sources, fontsize=7)
        ax.set(title=f"{e.head} on {e.sites}", xlabel="key source", ylabel="query source")
        fig.colorbar(im, ax=ax, shrink=0.7)
    return fig
