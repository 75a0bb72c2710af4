"""Permutation memory ("Can a Tiny Transformer Learn to Remember?").

Each sequence shows one secret permutation y = sigma(x) of the tokens 1..V as V interleaved (x, y) pairs in a
random x order. The model must predict every y from its x and the pairs before it. With V = 3 and sigma =
(1->3, 2->1, 3->2):

    seq      x1=2  y1=1  x2=3  y2=2  x3=1  y3=3
    inputs   2     1     3     2     1               (seq[:-1])
    targets  1     3     2     1     3               (seq[1:])
    mask     1     0     1     0     1               (predict a y: even input positions)

Token 0 is never used (padding), so the vocabulary has V + 1 entries. All V! permutations are split once into
disjoint train (80%) and test (20%) mappings; the model can therefore not know a test mapping and the best it
can do is reason from the prefix (the Bayesian posterior below). In the repeat variant, with probability
`repeat_ratio` the last x is replaced by a copy of an earlier x (same mapping, so its y repeats): answering it
needs recall.

Bayesian posterior of an answer given its prefix (uniform prior over permutations): conditioned on the pairs
seen so far, the unseen part of the mapping is a uniform random bijection between the unseen x's and the
unused y's. Hence for the answer to x_k:
    - if x_k appeared before as x_j (a repeat), the posterior is a point mass on y_j;
    - otherwise it is uniform over the y values not yet used, i.e. 1 / (V - #distinct y's seen) each.
Without repeats step k therefore has V - k + 1 candidates and the masked loss of a Bayes-optimal model is
(ln V + ln(V-1) + ... + ln 1) / V (0.957 for V = 5): the "elimination floor".
"""

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.config import ConfigMixin, Preset, TrainConfig
from mechmem.models.parts import model_device
from mechmem.tasks.base import Batch, PatchingPair, RoleProbe, Task, masked_cross_entropy
from mechmem.tasks.registry import register_task

ENUMERATE_UP_TO = 8
"""V! permutations are listed explicitly up to V = 8 (40,320); beyond, a hash decides the split."""


@dataclass(frozen=True)
class PermutationConfig(ConfigMixin):
    """The permutation memory task."""

    vocab_size: int = 5
    """V: tokens 1..V are permuted; token 0 is padding."""
    repeat_ratio: float = 0.0
    """Probability that the last x repeats an earlier x (0 for Task 1, 0.3 for Task 2)."""
    train_fraction: float = 0.8
    """Share of all permutations used as training mappings; the rest are test mappings."""
    split_seed: int = 0
    """Seed of the one fixed train/test split of permutations."""
    epoch_size: int = 100_000
    """Samples per epoch (for paper presets: steps = epochs * epoch_size / batch_size)."""

    def __post_init__(self) -> None:
        if self.vocab_size < 2:
            raise ValueError("vocab_size must be at least 2")
        if not 0.0 <= self.repeat_ratio <= 1.0:
            raise ValueError("repeat_ratio must lie in [0, 1]")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError("train_fraction must lie in (0, 1)")


def elimination_floor(vocab_size: int) -> float:
    """Masked loss of the Bayes-optimal model without repeats: sum_k ln(k) / V."""
    return sum(math.log(k) for k in range(1, vocab_size + 1)) / vocab_size


def bayes_posterior(tokens: Int[Tensor, "batch pos"], vocab_size: int) -> Float[Tensor, "batch step d_vocab"]:
    """Exact posterior of each answer y_k given the prefix; answer step k is read at input position 2k."""
    batch, pos = tokens.shape
    n_steps = (pos + 1) // 2
    xs = tokens[:, 0::2]
    ys = torch.zeros(batch, n_steps, dtype=tokens.dtype, device=tokens.device)
    ys[:, : pos // 2] = tokens[:, 1::2]
    post = torch.zeros(batch, n_steps, vocab_size + 1, device=tokens.device)
    for k in range(n_steps):
        used = torch.zeros(batch, vocab_size + 1, dtype=torch.bool, device=tokens.device)
        used.scatter_(1, ys[:, :k], True)
        used[:, 0] = True
        free = (~used).float()
        post[:, k] = free / free.sum(-1, keepdim=True).clamp_min(1.0)  # uniform over the unused y's
        if k:
            match = xs[:, :k] == xs[:, k : k + 1]  # earlier occurrences of this x
            recalled = ys.gather(1, match.float().argmax(-1, keepdim=True))
            point = torch.zeros_like(post[:, k]).scatter_(1, recalled, 1.0)
            post[:, k] = torch.where(match.any(-1, keepdim=True), point, post[:, k])
    return post


@register_task
class PermutationTask(Task):
    """Predict each y of an interleaved permutation from its x and the pairs before it."""

    name = "permutation"
    config_cls = PermutationConfig
    presets: ClassVar[dict[str, Preset]] = {}

    def __init__(self, config: Any = None) -> None:
        super().__init__(config if config is not None else PermutationConfig())
        v = self.config.vocab_size
        split = torch.Generator().manual_seed(self.config.split_seed)
        if v <= ENUMERATE_UP_TO:
            table = torch.tensor(list(itertools.permutations(range(1, v + 1))), dtype=torch.long)
            table = table[torch.randperm(len(table), generator=split)]
            n_train = round(self.config.train_fraction * len(table))
            self.mappings = {"train": table[:n_train], "test": table[n_train:]}
        else:
            self.mappings = {}
            self._hash_weights = torch.randint(1, 2**31 - 1, (v,), generator=split, dtype=torch.long)

    # -- vocabulary and shapes --------------------------------------------------------------------------
    @property
    def d_vocab(self) -> int:
        return self.config.vocab_size + 1

    @property
    def seq_len(self) -> int:
        return 2 * self.config.vocab_size - 1

    def token_names(self) -> list[str]:
        """The symbols 1..V every x and y is drawn from, after "pad" (token 0, never used)."""
        return ["pad", *(str(v) for v in range(1, self.config.vocab_size + 1))]

    @property
    def answer_positions(self) -> Int[Tensor, " step"]:
        """Input positions whose target is a y (x positions)."""
        return torch.arange(0, self.seq_len, 2)

    # -- sampling ---------------------------------------------------------------------------------------
    def _in_train(self, perms: Int[Tensor, "n V"]) -> Tensor:
        h = ((perms * self._hash_weights).sum(-1) % 1_000_003).float() / 1_000_003
        return h < self.config.train_fraction

    def sample_mappings(self, n: int, split: str, *, generator: torch.Generator) -> Int[Tensor, "n V"]:
        """n permutations (row i: the y of x = 1..V) drawn uniformly from the train or test mappings."""
        if split not in ("train", "test"):
            raise ValueError("split must be 'train' or 'test'")
        if self.mappings:
            table = self.mappings[split]
            return table[torch.randint(len(table), (n,), generator=generator)]
        out = torch.empty(0, self.config.vocab_size, dtype=torch.long)
        while len(out) < n:
            cand = torch.rand(2 * n, self.config.vocab_size, generator=generator).argsort(-1) + 1
            keep = self._in_train(cand) == (split == "train")
            out = torch.cat([out, cand[keep]])
        return out[:n]

    def sequences(
        self, n: int, *, generator: torch.Generator, split: str = "train", repeat_ratio: float | None = None
    ) -> tuple[Int[Tensor, "n seq"], Tensor]:
        """Full sequences x1 y1 ... xV yV and a bool [n] marking those whose last x repeats an earlier one."""
        v = self.config.vocab_size
        ratio = self.config.repeat_ratio if repeat_ratio is None else repeat_ratio
        perms = self.sample_mappings(n, split, generator=generator)
        xs = torch.rand(n, v, generator=generator).argsort(-1) + 1
        repeat = torch.rand(n, generator=generator) < ratio
        source = torch.randint(v - 1, (n,), generator=generator)
        xs[:, -1] = torch.where(repeat, xs.gather(1, source[:, None]).squeeze(1), xs[:, -1])
        ys = perms.gather(1, xs - 1)
        return torch.stack([xs, ys], -1).reshape(n, 2 * v), repeat

    def _batch(self, seq: Tensor, repeat: Tensor) -> Batch:
        mask = torch.zeros(seq.shape[0], self.seq_len)
        mask[:, 0::2] = 1.0
        return Batch(seq[:, :-1], seq[:, 1:], mask, {"repeat": repeat})

    def train_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        return self._batch(*self.sequences(n, generator=generator, split="train"))

    def eval_batch(self, n: int, *, generator: torch.Generator, split: str = "test") -> Batch:
        return self._batch(*self.sequences(n, generator=generator, split=split))

    def probe(self, n: int, *, generator: torch.Generator, split: str = "test") -> dict[str, Tensor]:
        """Probe sequences: keep V-1 pairs of a real sequence and set the last x to a copy of x1.

        Returns `tokens` (the probe inputs), `original` (the unmodified inputs), `recall` (x1's y, already
        used) and `elimination` (the one unused y), each answer read at the last input position.
        """
        seq, _ = self.sequences(n, generator=generator, split=split, repeat_ratio=0.0)
        original = seq[:, :-1]
        tokens = original.clone()
        tokens[:, -1] = tokens[:, 0]
        return {"tokens": tokens, "original": original, "recall": seq[:, 1], "elimination": seq[:, -1]}

    def patching_pair(self, n: int, *, generator: torch.Generator) -> PatchingPair:
        """Clean: a probe (last x repeats x1, answer x1's y); corrupted: the true last x (answer unused y)."""
        p = self.probe(n, generator=generator)
        pos = torch.full((n,), self.seq_len - 1, dtype=torch.long)
        return PatchingPair(p["tokens"], p["original"], pos, p["recall"], p["elimination"])

    def role_probes(self, n: int, *, generator: torch.Generator) -> list[RoleProbe]:
        """Counterfactual pairs that change only the information one role needs, answered at the last x.

        Recall: the last x repeats x_j (answer y_j); its counterfactual repeats another earlier x_i (answer
        y_i); the used y's are the same in both; a recall head attends to the matching x_j or the y_j after
        it. Elimination: a sequence without repeat (answer: the unused y u); its counterfactual writes u in
        place of one earlier y_j, so y_j becomes the unused one; the last x and the x positions are the same
        in both; an elimination head attends to the earlier y's. Both counterfactuals are valid sequences of
        some permutation.
        """
        v = self.config.vocab_size
        seq, _ = self.sequences(n, generator=generator, split="test", repeat_ratio=0.0)
        rows = torch.arange(n)
        j = torch.randint(v - 1, (n,), generator=generator)
        # another earlier pair, i != j
        i = (j + 1 + torch.randint(v - 2, (n,), generator=generator)) % (v - 1)
        tokens = seq[:, :-1]
        clean, counter = tokens.clone(), tokens.clone()
        clean[:, -1], counter[:, -1] = seq[rows, 2 * j], seq[rows, 2 * i]
        pos = torch.full((n,), self.seq_len - 1, dtype=torch.long)
        recall = PatchingPair(clean, counter, pos, seq[rows, 2 * j + 1], seq[rows, 2 * i + 1])
        bound = torch.zeros_like(tokens, dtype=torch.bool)
        bound[rows, 2 * j] = True
        bound[rows, 2 * j + 1] = True
        swapped = tokens.clone()
        swapped[rows, 2 * j + 1] = seq[:, -1]
        elimination = PatchingPair(tokens.clone(), swapped, pos, seq[:, -1], seq[rows, 2 * j + 1])
        earlier_y = torch.zeros_like(tokens, dtype=torch.bool)
        earlier_y[:, 1::2] = True
        return [RoleProbe("recall", recall, bound), RoleProbe("elimination", elimination, earlier_y)]

    def optimal_loss(self, batch: Batch) -> float | None:
        """Masked loss of the exact Bayes posterior (uniform prior over permutations) on `batch`."""
        post = bayes_posterior(batch.tokens, self.config.vocab_size)
        p = post.gather(-1, batch.targets[:, 0::2, None]).squeeze(-1)
        return float(-p.clamp_min(1e-12).log().mean())

    # -- scoring ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, *, generator: torch.Generator, n: int = 5000
    ) -> dict[str, float]:
        """Losses on train and test mappings, per-step accuracy (against the targets), Bayes error, probes."""
        device = model_device(model)
        out: dict[str, float] = {}
        for split in ("train", "test"):
            batch = self.eval_batch(n, generator=generator, split=split).to(device)
            logits = model(batch.tokens)
            out[f"{split}_loss"] = float(masked_cross_entropy(logits, batch.targets, batch.loss_mask))
            if split == "test":
                stats = answer_stats(logits, batch, self.config.vocab_size)
                out.update({k: float(v) for k, v in stats.items() if v.ndim == 0})
        probe = self.probe(n, generator=generator)
        probs = model(probe["tokens"].to(device))[:, -1].softmax(-1).cpu()
        rows = torch.arange(n)
        out["probe_recall_p"] = float(probs[rows, probe["recall"]].mean())
        out["probe_elimination_p"] = float(probs[rows, probe["elimination"]].mean())
        return out

    def headline(self, metrics: dict[str, Any]) -> str:
        parts = []
        if "test_final_acc" in metrics:
            parts.append(f"final-step acc {metrics['test_final_acc']:.3f}")
        if "train_loss" in metrics:
            parts.append(
                f"train loss {metrics['train_loss']:.3f} "
                f"(floor {elimination_floor(self.config.vocab_size):.3f})"
            )
        if "probe_recall_p" in metrics:
            parts.append(f"probe p(recall) {metrics['probe_recall_p']:.3f}")
        return ", ".join(parts)


def answer_stats(
    logits: Float[Tensor, "batch pos d_vocab"], batch: Batch, vocab_size: int
) -> dict[str, Tensor]:
    """Accuracy, mass on already-used answers and Bayes error at each answer step.

    Used mass: probability the model puts on y values the posterior rules out (already used, and not a
    recalled answer), averaged over sequences per step; `test_used_mass_max` is its maximum over steps. Bayes
    error: for each answer position, |p_model(t) - p_bayes(t)| over all d_vocab tokens t; `bayes_mae` is the
    mean over sequences, steps and tokens, `bayes_max_err` the maximum.
    """
    probs = logits[:, 0::2].float().softmax(-1)
    targets = batch.targets[:, 0::2]
    post = bayes_posterior(batch.tokens, vocab_size).to(probs.device)
    acc = (probs.argmax(-1) == targets).float().mean(0)
    # Mass on y values that are already used and are not the answer (zero under the posterior for every step).
    impossible = (post == 0).float()
    impossible[..., 0] = 0.0
    used_mass = (probs * impossible).sum(-1)
    err = (probs - post).abs()
    return {
        "step_acc": acc,
        "step_used_mass": used_mass.mean(0),
        "step_bayes_mae": err.mean((0, 2)),
        "test_final_acc": acc[-1],
        "test_used_mass_max": used_mass.mean(0).max(),
        "bayes_mae": err.mean(),
        "bayes_max_err": err.max(),
    }


def _preset(d: int, heads: int, train: TrainConfig, note: str, *, v: int = 5, repeat: float = 0.0) -> Preset:
    """A d-wide model with `heads` heads (one layer for V = 5, two beyond) on the task with vocabulary `v`."""
    from mechmem.models.transformer_config import TransformerConfig

    model = TransformerConfig(
        n_layers=1 if v == 5 else 2, d_model=d, n_heads=heads, d_mlp=2 * d, d_vocab=v + 1, n_ctx=2 * v - 1
    )
    return Preset(model, PermutationConfig(vocab_size=v, repeat_ratio=repeat), train, note)


def _train(steps: int, lr: float, every: int = 5000, samples: int = 5000) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=128, lr=lr, eval_every=every, eval_samples=samples)


# CPU presets: more, larger steps than the page's schedule, annealed so that Adam settles.
QUICK_TRAIN = dataclasses.replace(_train(20_000, 3e-3, 2000), schedule="cosine", min_lr_ratio=0.05)
# The demo's Task 1 preset: task1-quick stopped once its circuit has formed (docs/record/2026-11-29-demo.md).
DEMO_TASK1_TRAIN = dataclasses.replace(QUICK_TRAIN, steps=4_000, eval_every=1_000, eval_samples=2_000)
_PAPER_STEPS = 50 * 100_000 // 128
"""50 epochs of the paper's 100k samples in batches of 128 (the published batch size is unknown)."""


_task1 = functools.partial(_preset, 16, 1)
"""Task 1's model (d=16, one head) on the task without repeats."""
_task2 = functools.partial(_preset, 32, 2, repeat=0.3)
"""Task 2's model (d=32, two heads) on the task with repeat ratio 0.3."""


def _scale_preset(v: int, d: int, heads: int, steps: int, lr: float, note: str) -> Preset:
    return _preset(d, heads, _train(steps, lr, steps // 10, 2000), note, v=v, repeat=0.3)


PermutationTask.presets |= {
    "task1-demo": _task1(
        DEMO_TASK1_TRAIN, "Task 1 for the demo: task1-quick stopped at 4,000 steps (cosine over those)"
    ),
    "task1-quick": _task1(
        QUICK_TRAIN, "Task 1 on CPU: d=16, 1 head, no repeats, Adam 3e-3 with cosine decay"
    ),
    "task2-quick": _task2(
        QUICK_TRAIN, "Task 2 on CPU: d=32, 2 heads, repeat 0.3, Adam 3e-3 with cosine decay"
    ),
    "task1-paper": _task1(
        _train(20 * 100_000 // 128, 1e-3),
        "Task 1 as published: 20 epochs of 100k samples, Adam 1e-3 (batch size unknown: 128)",
    ),
    "task2-paper": _task2(
        _train(_PAPER_STEPS, 1e-3),
        "Task 2 as published: 50 epochs of 100k samples, Adam 1e-3, repeat 0.3 (batch size unknown: 128)",
    ),
    # Larger vocabularies (the page's V = 10 and V = 15 experiments).
    "v10-quick": _scale_preset(10, 64, 4, 6_000, 3e-3, "V=10 on CPU: d=64, 4 heads, 2 layers, repeat 0.3"),
    "v15-quick": _scale_preset(15, 64, 4, 12_000, 3e-3, "V=15 on CPU: d=64, 4 heads, 2 layers, repeat 0.3"),
    "v10-paper": _scale_preset(
        10, 128, 4, _PAPER_STEPS, 1e-3, "V=10, GPU-sized: d=128, 4 heads, 2 layers, 50 epochs of 100k"
    ),
    "v15-paper": _scale_preset(
        15, 256, 8, _PAPER_STEPS, 1e-3, "V=15, GPU-sized: d=256, 8 heads, 2 layers, 50 epochs of 100k"
    ),
}
SCALE_PRESET_NAMES = ("v10-quick", "v15-quick", "v10-paper", "v15-paper")
