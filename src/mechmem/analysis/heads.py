"""Attention-head detection on token tensors, and attention heatmaps.

A detection pattern marks, for every query position, the key positions a head of some kind should attend
to: a previous-token head attends to q - 1, a duplicate-token head to earlier positions holding the same
token, an induction head to the position just after an earlier occurrence of the current token. A head's
score in [0, 1] is its attention mass on the marked keys, averaged over the query rows where the pattern
marks at least one key. It works on raw token tensors (no tokenizer, unlike TransformerLens's
`detect_head`); repeated random sequences [r, r] are the standard probe for induction heads.

Caveats: a score says where a head looks, not what it moves (see `probes.py`); with a small vocabulary,
random sequences hold chance duplicates, so attend-to-self and duplicate-token heads can overlap.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.analysis.frames import concat, grid_frame, shape_text, short_repr, token_labels, with_tokens
from mechmem.analysis.stats import RESAMPLES, Z_95, RatioMoments, bootstrap_ratio
from mechmem.errors import BadArgument, BadArgumentType, MechmemError
from mechmem.io import strict_json
from mechmem.models.backend import attention_scale, is_transformer_lens_model
from mechmem.models.checks import check_count, check_generator, check_model, check_tokens, kind_of
from mechmem.models.parts import Head, model_device
from mechmem.plotting import plt

PatternFn = Callable[[Tensor], Tensor]
"""tokens [batch pos] -> bool [batch query_pos key_pos]: which keys a head of this kind attends to."""

MIN_TOKEN_ROWS = 20
"""A token-selective score needs at least this many query rows holding the token."""
MIN_TOKENS = 2
"""A head is token-selectively clear when at least this many tokens have a clear per-token score."""
INTERVAL = (
    "95% percentile bootstrap over sequences (200 resamples); "
    "per token: score +- 1.96 delta-method standard errors over sequences"
)


def kth_highest(lower: Float[Tensor, "... token"], k: int = MIN_TOKENS) -> Float[Tensor, "..."]:
    """The `k`-th highest per-token lower end (NaN counts as -inf; -inf with fewer than k tokens): a head
    whose value is >= a threshold does the pattern clearly for at least `k` query tokens."""
    lows = lower.nan_to_num(float("-inf"))
    if lows.shape[-1] < k:
        return torch.full(lows.shape[:-1], float("-inf"))
    return lows.topk(k, dim=-1).values[..., -1]


def token_lower(moments: RatioMoments, z: float = Z_95) -> Float[Tensor, "... token"]:
    """Per token, score - z delta-method standard errors (NaN below `MIN_TOKEN_ROWS` rows)."""
    lows = moments.ratio() - z * moments.stderr()
    return lows.masked_fill(moments.b < MIN_TOKEN_ROWS, float("nan")).float()


def no_attention_reason(model: torch.nn.Module) -> str | None:
    """Why head analyses do not apply to `model` (None when they do)."""
    if not is_transformer_lens_model(model):
        return f"{type(model).__name__} is not a HookedTransformer, so it has no attention heads to analyse"
    if model.cfg.n_heads < 1:
        return "the model has no attention heads"
    return None


def previous_token_pattern(tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch query_pos key_pos"]:
    """Key q - 1 for every query q >= 1."""
    n = tokens.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril(-1).triu(-1)
    return mask.unsqueeze(0).expand(tokens.shape[0], n, n)


def duplicate_token_pattern(tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch query_pos key_pos"]:
    """Earlier keys k < q holding the query's token."""
    same = tokens[:, :, None] == tokens[:, None, :]
    earlier = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device).tril(-1)
    return same & earlier


def induction_pattern(tokens: Int[Tensor, "batch pos"]) -> Bool[Tensor, "batch query_pos key_pos"]:
    """Keys k with 1 <= k < q whose previous token equals the query's token."""
    batch, n = tokens.shape
    out = torch.zeros(batch, n, n, dtype=torch.bool, device=tokens.device)
    out[:, :, 1:] = tokens[:, :, None] == tokens[:, None, :-1]
    return out & torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril(-1)


BUILTIN_PATTERNS: dict[str, PatternFn] = {
    "previous_token": previous_token_pattern,
    "duplicate_token": duplicate_token_pattern,
    "induction": induction_pattern,
}


def repeated_random_tokens(
    n: int, half: int, d_vocab: int, *, generator: torch.Generator, distinct: bool = True
) -> Int[Tensor, "batch pos"]:
    """n sequences [r, r]; r holds no repeated token when `distinct` and half <= d_vocab."""
    if distinct and half <= d_vocab:
        first = torch.rand(n, d_vocab, generator=generator).argsort(-1)[:, :half]
    else:
        first = torch.randint(d_vocab, (n, half), generator=generator)
    return torch.cat([first, first], dim=1)


def probe_halves(n_ctx: int, d_vocab: int, first: int = 4) -> list[int]:
    """Half-lengths h of the repeated-sequence probes [r, r] (the role rule, docs/analyses.md): 4, 8, 16, ...
    while 2h <= n_ctx and h <= d_vocab, then min(n_ctx // 2, d_vocab) if it is not already there."""
    longest = min(n_ctx // 2, d_vocab)
    halves, h = [], first
    while h <= longest:
        halves.append(h)
        h *= 2
    if longest >= 2 and longest not in halves:
        halves.append(longest)
    return halves


def chosen_halves(
    n_ctx: int,
    d_vocab: int,
    *,
    half: int | None = None,
    lengths: Sequence[int] | None = None,
    task_half: int | None = None,
) -> list[int]:
    """The probe half-lengths asked for: `half`, else `lengths`, else `probe_halves` plus `task_half`.
    Raises `MechmemError` for a length the model cannot hold (2 x half <= n_ctx, 2 <= half <= d_vocab)."""
    if half is not None:
        halves = [half]
    elif lengths:
        halves = sorted(set(lengths))
    else:
        halves = sorted(set(probe_halves(n_ctx, d_vocab)) | ({task_half} if task_half else set()))
    bad = [h for h in halves if h < 2 or 2 * h > n_ctx or h > d_vocab]
    if bad or not halves:
        raise MechmemError(
            f"probe half-lengths must lie in 2..{min(n_ctx // 2, d_vocab)} (2 x half <= n_ctx = "
            f"{n_ctx}, half <= d_vocab = {d_vocab}), got {bad or halves}"
        )
    return halves


def default_halves(model: torch.nn.Module, task: Any = None) -> list[int]:
    """`probe_halves` plus the task's own half (`task.config.half`) when it has one."""
    task_half = getattr(getattr(task, "config", None), "half", None)
    cfg = model.cfg
    return chosen_halves(cfg.n_ctx, cfg.d_vocab, task_half=task_half if isinstance(task_half, int) else None)


@dataclass
class HeadScores:
    """Detection scores per pattern, each [layer head], measured on the data described by `data`."""

    scores: dict[str, Tensor]
    data: str = ""
    axes: tuple[str, ...] = ("layer", "head")
    metric: str = "mean attention on the pattern's keys over query rows with at least one such key"
    extra: dict[str, Any] = field(default_factory=dict)
    lower: dict[str, Tensor] = field(default_factory=dict)
    """Per pattern, [layer head]: lower end of the 95% bootstrap interval over sequences (`intervals`)."""
    upper: dict[str, Tensor] = field(default_factory=dict)
    """Per pattern, [layer head]: upper end of that interval."""
    by_token: dict[str, Tensor] = field(default_factory=dict)
    """Per pattern, [layer head token]: the score over the rows whose query holds that token (NaN: none)."""
    by_token_lower: dict[str, Tensor] = field(default_factory=dict)
    """Per pattern, [layer head token]: score - 1.96 standard errors over sequences (the delta method of the
    ratio, `stats.RatioMoments`; NaN with fewer than `MIN_TOKEN_ROWS` rows)."""
    moments: dict[str, RatioMoments] = field(default_factory=dict)
    """Per pattern: per-sequence sums of (mass on the pattern's keys, rows with a key), [layer head]."""
    token_moments: dict[str, RatioMoments] = field(default_factory=dict)
    """Per pattern: the same restricted to the rows whose query holds each token, [layer head token]."""

    def __post_init__(self) -> None:
        shapes = {tuple(v.shape) for d in (self.scores, self.lower, self.upper) for v in d.values()}
        if len(shapes) > 1 or any(len(s) != 2 for s in shapes):
            raise ValueError(f"every score must be [layer head] with one shape, got {sorted(shapes)}")
        token_shapes = {tuple(v.shape[:2]) for d in (self.by_token, self.by_token_lower) for v in d.values()}
        if token_shapes - shapes:
            raise ValueError(f"token scores must be [layer head token], got {sorted(token_shapes)}")

    def selective_lower(
        self, name: str, min_tokens: int = MIN_TOKENS, *, z: float = Z_95
    ) -> Float[Tensor, "layer head"]:
        """The `min_tokens`-th highest per-token lower end (score - z standard errors) of pattern `name`
        (`kth_highest`); the role rule passes a multiplicity-corrected z (docs/decisions.md)."""
        if z == Z_95 or name not in self.token_moments:
            return kth_highest(self.by_token_lower[name], min_tokens)
        return kth_highest(token_lower(self.token_moments[name], z), min_tokens)

    def ranking(self, name: str) -> list[tuple[int, int, float]]:
        """(layer, head, score) for pattern `name`, best first."""
        s = self.scores[name]
        order = s.flatten().argsort(descending=True).tolist()
        return [(i // s.shape[1], i % s.shape[1], float(s.flatten()[i])) for i in order]

    def to_dataframe(self, *, by_token: bool = False, token_names: Sequence[str] | None = None) -> Any:
        """One row per pattern and head: `pattern`, `layer`, `head`, `value`, and `lower` / `upper` when
        bootstrap intervals were computed (NaN for a pattern without one).

        With `by_token`, one row per pattern, head and query token: `token_id`, `token` (its name in
        `token_names`, else the id), `value` (NaN where the token holds no query row), and `lower` /
        `upper`, mean -+ 1.96 standard errors over the token's rows (NaN with fewer than
        `MIN_TOKEN_ROWS` rows).
        """
        columns = ["pattern", "layer", "head", "token_id", "value", "lower", "upper"]
        if by_token:
            parts = []
            for name, values in self.by_token.items():
                low = self.by_token_lower.get(name, torch.full_like(values, float("nan")))
                axes = ("layer", "head", "token_id")
                parts.append(
                    grid_frame(values, axes, lower=low, upper=2 * values - low, leading={"pattern": name})
                )
            return with_tokens(concat(parts, columns), token_names)
        columns = [c for c in columns if c != "token_id" and (self.lower or c not in ("lower", "upper"))]
        parts = []
        for name, values in self.scores.items():
            nan = torch.full_like(values, float("nan"))
            bounds = (
                {"lower": self.lower.get(name, nan), "upper": self.upper.get(name, nan)} if self.lower else {}
            )
            parts.append(grid_frame(values, ("layer", "head"), leading={"pattern": name}, **bounds))
        return concat(parts, columns)

    def __repr__(self) -> str:
        best = []
        for name, s in self.scores.items():
            if s.numel() and not bool(s.isnan().all()):
                layer, head = divmod(int(s.nan_to_num(float("-inf")).argmax()), s.shape[1])
                best.append(f"{name} {Head(layer, head)} {float(s[layer, head]):.2f}")
        shape = next(iter(self.scores.values())).shape if self.scores else ()
        return short_repr(
            "HeadScores",
            f"patterns {', '.join(self.scores) or 'none'}",
            shape_text(self.axes, shape),
            f"best {'; '.join(best)}" if best else "",
            f"on {self.data[:60]!r}" if self.data else "",
        )

    def to_dict(self) -> dict[str, Any]:
        def nested(d: dict[str, Tensor]) -> dict[str, Any]:
            return {k: strict_json(v.tolist()) for k, v in d.items()}

        out = {
            "axes": list(self.axes),
            "metric": self.metric,
            "data": self.data,
            "scores": nested(self.scores),
        }
        if self.lower:
            out |= {"lower": nested(self.lower), "upper": nested(self.upper), "interval": INTERVAL}
        return out | self.extra


def check_patterns(patterns: Any, n_pos: int) -> Mapping[str, PatternFn | Tensor]:
    """Detection patterns as `detect_heads` takes them: names mapped to a function of the tokens or a fixed
    [query_pos key_pos] tensor covering at least `n_pos` positions; `BadArgumentType` / `BadArgument` else."""
    if not isinstance(patterns, Mapping):
        raise BadArgumentType(
            f"patterns must map names to pattern functions or tensors, got {kind_of(patterns)}"
        )
    for name, spec in patterns.items():
        if isinstance(spec, Tensor):
            if spec.ndim != 2 or min(spec.shape) < n_pos:
                raise BadArgument(
                    f"pattern {name!r} must be [query_pos key_pos] covering the tokens' {n_pos} positions, "
                    f"got shape {tuple(spec.shape)}"
                )
        elif not callable(spec):
            raise BadArgumentType(
                f"pattern {name!r} must be a function of the tokens or a tensor, got {kind_of(spec)}"
            )
    return patterns


def _as_pattern(spec: PatternFn | Tensor, tokens: Tensor) -> Tensor:
    if isinstance(spec, Tensor):  # a fixed [query_pos key_pos] pattern for every sequence
        n = tokens.shape[1]
        return spec[:n, :n].to(tokens.device).bool().unsqueeze(0).expand(tokens.shape[0], n, n)
    return spec(tokens)


@torch.no_grad()
def detect_heads(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    patterns: Mapping[str, PatternFn | Tensor] | None = None,
    *,
    data: str = "",
    chunk: int = 256,
    generator: torch.Generator | None = None,
    resamples: int = RESAMPLES,
) -> HeadScores:
    """Score every head against each detection pattern (default: previous-token, duplicate-token, induction).

    Each pattern also gets its 95% bootstrap interval over sequences, its score per query token
    (`HeadScores.by_token`) and the per-sequence moments of both for the sequential rule.

    Args:
        model: a HookedTransformer.
        tokens: input sequences; patterns are computed from them.
        patterns: name -> a function of the tokens returning bool [batch query_pos key_pos], or a fixed
            bool [query_pos key_pos] tensor.
        data: a description of `tokens`, stored with the result.
        chunk: sequences per forward pass (patterns are reduced inside the hooks, never stored).
        generator: draws the bootstrap resamples (default: seeded with 0).
        resamples: bootstrap resamples (0: no bootstrap interval).

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> scores = mechmem.detect_heads(model, batch.tokens).scores
        >>> round(float(scores["previous_token"][0, 2]), 2), round(float(scores["induction"][1, 1]), 2)
        (1.0, 1.0)
    """
    check_model(model)
    tokens = check_tokens(model, tokens)
    patterns = dict(BUILTIN_PATTERNS if patterns is None else check_patterns(patterns, tokens.shape[1]))
    check_count("chunk", chunk)
    check_count("resamples", resamples, minimum=0)
    check_generator(generator)
    cfg = model.cfg
    shape = (cfg.n_layers, cfg.n_heads)
    vocab = max(cfg.d_vocab, int(tokens.max()) + 1 if tokens.numel() else 1)
    tokens = tokens.to(model_device(model))
    # per token, sums over sequences: mass a [layer head token] and rows b [token] (a, b, aa, bb, ab, support)
    sums_shapes = [(*shape, vocab), (vocab,)] * 3
    tok = {k: RatioMoments(len(tokens), *(torch.zeros(s).double() for s in sums_shapes)) for k in patterns}
    per_seq = {k: [] for k in patterns}  # per chunk: mass [batch layer head]
    rows_per_seq = {k: [] for k in patterns}  # per chunk: rows [batch]

    def measure(part: Tensor) -> None:
        """Adds one chunk of sequences to the sums; the patterns are reduced inside the hooks."""
        masks = {k: _as_pattern(spec, part) for k, spec in patterns.items()}
        mass = {k: torch.zeros(len(part), *shape, dtype=torch.float64) for k in patterns}
        # group the rows by (sequence, query token): the unit of a per-token score is the sequence
        seq = torch.arange(len(part)).repeat_interleave(part.shape[1])
        pairs, group = torch.unique(seq * vocab + part.flatten().cpu(), return_inverse=True)
        group_token = pairs % vocab
        group_rows = {
            k: torch.zeros(len(pairs), dtype=torch.float64).index_add_(
                0, group, m.any(-1).flatten().double().cpu()
            )
            for k, m in masks.items()
        }

        def reduce(pattern: Tensor, hook: Any) -> None:
            layer = hook.layer()
            for name, mask in masks.items():
                valid = mask.any(-1)[:, None]  # [batch 1 query_pos]
                on = (pattern * mask[:, None].to(pattern.dtype)).sum(-1) * valid  # [batch head query]
                mass[name][:, layer] = on.sum(-1).double().cpu()
                per_row = on.transpose(0, 1).reshape(on.shape[1], -1).double().cpu()  # [head batch*query]
                per_group = torch.zeros(len(per_row), len(pairs), dtype=torch.float64)
                per_group.index_add_(1, group, per_row)
                sums = tok[name]
                sums.a[layer].index_add_(1, group_token, per_group)
                sums.aa[layer].index_add_(1, group_token, per_group.square())
                sums.ab[layer].index_add_(1, group_token, per_group * group_rows[name])

        with model.hooks(fwd_hooks=[(lambda n: n.endswith("attn.hook_pattern"), reduce)]):
            model(part)
        for name, mask in masks.items():
            per_seq[name].append(mass[name])
            rows_per_seq[name].append(mask.any(-1).sum(-1).double().cpu())
            rows, sums = group_rows[name], tok[name]
            sums.b.index_add_(0, group_token, rows)
            sums.bb.index_add_(0, group_token, rows.square())
            sums.support.index_add_(0, group_token, (rows > 0).double())

    for start in range(0, tokens.shape[0], chunk):
        measure(tokens[start : start + chunk])
    gen = generator or torch.Generator().manual_seed(0)
    scores, lower, upper, moments = {}, {}, {}, {}
    for k in patterns:
        m, r = torch.cat(per_seq[k]), torch.cat(rows_per_seq[k])
        total = r.sum()
        scores[k] = (m.sum(0) / total).float() if total > 0 else torch.full(shape, float("nan"))
        if resamples:
            lower[k], upper[k] = bootstrap_ratio(m, r, generator=gen, resamples=resamples)
        moments[k] = RatioMoments.from_values(m, r)
    extra = {"rows": {k: int(torch.cat(v).sum()) for k, v in rows_per_seq.items()}}
    by_token = {k: m.ratio().float() for k, m in tok.items()}
    by_token_lower = {k: token_lower(m) for k, m in tok.items()}
    intervals = {"lower": lower, "upper": upper, "by_token_lower": by_token_lower}
    return HeadScores(
        scores, data, extra=extra, by_token=by_token, moments=moments, token_moments=tok, **intervals
    )


TASK_DATA = "the task's evaluation data (answer queries; previous-token where induction reads)"
"""How `detect_heads_on_task` describes its data."""


def task_patterns(answers: Bool[Tensor, "batch pos"]) -> dict[str, PatternFn]:
    """The detection patterns restricted to where a task's heads do their work (the one definition of
    "task" scores).

    Duplicate-token and induction count only the answer queries (`answers`); previous-token counts only
    the positions an induction head reads from some answer query. The functions expect the whole batch
    the mask belongs to (use `chunk=len(batch)`).
    """

    def at_answers(pattern: PatternFn) -> PatternFn:
        return lambda t: pattern(t) & answers.to(t.device)[:, :, None]

    def previous_token_where_read(t: Tensor) -> Tensor:
        read = at_answers(induction_pattern)(t).any(1)
        return previous_token_pattern(t) & read[:, :, None]

    patterns = {
        "duplicate_token": at_answers(duplicate_token_pattern),
        "induction": at_answers(induction_pattern),
    }
    return {"previous_token": previous_token_where_read} | patterns


def detect_heads_on_task(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    answers: Bool[Tensor, "batch pos"],
    generator: torch.Generator | None = None,
    resamples: int = RESAMPLES,
) -> HeadScores:
    """Detection scores on a task's data at the answer queries `answers` (e.g. `batch.loss_mask > 0`)."""
    if answers.shape != tokens.shape:
        raise ValueError(f"answers {tuple(answers.shape)} must have the tokens' shape {tuple(tokens.shape)}")
    patterns = task_patterns(answers.bool())
    return detect_heads(
        model,
        tokens,
        patterns,
        data=TASK_DATA,
        chunk=max(1, len(tokens)),
        generator=generator,
        resamples=resamples,
    )


@torch.no_grad()
def attention_patterns(
    model: torch.nn.Module, tokens: Int[Tensor, "batch pos"]
) -> Float[Tensor, "layer batch head query_pos key_pos"]:
    """Every layer's attention pattern on `tokens` (keep the batch small: this is stored in full)."""
    _, cache = model.run_with_cache(
        tokens.to(model_device(model)), names_filter=lambda n: n.endswith("hook_pattern")
    )
    return torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(model.cfg.n_layers)])


def attention_from_weights(
    model: torch.nn.Module, x: Float[Tensor, "batch pos d_model"], layer: int
) -> Float[Tensor, "batch head query_pos key_pos"]:
    """The attention pattern rebuilt from W_Q, W_K, biases and the causal mask; `x` is the attention
    layer's input (`blocks.L.ln1.hook_normalized`, or `blocks.L.hook_resid_pre` without a norm)."""
    attn = model.blocks[layer].attn
    q = torch.einsum("bpd,hde->bphe", x, attn.W_Q) + attn.b_Q
    k = torch.einsum("bpd,hde->bphe", x, attn.W_K) + attn.b_K
    scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / attention_scale(model, layer)
    n = x.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1)


def plot_head_scores(result: HeadScores, *, title: str = "") -> Any:
    """One layer x head heatmap per pattern; returns the Figure."""
    names = list(result.scores)
    fig, axes = plt.subplots(
        1, len(names), figsize=(3.2 * len(names), 2.8), squeeze=False, layout="constrained"
    )
    for ax, name in zip(axes[0], names):
        s = result.scores[name].numpy()
        im = ax.imshow(s, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set(title=name, xlabel="head", ylabel="layer", xticks=range(s.shape[1]), yticks=range(s.shape[0]))
        for (i, j), v in np.ndenumerate(s):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=7)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def plot_attention(
    patterns: Float[Tensor, "layer head query_pos key_pos"],
    tokens: Int[Tensor, " pos"] | None = None,
    *,
    token_names: Sequence[str] | None = None,
) -> Any:
    """A grid of attention heatmaps (rows: layers, columns: heads) for one sequence; returns the Figure.
    Ticks show positions, and the tokens (names from `token_names`) when the sequence is short."""
    n_layers, n_heads, n, _ = patterns.shape
    side = 3.0 if n <= 32 else 4.5
    size = (side * n_heads + 0.6, side * n_layers)
    fig, axes = plt.subplots(n_layers, n_heads, figsize=size, squeeze=False, layout="constrained")
    ticks = list(range(0, n, max(1, n // 12)))
    show_tokens = tokens is not None and n <= 48
    names = token_labels([int(tokens[i]) for i in ticks], token_names) if show_tokens else []
    labels = [f"{i}:{name}" for i, name in zip(ticks, names)] if show_tokens else [str(i) for i in ticks]
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer][head]
            ax.imshow(patterns[layer, head].detach().cpu().numpy(), vmin=0, vmax=1, cmap="Blues")
            ax.set_title(str(Head(layer, head)), fontsize=9)
            ax.set_xticks(ticks, labels, fontsize=6, rotation=90)
            ax.set_yticks(ticks, labels, fontsize=6)
    fig.supxlabel("key position" + (":token" if show_tokens else ""), fontsize=9)
    fig.supylabel("query position" + (":token" if show_tokens else ""), fontsize=9)
    return fig
