"""Generic tasks that need nothing but a model's vocabulary and context, so any model can be analysed.

"repeats": random token sequences whose second half repeats the first, the standard probe for induction and
previous-token heads. With `half=4` and `d_vocab=10`, one sequence (r = 7 2 9 4) reads

    position   0  1  2  3  4  5  6  7
    tokens     7  2  9  4  7  2  9  4
    targets    2  9  4  7  2  9  4  0      (next token; the last one has none and is padding)
    loss_mask  0  0  0  0  1  1  1  0      (the predictable half: positions half to 2*half-2)

A model that has learnt induction predicts every masked target (accuracy 1); a unigram model gets 1 / d_vocab.
The patching pair corrupts the first copy of the answer: clean `7 2 9 4 7 2 9 4`, corrupted `7 2 9 5 7 2 9 4`,
answer read at position 6 (token 9): clean answer 4, corrupted answer 5.

`RepeatsConfig.for_model(model)` sizes the task to a model (its whole vocabulary, half its context or less).
"""

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from mechmem.config import ConfigMixin
from mechmem.errors import MechmemError
from mechmem.tasks.base import Batch, PatchingPair, Task
from mechmem.tasks.registry import register_task


@dataclass(frozen=True)
class RepeatsConfig(ConfigMixin):
    """Random sequences [r, r] of length 2 * half over tokens 0..d_vocab-1."""

    d_vocab: int = 64
    """Tokens are drawn from 0..d_vocab-1 (the model's vocabulary or a prefix of it)."""
    half: int = 16
    """Length of r; the model's inputs have length 2 * half (at most its context n_ctx)."""
    distinct: bool = True
    """Draw r without repeated tokens (when half < d_vocab), so every induction target is unambiguous."""

    def __post_init__(self) -> None:
        if self.d_vocab < 2 or self.half < 2:
            raise ValueError(f"d_vocab and half must be at least 2, got {self.d_vocab} and {self.half}")

    @classmethod
    def for_model(cls, model: Any, **overrides: Any) -> "RepeatsConfig":
        """The config that fits `model`: its whole vocabulary and half its context (at most that vocabulary
        - 1); a model with n_ctx < 4 or a vocabulary < 3 is refused with one line."""
        cfg = getattr(model, "cfg", None)
        if cfg is None or not hasattr(cfg, "d_vocab") or not hasattr(cfg, "n_ctx"):
            raise MechmemError(f"{type(model).__name__} has no cfg.d_vocab / cfg.n_ctx to size the task from")
        # Targets are input tokens, so the task's vocabulary is also bounded by a smaller output vocabulary.
        out = getattr(cfg, "d_vocab_out", None)
        vocab = min(int(cfg.d_vocab), int(out)) if isinstance(out, int) and out > 0 else int(cfg.d_vocab)
        half = min(int(cfg.n_ctx) // 2, vocab - 1)
        if half < 2:
            raise MechmemError(
                "the repeats task needs a model with context n_ctx >= 4 and input and output vocabularies "
                f"of at least 3 (this model: n_ctx {cfg.n_ctx}, d_vocab {cfg.d_vocab}, d_vocab_out {out})"
            )
        return cls(**{"d_vocab": vocab, "half": half, **overrides})


@register_task
class RepeatsTask(Task):
    """Predict the second copy of a random sequence (induction)."""

    name = "repeats"
    config_cls = RepeatsConfig
    presets: ClassVar[dict[str, Any]] = {}

    @property
    def d_vocab(self) -> int:
        return self.config.d_vocab

    @property
    def seq_len(self) -> int:
        return 2 * self.config.half

    def _draw(self, n: int, length: int, generator: torch.Generator) -> torch.Tensor:
        cfg = self.config
        if cfg.distinct and length <= cfg.d_vocab:
            return torch.rand(n, cfg.d_vocab, generator=generator).argsort(-1)[:, :length]
        return torch.randint(cfg.d_vocab, (n, length), generator=generator)

    def train_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        """n sequences [r, r] with next-token targets, masked to the predictable half."""
        h = self.config.half
        first = self._draw(n, h, generator)
        tokens = torch.cat([first, first], dim=1)
        targets = torch.cat([tokens[:, 1:], torch.zeros(n, 1, dtype=tokens.dtype)], dim=1)
        mask = torch.zeros(n, 2 * h)
        mask[:, h : 2 * h - 1] = 1.0
        return Batch(tokens, targets, mask)

    def patching_pair(self, n: int, *, generator: torch.Generator) -> PatchingPair:
        """Clean [r, r]; corrupted: the first copy of the answer r[-1] replaced by a token not in r."""
        h, vocab = self.config.half, self.config.d_vocab
        drawn = self._draw(n, h + 1, generator)
        clean = torch.cat([drawn[:, :h], drawn[:, :h]], dim=1)
        other = drawn[:, h]
        if not (self.config.distinct and h + 1 <= vocab):
            other = (clean[:, h - 1] + 1 + torch.randint(vocab - 1, (n,), generator=generator)) % vocab
        corrupted = clean.clone()
        corrupted[:, h - 1] = other
        answer_pos = torch.full((n,), 2 * h - 2)
        return PatchingPair(clean, corrupted, answer_pos, clean[:, h - 1].clone(), other.clone())
