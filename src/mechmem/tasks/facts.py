"""The facts task: memorise n random facts (t1, t2) -> label, read at the last position, full batch.

One example, n_in=32, n_out=16: tokens [13, 16] -> target [-, 0] with loss mask [0, 1]; the label is read at
position 1 only. Every batch is the whole fact set, whatever size is asked for (the published training is
full-batch), and evaluation is accuracy on the same facts: memorisation has no held-out set.

The fact set: random distinct input pairs with labels spread evenly over the outputs.

Rule (Linsefors & Bushnaq, `models.generate_facts`): enumerate all n_in^2 ordered pairs (t1, t2) in
lexicographic order, shuffle them with `torch.randperm` from a generator seeded `seed`, keep the first
n_facts, give fact i the label i % n_out, then sort the facts by label. Worked example, n_in=2, n_out=2,
n_facts=3, seed=42: randperm(4) = [2, 3, 0, 1] picks pairs (1,0), (1,1), (0,0) with labels 0, 1, 0; sorted by
label the inputs are [[1,0], [0,0], [1,1]] and the labels [0, 0, 1].

A CUDA generator gives a different permutation from a CPU one with the same seed: `device` chooses it
(default "cpu"); results record it as `facts_device`.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.config import ConfigMixin, Preset, TrainConfig
from mechmem.errors import MechmemError
from mechmem.models.facts import FactsModelConfig
from mechmem.models.parts import model_device
from mechmem.tasks.base import Batch, PatchingPair, Task
from mechmem.tasks.registry import register_task


def fact_sequence(
    n_facts: int, n_in: int, n_out: int, seed: int = 42, *, device: str = "cpu"
) -> tuple[Int[Tensor, "n_facts 2"], Int[Tensor, " n_facts"]]:
    """The published facts in the order they are drawn, before the sort by label; on CPU.

    The set of `generate_facts(n)` is the first n of these. Arguments and errors as in `generate_facts`.
    """
    if n_in < 1 or n_out < 1 or n_facts < 1:
        raise MechmemError(f"n_facts, n_in and n_out must be positive, got {n_facts}, {n_in}, {n_out}")
    if n_facts > n_in**2:
        raise MechmemError(f"cannot make {n_facts} distinct facts from {n_in}^2 = {n_in**2} input pairs")
    try:
        generator = torch.Generator(device=device).manual_seed(seed)
        perm = torch.randperm(n_in**2, generator=generator, device=device).cpu()
    except (RuntimeError, AssertionError) as err:
        raise MechmemError(f"cannot draw the fact permutation on device {device!r}: {err}") from None
    tokens = torch.arange(n_in)
    pairs = torch.cartesian_prod(tokens, tokens)
    return pairs[perm[:n_facts]], torch.arange(n_facts) % n_out


def generate_facts(
    n_facts: int, n_in: int, n_out: int, seed: int = 42, *, device: str = "cpu"
) -> tuple[Int[Tensor, "n_facts 2"], Int[Tensor, " n_facts"]]:
    """Return (inputs, labels) of the published fact set, on CPU, sorted by label.

    Args:
        n_facts: number of facts, at most n_in**2 (every ordered pair at most once).
        n_in: input vocabulary size.
        n_out: number of labels; fact i (before sorting) gets label i % n_out.
        seed: seed of the generator that shuffles the pairs (42 in the paper).
        device: device of that generator ("cpu", or "cuda" as in the published runs).

    Raises:
        MechmemError: if n_facts exceeds n_in**2, a size is not positive or the device is unavailable.
    """
    inputs, labels = fact_sequence(n_facts, n_in, n_out, seed, device=device)
    # The published code's default (unstable) argsort: the stable one orders ties differently.
    order = torch.argsort(labels)
    return inputs[order], labels[order]


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
_NO_MLP = _BASE.replace(mixing="2emb", mlp=False, norms=False)


@register_task
class FactsTask(Task):
    """Memorise the published fact set; full-batch, last-position read-out."""

    name = "facts"
    config_cls = FactsTaskConfig
    presets: ClassVar[dict[str, Preset]] = {
        "quick": _preset(_NO_MLP, 128, 600, "2Emb without MLP or norms (d=16) memorising 128 facts"),
        "attn": _preset(_BASE, 192, 3000, "learned attention + MLP + norms + bias (d=16), 192 facts"),
        "uniform": _preset(
            _BASE.replace(mixing="uniform"), 192, 3000, "uniform attention + MLP + norms, 192 facts"
        ),
        "2emb": _preset(
            _BASE.replace(mixing="2emb"), 192, 3000, "2Emb + MLP + norms + bias (d=16), 192 facts"
        ),
        "no-mlp": _preset(
            _NO_MLP, 200, 5000, "2Emb without MLP or norms near its published capacity (208 facts)"
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
        pos = torch.ones(len(clean), dtype=torch.long)
        return PatchingPair(
            self.inputs[clean], self.inputs[other], pos, self.labels[clean], self.labels[other]
        )

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, *, generator: torch.Generator, n: int = 2048
    ) -> dict[str, float]:
        """Loss and accuracy on all facts, and the number of facts stored (argmax correct)."""
        device = model_device(model)
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
