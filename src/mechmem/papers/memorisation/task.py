"""The facts task: memorise n random facts (t1, t2) -> label, read at the last position, full batch.

One example, n_in=32, n_out=16: tokens [13, 16] -> target [-, 0] with loss mask [0, 1]; the label is read at
position 1 only. Every batch is the whole fact set, whatever size is asked for (the published training is
full-batch), and evaluation is accuracy on the same facts: memorisation has no held-out set.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch

from mechmem.config import ConfigMixin
from mechmem.papers.memorisation.data import generate_facts
from mechmem.papers.memorisation.models import FactsModelConfig
from mechmem.tasks import register_task
from mechmem.tasks.base import Batch, PatchingPair, Task
from mechmem.training.config import Preset, TrainConfig


@dataclass(frozen=True)
class FactsTaskConfig(ConfigMixin):
    """Which published fact set to memorise."""

    n_facts: int = 128
    """Number of facts (at most n_in**2)."""
    n_in: int = 32
    """Input vocabulary size."""
    n_out: int = 16
    """Number of labels."""
    seed: int = 42
    """Seed of `generate_facts` (42 as published)."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_facts <= self.n_in**2:
            raise ValueError(f"n_facts must be in [1, n_in^2 = {self.n_in**2}], got {self.n_facts}")


def _preset(model: FactsModelConfig, n_facts: int, steps: int, description: str) -> Preset:
    train = TrainConfig(
        steps=steps, batch_size=n_facts, lr=1e-2, eval_every=max(1, steps // 4), eval_samples=n_facts
    )
    return Preset(model=model, task=FactsTaskConfig(n_facts=n_facts), train=train, description=description)


_BASE = FactsModelConfig()


@register_task
class FactsTask(Task):
    """Memorise the published fact set; full-batch, last-position read-out."""

    name = "facts"
    config_cls = FactsTaskConfig
    presets: ClassVar[dict[str, Preset]] = {
        "quick": _preset(
            _BASE.replace(mixing="2emb", mlp=False, norms=False),
            128,
            600,
            "2Emb without MLP or norms (d=16) memorising 128 facts",
        ),
        "attn": _preset(_BASE, 192, 3000, "learned attention + MLP + norms + bias (d=16), 192 facts"),
        "uniform": _preset(
            _BASE.replace(mixing="uniform"), 192, 3000, "uniform attention + MLP + norms, 192 facts"
        ),
        "2emb": _preset(
            _BASE.replace(mixing="2emb"), 192, 3000, "2Emb + MLP + norms + bias (d=16), 192 facts"
        ),
        "no-mlp": _preset(
            _BASE.replace(mixing="2emb", mlp=False, norms=False),
            200,
            5000,
            "2Emb without MLP or norms near its published capacity (208 facts)",
        ),
    }

    def __init__(self, config: FactsTaskConfig | dict) -> None:
        super().__init__(config)
        self.inputs, self.labels = generate_facts(
            self.config.n_facts, self.config.n_in, self.config.n_out, seed=self.config.seed
        )

    @property
    def d_vocab(self) -> int:
        return self.config.n_in

    @property
    def d_vocab_out(self) -> int:
        return self.config.n_out

    @property
    def seq_len(self) -> int:
        return 2

    def train_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        """All facts (n is ignored: training is full-batch)."""
        targets = torch.stack([torch.zeros_like(self.labels), self.labels], dim=1)
        mask = torch.tensor([0.0, 1.0]).expand(len(self.labels), 2).clone()
        return Batch(self.inputs.clone(), targets, mask)

    def patching_pair(self, n: int, *, generator: torch.Generator) -> PatchingPair:
        """Clean fact i against a fact j with another label (j drawn at random); both read at position 1."""
        m = len(self.labels)
        clean = torch.randint(0, m, (n,), generator=generator)
        other = torch.randint(0, m, (n,), generator=generator)
        for _ in range(32):  # resample partners that share the clean label
            same = self.labels[other] == self.labels[clean]
            if not bool(same.any()):
                break
            other[same] = torch.randint(0, m, (int(same.sum()),), generator=generator)
        keep = self.labels[other] != self.labels[clean]
        clean, other = clean[keep], other[keep]
        return PatchingPair(
            clean=self.inputs[clean],
            corrupted=self.inputs[other],
            answer_pos=torch.ones(len(clean), dtype=torch.long),
            correct=self.labels[clean],
            incorrect=self.labels[other],
        )

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, *, generator: torch.Generator, n: int = 2048
    ) -> dict[str, float]:
        """Loss and accuracy on all facts, and the number of facts stored (argmax correct)."""
        device = next(model.parameters()).device
        batch = self.train_batch(n, generator=generator).to(device)
        logits = model(batch.tokens)
        stored = int((logits[:, -1].argmax(-1) == batch.targets[:, -1]).sum())
        return {
            "eval_loss": float(self.loss(logits, batch)),
            "eval_acc": stored / len(batch),
            "facts_stored": float(stored),
        }

    def headline(self, metrics: dict) -> str:
        if "facts_stored" in metrics:
            return f"{int(metrics['facts_stored'])}/{self.config.n_facts} facts stored"
        return super().headline(metrics)
