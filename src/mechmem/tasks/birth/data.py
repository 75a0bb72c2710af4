"""The triggered-bigram sequences of Bietti et al. (2023), generated for a whole batch at once.

Each sequence has K trigger tokens q_1..q_K with output tokens o_1..o_K. The first token is drawn from the
unigram pi_u; afterwards a trigger is always followed by its output, and any other token i by a draw from the
global bigram pi_b(.|i). Triggers are either fixed (the K most frequent characters) or drawn per sequence from
pi_u without replacement; outputs are uniform over all N tokens (with replacement), drawn from pi_b(.|q_k)
("bigram"), or, for the out-of-distribution split ("ood"), uniform over the first 75% of token ids in training
and over the rest in testing.

A worked example, K=2, triggers (a, t) with outputs (b, s), T=12 (letters stand for token ids):

    sequence   x  a  b  e  t  s  n  a  b  o  t  s  e      (T + 1 tokens)
    tokens     x  a  b  e  t  s  n  a  b  o  t  s         (model input, positions 0..T-1)
    targets    a  b  e  t  s  n  a  b  o  t  s  e         (next token)
    counter    0  1  0  0  1  0  0  2  0  0  2  0         (occurrence number of the trigger at this input)
    head-only  .  .  .  .  .  .  .  1  .  .  1  .         (loss mask: counter >= 2)

"In-context" predictions are those with counter >= 2: the output has been seen after the same trigger earlier
in the sequence, so an induction head can copy it. Counter == 1 outputs are unpredictable (uniform outputs).

Everything but the Markov recursion is drawn for the whole [batch, position] grid at once; the recursion runs
as T batch-wide alias-method steps. `reference_sequences` is a per-token loop like the authors' generator.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.tasks.birth.corpus import CorpusStats

OUTPUT_MODES = ("uniform", "bigram", "ood")
SPLITS = ("train", "test")


@dataclass
class TriggerSequences:
    """A batch of triggered-bigram sequences with their latent triggers and outputs."""

    seq: Int[Tensor, "batch pos_plus_one"]
    """Tokens z_1..z_{T+1}; the model reads seq[:, :-1] and predicts seq[:, 1:]."""
    counter: Int[Tensor, "batch pos"]
    """For input position t: 0 if seq[:, t] is not a trigger, else its occurrence number (1, 2, ...)."""
    triggers: Int[Tensor, "batch n_triggers"]
    """The K trigger tokens of each sequence."""
    outputs: Int[Tensor, "batch n_triggers"]
    """The output token of each trigger."""

    def __post_init__(self) -> None:
        n, t1 = self.seq.shape
        if self.counter.shape != (n, t1 - 1):
            raise ValueError(f"counter must have shape ({n}, {t1 - 1})")
        if self.triggers.shape != self.outputs.shape or self.triggers.shape[0] != n:
            raise ValueError("triggers and outputs must both have shape [batch n_triggers]")


class TriggerSampler:
    """Samples triggered-bigram sequences from corpus statistics; all randomness from a `torch.Generator`."""

    def __init__(
        self,
        stats: CorpusStats,
        *,
        seq_len: int,
        n_triggers: int,
        fixed_triggers: bool,
        outputs: str = "uniform",
    ) -> None:
        if outputs not in OUTPUT_MODES:
            raise ValueError(f"outputs must be one of {OUTPUT_MODES}")
        if not 2 <= seq_len < 2**15:
            raise ValueError("seq_len must be in 2..32767")
        if not 1 <= n_triggers <= stats.n_tokens:
            raise ValueError(f"n_triggers must be in 1..{stats.n_tokens}")
        self.n_tokens = stats.n_tokens
        self.seq_len = seq_len
        self.n_triggers = n_triggers
        self.fixed_triggers = fixed_triggers
        self.outputs = outputs
        self.unigram = stats.unigram_probs()
        self.bigram = stats.bigram_probs()
        self.unigram_cdf = self.unigram.cumsum(0)
        prob, index = alias_tables(self.bigram)
        self.alias_prob, self.alias_index = prob.flatten(), index.flatten()
        self.n_train_tokens = int(0.75 * self.n_tokens)
        # Fixed triggers: the K most frequent tokens (ascending frequency, as the authors order them).
        self.fixed = torch.from_numpy(np.argsort(self.unigram.numpy(), kind="stable")[-n_triggers:].copy())

    def draw_triggers(self, n: int, generator: torch.Generator) -> Int[Tensor, "batch n_triggers"]:
        """Fixed triggers, or K distinct tokens per sequence from pi_u without replacement (Gumbel top-k)."""
        if self.fixed_triggers:
            return self.fixed.expand(n, -1).clone()
        u = torch.rand(n, self.n_tokens, generator=generator, dtype=torch.float64).clamp_min(1e-300)
        keys = self.unigram.log().expand(n, -1) - torch.log(-torch.log(u))
        return keys.topk(self.n_triggers, dim=-1).indices

    def draw_outputs(
        self, triggers: Int[Tensor, "batch n_triggers"], split: str, generator: torch.Generator
    ) -> Int[Tensor, "batch n_triggers"]:
        """One output per trigger: uniform, from pi_b(.|q_k), or from the OOD split's token range."""
        shape = triggers.shape
        if self.outputs == "uniform":
            return torch.randint(0, self.n_tokens, shape, generator=generator)
        if self.outputs == "bigram":
            rows = self.bigram[triggers.flatten()]
            return torch.multinomial(rows, 1, generator=generator).view(shape)
        if split == "train":
            return torch.randint(0, self.n_train_tokens, shape, generator=generator)
        return torch.randint(self.n_train_tokens, self.n_tokens, shape, generator=generator)

    def output_probs(
        self, triggers: Int[Tensor, " batch"], split: str = "train"
    ) -> Float[Tensor, "batch d_vocab"]:
        """The distribution `draw_outputs` draws each trigger's output from, one row per trigger: uniform over
        all tokens, pi_b(.|trigger), or uniform over the OOD split's token range."""
        if self.outputs == "bigram":
            return self.bigram[triggers].float()
        probs = torch.zeros(len(triggers), self.n_tokens)
        if self.outputs == "uniform":
            probs[:] = 1.0 / self.n_tokens
        elif split == "train":
            probs[:, : self.n_train_tokens] = 1.0 / self.n_train_tokens
        else:
            probs[:, self.n_train_tokens :] = 1.0 / (self.n_tokens - self.n_train_tokens)
        return probs

    def sample(self, n: int, *, generator: torch.Generator, split: str = "train") -> TriggerSequences:
        """`n` sequences of T+1 tokens with their occurrence counters."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}")
        triggers = self.draw_triggers(n, generator)
        outputs = self.draw_outputs(triggers, split, generator)
        rows = torch.arange(n).unsqueeze(1)
        # next_of[b, v] = the forced successor of v in sequence b, or -1 when v is not a trigger there.
        next_of = torch.full((n, self.n_tokens), -1, dtype=torch.long)
        next_of[rows, triggers] = outputs
        # All randomness up front: the first token, then for each step an alias-method column and coin.
        first = torch.rand(n, 1, generator=generator, dtype=torch.float64)
        column = torch.randint(0, self.n_tokens, (self.seq_len, n), generator=generator)
        coin = torch.rand(self.seq_len, n, generator=generator, dtype=torch.float64)
        cur = torch.searchsorted(self.unigram_cdf.expand(n, -1).contiguous(), first, right=True)
        cur = cur.squeeze(1).clamp_max(self.n_tokens - 1).numpy()
        # The Markov recursion: one batch-wide step per position, on numpy views of the torch draws.
        col, flip = column.numpy(), coin.numpy()
        keep_prob, alias = self.alias_prob.numpy(), self.alias_index.numpy()
        forced_flat = next_of.flatten().numpy()
        row_offset = np.arange(n) * self.n_tokens
        seq_np = np.empty((self.seq_len + 1, n), dtype=np.int64)
        seq_np[0] = cur
        for t in range(self.seq_len):
            cell = cur * self.n_tokens + col[t]
            sampled = np.where(flip[t] < keep_prob[cell], col[t], alias[cell])
            forced = forced_flat[row_offset + cur]
            cur = np.where(forced >= 0, forced, sampled)
            seq_np[t + 1] = cur
        seq = torch.from_numpy(seq_np.T.copy())
        counter = occurrence_counter(seq[:, :-1], triggers)
        return TriggerSequences(seq=seq, counter=counter, triggers=triggers, outputs=outputs)


def alias_tables(
    probs: Float[Tensor, "rows d_vocab"],
) -> tuple[Float[Tensor, "rows d_vocab"], Int[Tensor, "rows d_vocab"]]:
    """Walker/Vose alias tables per row: draw a column j uniformly, keep it w.p. prob[i, j], else index."""
    n_rows, n = probs.shape
    prob = torch.ones(n_rows, n, dtype=torch.float64)
    index = torch.arange(n).repeat(n_rows, 1)
    for i in range(n_rows):
        scaled = (probs[i].double() * n).tolist()
        small = [j for j in range(n) if scaled[j] < 1.0]
        large = [j for j in range(n) if scaled[j] >= 1.0]
        while small and large:
            lo, hi = small.pop(), large.pop()
            prob[i, lo] = scaled[lo]
            index[i, lo] = hi
            scaled[hi] += scaled[lo] - 1.0
            (small if scaled[hi] < 1.0 else large).append(hi)
    return prob, index


def occurrence_counter(
    tokens: Int[Tensor, "batch pos"], triggers: Int[Tensor, "batch n_triggers"]
) -> Int[Tensor, "batch pos"]:
    """0 where tokens[b, t] is not a trigger of the sequence, else that trigger's occurrences at <= t."""
    match = tokens.unsqueeze(1) == triggers.unsqueeze(2)  # [batch n_triggers pos]
    seen = match.to(torch.int16).cumsum(-1, dtype=torch.int16)  # counts fit: pos < 32768 is checked below
    return seen.masked_fill_(~match, 0).sum(1).long()


@dataclass
class TriggerOccurrences:
    """Where each trigger of each sequence first and second occurs among the inputs (0 where it does not)."""

    first: Int[Tensor, "batch n_triggers"]
    """Input position of the trigger's first occurrence."""
    second: Int[Tensor, "batch n_triggers"]
    """Input position of its second occurrence."""
    repeated: Bool[Tensor, "batch n_triggers"]
    """True where the trigger occurs at least twice (first and second are then both set)."""


def trigger_occurrences(
    tokens: Int[Tensor, "batch pos"], triggers: Int[Tensor, "batch n_triggers"]
) -> TriggerOccurrences:
    """The first and second input positions of every trigger in every sequence."""
    match = tokens.unsqueeze(1) == triggers.unsqueeze(2)  # [batch n_triggers pos]
    seen = match.long().cumsum(-1)
    first, second = match & (seen == 1), match & (seen == 2)
    return TriggerOccurrences(
        first=first.long().argmax(-1), second=second.long().argmax(-1), repeated=second.any(-1)
    )


def generation_speed(
    sampler: TriggerSampler, *, batch: int = 512, ref_seqs: int = 64, repeats: int = 3, seed: int = 0
) -> tuple[float, float]:
    """Sequences per second of `sampler.sample` and of `reference_sequences` (after one warm-up call each)."""
    gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)

    def rate(fn: Callable[[], object], n: int) -> float:
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return n * repeats / (time.perf_counter() - start)

    fast = rate(lambda: sampler.sample(batch, generator=gen), batch)
    slow = rate(lambda: reference_sequences(sampler, ref_seqs, rng=rng), ref_seqs)
    return fast, slow


def reference_sequences(
    sampler: TriggerSampler, n: int, *, rng: np.random.Generator, split: str = "train"
) -> TriggerSequences:
    """The same distribution, one token at a time with numpy, written like the authors' generator."""
    tok_range = np.arange(sampler.n_tokens)
    marginal = sampler.unigram.numpy()
    cond = sampler.bigram.numpy()
    seqs, counters, trigs, outs = [], [], [], []
    for _ in range(n):
        if sampler.fixed_triggers:
            idxs = [int(i) for i in sampler.fixed]
        else:
            idxs = [int(i) for i in rng.choice(tok_range, p=marginal, size=sampler.n_triggers, replace=False)]
        if sampler.outputs == "uniform":
            out = [int(rng.choice(tok_range)) for _ in idxs]
        elif sampler.outputs == "bigram":
            out = [int(rng.choice(tok_range, p=cond[i])) for i in idxs]
        elif split == "train":
            out = [int(rng.choice(tok_range[: sampler.n_train_tokens])) for _ in idxs]
        else:
            out = [int(rng.choice(tok_range[sampler.n_train_tokens :])) for _ in idxs]
        counts: dict[int, int] = {}
        seq = [int(rng.choice(tok_range, p=marginal))]
        counter = []
        while len(seq) < sampler.seq_len + 1:
            last = seq[-1]
            if last in idxs:
                seq.append(out[idxs.index(last)])
                counts[last] = counts.get(last, 0) + 1
                counter.append(counts[last])
            else:
                seq.append(int(rng.choice(tok_range, p=cond[last])))
                counter.append(0)
        seqs.append(seq)
        counters.append(counter)
        trigs.append(idxs)
        outs.append(out)
    return TriggerSequences(*(torch.tensor(x) for x in (seqs, counters, trigs, outs)))
