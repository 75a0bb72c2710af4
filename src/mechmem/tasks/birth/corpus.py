"""Character unigram and bigram statistics of a text corpus (the "global" distributions of Bietti et al.).

The unigram pi_u counts every character, the bigram pi_b(.|i) every adjacent pair of the whole text; the
vocabulary is the sorted set of characters. The task ships the counts of tiny Shakespeare
(`tinyshakespeare_stats.json`), never the text itself.
"""

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.errors import MechmemError

SHIPPED = "tinyshakespeare_stats.json"
"""The shipped counts: a data file of this package (`mechmem.tasks.birth`)."""


@dataclass
class CorpusStats:
    """Unigram and bigram counts over a character vocabulary."""

    chars: str
    """The vocabulary, one character per token id (sorted)."""
    unigram: Int[Tensor, " d_vocab"]
    """How often each character occurs."""
    bigram: Int[Tensor, "d_vocab d_vocab"]
    """bigram[i, j]: how often character j follows character i."""
    source: str = ""
    """Where the counts came from (a file name)."""

    def __post_init__(self) -> None:
        n = len(self.chars)
        if self.unigram.shape != (n,) or self.bigram.shape != (n, n):
            raise ValueError(f"counts must have shapes ({n},) and ({n}, {n}) for {n} characters")
        if (self.unigram < 0).any() or (self.bigram < 0).any():
            raise ValueError("counts must be non-negative")

    @property
    def n_tokens(self) -> int:
        return len(self.chars)

    def unigram_probs(self) -> Float[Tensor, " d_vocab"]:
        """pi_u: normalised unigram counts (float64)."""
        u = self.unigram.double()
        return u / u.sum()

    def bigram_probs(self) -> Float[Tensor, "d_vocab d_vocab"]:
        """pi_b(j | i): rows of the bigram counts normalised (uniform for a character never followed)."""
        b = self.bigram.double()
        rows = b.sum(-1, keepdim=True)
        uniform = torch.full_like(b, 1.0 / self.n_tokens)
        return torch.where(rows > 0, b / rows.clamp_min(1.0), uniform)

    def token_names(self) -> list[str]:
        """Each token's character, made visible: "␣" for the space, an escape such as "\\n" for blanks."""
        return [
            c if c.isprintable() and not c.isspace() else ("␣" if c == " " else repr(c)[1:-1])
            for c in self.chars
        ]

    def decode(self, ids: list[int] | Tensor) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "chars": self.chars,
            "unigram": self.unigram.tolist(),
            "bigram": self.bigram.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "CorpusStats":
        try:
            counts = [torch.tensor(data[k], dtype=torch.long) for k in ("unigram", "bigram")]
            return cls(data["chars"], *counts, data.get("source", ""))
        except (KeyError, ValueError, TypeError) as exc:
            raise MechmemError(f"corpus statistics are malformed: {exc}") from None


def count_text(text: str, *, source: str = "") -> CorpusStats:
    """Count characters and adjacent character pairs of `text`."""
    if len(text) < 2:
        raise MechmemError("the corpus needs at least two characters")
    chars = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text], dtype=torch.long)
    n = len(chars)
    unigram = torch.bincount(ids, minlength=n)
    bigram = torch.bincount(ids[:-1] * n + ids[1:], minlength=n * n).view(n, n)
    return CorpusStats(chars=chars, unigram=unigram, bigram=bigram, source=source)


def stats_from_corpus(path: str | Path) -> CorpusStats:
    """Counts of the text file at `path` (UTF-8)."""
    path = Path(path)
    if not path.is_file():
        raise MechmemError(f"corpus file {path} does not exist")
    return count_text(path.read_text(encoding="utf-8"), source=path.name)


def load_stats(path: str | Path | None = None) -> CorpusStats:
    """Statistics from a JSON file of counts, a text corpus (any other suffix), or the shipped counts."""
    if path is None:
        text = resources.files(__package__).joinpath(SHIPPED).read_text(encoding="utf-8")
        return CorpusStats.from_dict(json.loads(text))
    path = Path(path)
    if path.suffix == ".json":
        if not path.is_file():
            raise MechmemError(f"statistics file {path} does not exist")
        return CorpusStats.from_dict(json.loads(path.read_text(encoding="utf-8")))
    return stats_from_corpus(path)
