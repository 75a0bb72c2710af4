"""Associative-memory recall probes (Bietti et al. 2023, generalised).

A weight matrix W is read as an associative memory mapping each input embedding u_i to the output
embedding v_j of its target partner. With TransformerLens's row-vector convention the recall is

    R = mean_i [ argmax_j (u_i W v_j^T) == target(i) ]

If W is a sum of outer products over near-orthogonal embeddings, R = 1; a random W gives chance, about
1 / #outputs. Caveat: R only looks at the argmax, not the margin.

Built-in probes (`builtin_probes`): token copying through each head's OV circuit, previous-position and
earlier-head token keys through QK circuits, and MLP next-token memories against bigram statistics (KL,
as in Bietti et al.), with TL's `FactoredMatrix` keeping low-rank products factored. A probe read off
the weights is exact (no interval); an MLP probe against a table counted on sampled sequences
(`BigramSample`) gets 95% percentile bootstrap intervals over those sequences.
"""

from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.frames import concat, short_repr
from mechmem.analysis.stats import LEVEL, RESAMPLES
from mechmem.errors import BadArgument, BadArgumentType
from mechmem.models.backend import FactoredMatrix
from mechmem.models.checks import check_count, check_model, check_tokens, kind_of
from mechmem.models.parts import Head, model_device

PROBE_COLUMNS = ["probe", "matrix", "measure", "value", "lower", "upper", "n_inputs", "n_outputs"]
"""The columns of a probe's `to_dataframe`."""
EXACT = "exact: read off the weights over all probed tokens, no sampling, so no interval"
"""`ProbeResult.interval` of a probe that involves no sampled data."""


def recall_scores(
    inputs: Float[Tensor, "n_in d_in"],
    matrix: Float[Tensor, "d_in d_out"] | FactoredMatrix,
    outputs: Float[Tensor, "n_out d_out"],
) -> Float[Tensor, "n_in n_out"]:
    """Scores (u_i W) . v_j for every input i and output j. `matrix` may be a TL `FactoredMatrix`."""
    mapped = inputs @ matrix
    if not isinstance(mapped, Tensor):  # tensor @ FactoredMatrix stays factored
        mapped = mapped.AB
    return mapped @ outputs.T


def recall_rate(
    inputs: Float[Tensor, "n_in d_in"],
    matrix: Float[Tensor, "d_in d_out"] | FactoredMatrix,
    outputs: Float[Tensor, "n_out d_out"],
    targets: Int[Tensor, " n_in"],
) -> float:
    """Fraction of inputs whose highest-scoring output is their target."""
    scores = recall_scores(inputs, matrix, outputs)
    return float((scores.argmax(-1) == targets.to(scores.device)).float().mean())


# -- built-in probes on a HookedTransformer's weights -------------------------------------------------------
# Each probe reads one weight product as an associative memory. Norms and biases are left out (as in Bietti
# et al., whose model has neither); on models with LayerNorm they are approximate.


@dataclass
class ProbeResult:
    """One probe: its name, the matrix product it reads, its recall and the chance level 1 / #outputs."""

    name: str
    matrix: str
    recall: float
    n_inputs: int
    n_outputs: int
    extra: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """95% intervals of measures computed from sampled data ("recall", "kl"), by measure; empty when exact."""
    interval: str = EXACT
    """How the probe's numbers relate to sampling: `EXACT`, or how its intervals were computed."""

    @property
    def chance(self) -> float:
        return 1.0 / self.n_outputs

    def to_dataframe(self) -> Any:
        """One row per measure: `probe`, `matrix`, `measure` ("recall", "chance", then each number in
        `extra`), `value`, `lower` / `upper` (NaN for an exact measure), `n_inputs`, `n_outputs`."""
        import pandas as pd

        measures = {"recall": self.recall, "chance": self.chance}
        measures |= {
            k: v for k, v in self.extra.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        nan = (float("nan"), float("nan"))
        rows = [
            [self.name, self.matrix, measure, float(value), *self.intervals.get(measure, nan)]
            + [self.n_inputs, self.n_outputs]
            for measure, value in measures.items()
        ]
        return pd.DataFrame(rows, columns=PROBE_COLUMNS)

    def __repr__(self) -> str:
        return short_repr(
            "ProbeResult",
            repr(self.name),
            f"recall {self.recall:.3f} (chance {self.chance:.3f})",
            f"{self.n_inputs} inputs x {self.n_outputs} outputs",
            "exact" if not self.intervals else "95% intervals over sampled sequences",
        )

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("name", "matrix", "recall", "chance", "n_inputs", "n_outputs")}
        out |= self.extra
        for k, (lower, upper) in self.intervals.items():
            out |= {f"{k}_lower": lower, f"{k}_upper": upper}
        return out | {"interval": self.interval}


@dataclass
class MemoryProbes:
    """A list of probe results; `to_dict` is the `memory_probes.json` schema."""

    probes: list[ProbeResult]
    info: dict[str, Any] = field(default_factory=dict)

    def to_dataframe(self) -> Any:
        """Every probe's rows (`ProbeResult.to_dataframe`, columns `PROBE_COLUMNS`), probe after probe."""
        return concat([p.to_dataframe() for p in self.probes], PROBE_COLUMNS)

    def __repr__(self) -> str:
        above = sum(p.recall > p.chance for p in self.probes)
        best = max(self.probes, key=lambda p: p.recall, default=None)
        return short_repr(
            "MemoryProbes",
            f"{len(self.probes)} probes, {above} above chance",
            f"best {best.name} recall {best.recall:.3f}" if best else "",
            f"{len(self.info.get('skipped', []))} skipped" if self.info.get("skipped") else "",
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": "recall: fraction of inputs whose highest-scoring output is their target",
            "axes": {"probes": ["probe"]},
            "probes": [p.to_dict() for p in self.probes],
            **self.info,
        }


def _probe(
    name: str, matrix: str, inputs: Tensor, product: Any, outputs: Tensor, targets: Tensor
) -> ProbeResult:
    rate = recall_rate(inputs.detach(), product, outputs.detach(), targets)
    return ProbeResult(name, matrix, rate, inputs.shape[0], outputs.shape[0])


def _token_ids(model: torch.nn.Module, tokens: Int[Tensor, " n"] | None) -> Tensor:
    return (torch.arange(model.cfg.d_vocab) if tokens is None else tokens.cpu()).to(model_device(model))


@torch.no_grad()
def ov_copy_probe(
    model: torch.nn.Module, layer: int, head: int, tokens: Int[Tensor, " n"] | None = None
) -> ProbeResult:
    """Does head (layer, head)'s OV circuit copy tokens? The one definition of OV copy recall.

    For every probed token k (default: all), the scores W_E(k) W_V W_O W_U over all output tokens:
    recall is the fraction of k whose own logit is the highest, `extra["suppress_recall"]` the fraction
    whose own logit is the lowest. Direct path only (layer-0 embeddings).
    """
    ids = _token_ids(model, tokens)
    scores = recall_scores(model.W_E[ids].detach(), model.OV[layer, head], model.W_U.T.detach())
    name, matrix = f"ov_copy.{Head(layer, head)}", f"W_E W_V^{layer}.{head} W_O^{layer}.{head} W_U"
    recall = float((scores.argmax(-1) == ids).float().mean())
    suppress = float((scores.argmin(-1) == ids).float().mean())
    return ProbeResult(name, matrix, recall, len(ids), scores.shape[-1], {"suppress_recall": suppress})


@torch.no_grad()
def qk_previous_position_probe(
    model: torch.nn.Module, layer: int, head: int, n_positions: int | None = None
) -> ProbeResult:
    """Do positional keys point back one step: argmax_s p_t W_Q W_K^T p_s^T == t - 1 for t >= 1?"""
    n = model.cfg.n_ctx if n_positions is None else min(n_positions, model.cfg.n_ctx)
    suffix = "" if n == model.cfg.n_ctx else f".first{n}"
    name = f"qk_prev_pos.{Head(layer, head)}{suffix}"
    matrix = f"W_pos W_Q^{layer}.{head} W_K^{layer}.{head}T W_pos^T"
    queries, keys = model.W_pos[1:n], model.W_pos[: n - 1]
    return _probe(name, matrix, queries, model.QK[layer, head], keys, torch.arange(n - 1))


@torch.no_grad()
def qk_token_probe(
    model: torch.nn.Module,
    layer: int,
    head: int,
    source: tuple[int, int],
    tokens: Int[Tensor, " n"] | None = None,
) -> ProbeResult:
    """Keys written by an earlier head's OV (the induction head's key memory):
    argmax_k' [W_E(k) W_Q W_K^T (W_E(k') OV_source)^T] == k."""
    ids = _token_ids(model, tokens)
    sl, sh = source
    keys = (model.W_E[ids] @ model.OV[sl, sh]).AB
    name = f"qk_token.{Head(layer, head)}<-{Head(sl, sh)}"
    matrix = f"W_E W_Q^{layer}.{head} W_K^{layer}.{head}T (W_E W_V^{sl}.{sh} W_O^{sl}.{sh})^T"
    return _probe(name, matrix, model.W_E[ids], model.QK[layer, head], keys, torch.arange(len(ids)))


@torch.no_grad()
def ffn_bigram_probe(
    model: torch.nn.Module,
    layer: int,
    bigram: "Float[Tensor, 'd_vocab d_vocab_out'] | BigramSample",
    tokens: Int[Tensor, " n"] | None = None,
) -> ProbeResult:
    """Does MLP `layer` store next-token statistics? Compares softmax(MLP(W_E(k)) W_U) with bigram(. | k).

    Recall: the fraction of tokens k whose top prediction is the bigram's most likely successor; `kl`
    (in `extra`): the mean over k of KL(bigram(. | k) || softmax(MLP(W_E(k)) W_U)). Given a
    `BigramSample`, recall and KL get 95% bootstrap intervals (`BigramSample.intervals`).
    """
    ids = _token_ids(model, tokens)
    logp = ffn_logprobs(model, layer, ids)
    sample = bigram if isinstance(bigram, BigramSample) else None
    table = sample.table(model.cfg.d_vocab, model.cfg.d_vocab_out) if sample is not None else bigram
    recall, kl = bigram_agreement(logp, table.to(logp.device)[ids])
    result = ProbeResult(
        f"ffn_bigram.L{layer}", f"W_E MLP^{layer} W_U vs bigram", recall, len(ids), logp.shape[-1], {"kl": kl}
    )
    if sample is None:
        result.interval = (
            "exact given the bigram table (a BigramSample counts it on sequences, with intervals)"
        )
    else:
        result.intervals = sample.intervals(logp, ids, model.cfg.d_vocab)
        result.interval = (
            f"95% percentile bootstrap over the {len(sample.tokens)} sequences the bigram table was counted "
            f"on ({RESAMPLES} resamples, the table recounted on each)"
        )
    return result


def ffn_logprobs(
    model: torch.nn.Module, layer: int, ids: Int[Tensor, " n"]
) -> Float[Tensor, "n d_vocab_out"]:
    """log softmax(MLP^layer(W_E(k)) W_U) for each token k in `ids`: what the MLP alone predicts next."""
    hidden = model.blocks[layer].mlp(model.W_E[ids].unsqueeze(0)).squeeze(0)
    return (hidden @ model.W_U).float().log_softmax(-1)


def bigram_agreement(
    logp: Float[Tensor, "n d_vocab_out"], target: Float[Tensor, "n d_vocab_out"]
) -> tuple[float, float]:
    """(recall, mean KL): the fraction of rows whose argmax agrees with the target's, and the mean over
    rows of KL(target || exp(logp)), each target row normalised to sum to 1."""
    target = target.float()
    target = target / target.sum(-1, keepdim=True).clamp_min(1e-12)
    kl = (target * (target.clamp_min(1e-12).log() - logp)).sum(-1)
    return float((logp.argmax(-1) == target.argmax(-1)).float().mean()), float(kl.mean())


@dataclass(frozen=True)
class BigramSample:
    """Sampled sequences a bigram table is counted on: inputs and their next-token targets, [batch pos]."""

    tokens: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]

    def table(
        self, d_vocab: int, d_vocab_out: int, weights: Float[Tensor, " batch"] | None = None
    ) -> Float[Tensor, "d_vocab d_vocab_out"]:
        """The table counted on the sequences (`empirical_bigram`), each counted `weights` times."""
        return empirical_bigram(self.tokens, self.targets, d_vocab, d_vocab_out, weights=weights)

    def intervals(
        self,
        logp: Float[Tensor, "n d_vocab_out"],
        ids: Int[Tensor, " n"],
        d_vocab: int,
        *,
        resamples: int = RESAMPLES,
    ) -> dict[str, tuple[float, float]]:
        """95% percentile bootstrap intervals of `bigram_agreement`'s recall and KL of `logp` for tokens
        `ids`, resampling the sequences (seeded with 0) and recounting the table."""
        n = len(self.tokens)
        gen = torch.Generator().manual_seed(0)
        draws = torch.randint(n, (resamples, n), generator=gen)
        stats = []
        for draw in draws:
            weights = torch.bincount(draw, minlength=n).float()
            table = self.table(d_vocab, logp.shape[-1], weights).to(logp.device)
            stats.append(bigram_agreement(logp, table[ids]))
        q = torch.tensor([(1 - LEVEL) / 2, (1 + LEVEL) / 2], dtype=torch.float64)
        bounds = torch.quantile(torch.tensor(stats, dtype=torch.float64), q, dim=0)  # [2, measure]
        return {name: (float(bounds[0, i]), float(bounds[1, i])) for i, name in enumerate(("recall", "kl"))}


def empirical_bigram(
    tokens: Int[Tensor, "batch pos"],
    targets: Int[Tensor, "batch pos"],
    d_vocab: int,
    d_vocab_out: int,
    *,
    weights: Float[Tensor, " batch"] | None = None,
) -> Float[Tensor, "d_vocab d_vocab_out"]:
    """Next-token distribution given the current token, counted over all positions (each sequence `weights`
    times); uniform for unseen tokens."""
    counts = torch.zeros(d_vocab * d_vocab_out)
    each = (
        torch.ones(tokens.shape) if weights is None else weights.float().cpu()[:, None].expand(tokens.shape)
    )
    counts.index_add_(0, (tokens.flatten() * d_vocab_out + targets.flatten()).cpu(), each.reshape(-1))
    counts = counts.view(d_vocab, d_vocab_out)
    seen = counts.sum(-1, keepdim=True)
    return torch.where(seen > 0, counts / seen.clamp_min(1), torch.full_like(counts, 1.0 / d_vocab_out))


def builtin_probes(
    model: torch.nn.Module,
    *,
    bigram: "Float[Tensor, 'd_vocab d_vocab_out'] | BigramSample | None" = None,
    tokens: Int[Tensor, " n"] | None = None,
    key_tokens: Int[Tensor, " n_keys"] | None = None,
    ffn_tokens: Int[Tensor, " n_ffn"] | None = None,
    first_positions: tuple[int, ...] = (),
) -> MemoryProbes:
    """Every built-in probe that applies to `model`: OV copying and previous-position keys for each head,
    token keys through each earlier head's OV, and (given `bigram`) each MLP against it.

    Args:
        bigram: next-token statistics [d_vocab d_vocab_out], or a `BigramSample` (then with intervals).
        tokens: tokens the OV copying probes range over (default: all).
        key_tokens: tokens of the QK token-key probes (default: `tokens`).
        ffn_tokens: tokens of the MLP probes (default: `tokens`).
        first_positions: extra previous-position probes restricted to the first n positions (an n of 2 or
            less, or the whole context or more, adds none: the unrestricted probe covers it).

    Example:
        >>> import mechmem
        >>> probes = mechmem.builtin_probes(mechmem.planted_induction_model())
        >>> recall = {p.name: round(p.recall, 2) for p in probes.probes}
        >>> recall["qk_prev_pos.L0H2"]     # L0H2's keys select the previous position
        1.0
    """
    check_model(model)
    cfg = model.cfg
    tokens, key_tokens, ffn_tokens = (
        None if ids is None else check_tokens(model, ids, name, ndim=1)
        for name, ids in (("tokens", tokens), ("key_tokens", key_tokens), ("ffn_tokens", ffn_tokens))
    )
    for n in first_positions:
        check_count("first_positions", n)
    table = (cfg.d_vocab, cfg.d_vocab_out)
    if isinstance(bigram, Tensor) and tuple(bigram.shape) != table:
        raise BadArgument(f"bigram must be [d_vocab d_vocab_out] = {table}, got {tuple(bigram.shape)}")
    if bigram is not None and not isinstance(bigram, (Tensor, BigramSample)):
        raise BadArgumentType(
            f"bigram must be a [d_vocab d_vocab_out] tensor or a BigramSample, got {kind_of(bigram)}"
        )
    key_tokens = tokens if key_tokens is None else key_tokens
    ffn_tokens = tokens if ffn_tokens is None else ffn_tokens
    probes: list[ProbeResult] = []
    skipped: list[str] = []
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            if cfg.d_vocab_out == cfg.d_vocab:
                probes.append(ov_copy_probe(model, layer, head, tokens))
            if cfg.positional_embedding_type == "standard" and cfg.n_ctx > 2:  # >= 2 candidate keys
                probes.append(qk_previous_position_probe(model, layer, head))
                for n in first_positions:
                    if 2 < n < cfg.n_ctx:
                        probes.append(qk_previous_position_probe(model, layer, head, n))
            for src in range(layer):
                for src_head in range(cfg.n_heads):
                    probes.append(qk_token_probe(model, layer, head, (src, src_head), key_tokens))
        if not cfg.attn_only:
            if bigram is not None:
                probes.append(ffn_bigram_probe(model, layer, bigram, ffn_tokens))
            else:
                skipped.append(f"ffn_bigram.L{layer} (no bigram statistics)")
    if cfg.d_vocab_out != cfg.d_vocab:
        skipped.append("ov_copy (input and output vocabularies differ)")
    return MemoryProbes(probes, {"skipped": skipped} if skipped else {})


def plot_probes(result: MemoryProbes) -> Any:
    """Horizontal bars of recall per probe, with each probe's chance level marked; returns the Figure."""
    from mechmem.plotting import plt

    names = [p.name for p in result.probes]
    fig, ax = plt.subplots(figsize=(6, 0.28 * len(names) + 1.2), layout="constrained")
    y = list(range(len(names)))
    ax.barh(y, [p.recall for p in result.probes], color="tab:blue", label="recall")
    ax.scatter([p.chance for p in result.probes], y, color="k", marker="|", s=80, label="chance", zorder=3)
    ax.set(yticks=y, yticklabels=names, xlim=(0, 1.02), xlabel="recall")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    return fig
