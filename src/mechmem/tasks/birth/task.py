"""The "birth" task: triggered bigrams of Bietti et al. (2023, "Birth of a Transformer").

Sequences follow a character bigram model except that K trigger tokens are always followed by their own output
token (`mechmem.tasks.birth.data`); a two-layer transformer solves a trigger's later occurrences with an
induction head. Metrics: in-context accuracy (counter >= 2), first-occurrence accuracy (counter == 1), global
and in-context loss, and the memory probes; evaluation adds held-out (and OOD) accuracies, attention probes.

    python analyses/train.py birth --preset quick --out runs/birth_quick
"""

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from mechmem.config import ConfigMixin, Preset, TrainConfig
from mechmem.errors import MechmemError
from mechmem.models.parts import model_device
from mechmem.tasks.base import Batch, PatchingPair, Task
from mechmem.tasks.birth.corpus import CorpusStats, load_stats
from mechmem.tasks.birth.data import OUTPUT_MODES, TriggerSampler, TriggerSequences, trigger_occurrences
from mechmem.tasks.birth.models import full_config, is_simplified, simplified_config
from mechmem.tasks.birth.probes import attention_probes, memory_probes
from mechmem.tasks.registry import register_task

N_TOKENS = 65  # tiny Shakespeare's character vocabulary, used by the presets
PAIR_ROUNDS = 32
"""Draws of fresh sequences `patching_pair` makes before it gives up finding triggers that occur twice."""


@dataclass(frozen=True)
class BirthConfig(ConfigMixin):
    """The triggered-bigram data distribution and which positions the loss sees."""

    seq_len: int = 256
    """Sequence length T (model inputs)."""
    n_triggers: int = 5
    """Number of triggers K per sequence."""
    fixed_triggers: bool = False
    """True: the K most frequent tokens in every sequence; False: K drawn from pi_u per sequence."""
    outputs: str = "uniform"
    """Output tokens: "uniform" over all tokens, "bigram" from pi_b(.|trigger), or "ood" (a token split)."""
    head_only_loss: bool = True
    """Train only on trigger outputs from their 2nd occurrence on; False: on every position."""
    corpus: str | None = None
    """Statistics JSON or text corpus to count; None uses the shipped tiny Shakespeare counts."""

    def __post_init__(self) -> None:
        if self.outputs not in OUTPUT_MODES:
            raise ValueError(f"outputs must be one of {OUTPUT_MODES}")
        if self.seq_len < 2 or self.n_triggers < 1:
            raise ValueError("seq_len must be >= 2 and n_triggers >= 1")


def _accuracy(logits: Tensor, targets: Tensor, mask: Tensor) -> float:
    return float((logits[mask].argmax(-1) == targets[mask]).float().mean()) if mask.any() else float("nan")


def _ce(logits: Tensor, targets: Tensor, mask: Tensor) -> float:
    return float(F.cross_entropy(logits[mask].float(), targets[mask])) if mask.any() else float("nan")


@register_task
class BirthTask(Task):
    """Triggered bigrams; batches carry `counter`, `triggers` and `outputs` in `info`."""

    name = "birth"
    config_cls = BirthConfig
    presets: ClassVar[dict[str, Preset]] = {}

    @cached_property
    def stats(self) -> CorpusStats:
        return load_stats(self.config.corpus)

    @cached_property
    def sampler(self) -> TriggerSampler:
        options = {k: getattr(self.config, k) for k in ("seq_len", "n_triggers", "fixed_triggers", "outputs")}
        return TriggerSampler(self.stats, **options)

    @property
    def d_vocab(self) -> int:
        return self.stats.n_tokens

    @property
    def seq_len(self) -> int:
        return self.config.seq_len

    def token_names(self) -> list[str]:
        """The corpus characters of the vocabulary (`CorpusStats.token_names`: "␣" for the space, "\\n")."""
        return self.stats.token_names()

    def _batch(self, seqs: TriggerSequences) -> Batch:
        tokens, targets = seqs.seq[:, :-1], seqs.seq[:, 1:]
        head_only = self.config.head_only_loss
        mask = (seqs.counter >= 2).float() if head_only else torch.ones_like(tokens, dtype=torch.float)
        info = {"counter": seqs.counter, "triggers": seqs.triggers, "outputs": seqs.outputs}
        return Batch(tokens=tokens.contiguous(), targets=targets.contiguous(), loss_mask=mask, info=info)

    def train_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        return self._batch(self.sampler.sample(n, generator=generator, split="train"))

    def ood_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        """Sequences whose outputs come from the held-out token range (outputs="ood")."""
        return self._batch(self.sampler.sample(n, generator=generator, split="test"))

    def patching_pair(self, n: int, *, generator: torch.Generator) -> PatchingPair:
        """The in-context answer and its counterfactual, read at a trigger's second occurrence.

        Clean: the answer position holds the second occurrence of a trigger q; `correct` is q's output o.
        Corrupted: that earlier o replaced by a token r from q's output distribution (never o nor a trigger);
        the answer becomes r (`incorrect`). With triggers a, t and outputs b, s:

            clean      x  a  b  e  t  s  n  a      answer read at the last a: b
            corrupted  x  a  k  e  t  s  n  a      answer: k

        Only the token an induction head copies changes.
        """
        parts, have = [], 0
        for _ in range(PAIR_ROUNDS):
            if have >= n:
                break
            part = self._in_context_pair(self.sampler.sample(n, generator=generator), generator)
            if part is not None:
                parts.append(part)
                have += len(part.answer_pos)
        if have < n:
            raise MechmemError(
                f"birth task: fewer than {n} sequences in {PAIR_ROUNDS} draws have a trigger occurring twice "
                f"(seq_len {self.config.seq_len} is too short for a clean/corrupted pair)"
            )
        fields = PatchingPair.__dataclass_fields__
        return PatchingPair(*(torch.cat([getattr(p, f) for p in parts])[:n] for f in fields))

    def _in_context_pair(self, seqs: TriggerSequences, generator: torch.Generator) -> PatchingPair | None:
        """The pair of `patching_pair` for the sequences of `seqs` that have a usable trigger (None: none)."""
        tokens = seqs.seq[:, :-1]
        at = trigger_occurrences(tokens, seqs.triggers)
        output_is_trigger = (seqs.outputs.unsqueeze(-1) == seqs.triggers.unsqueeze(1)).any(-1)
        usable = at.repeated & ~output_is_trigger
        choice = torch.rand(usable.shape, generator=generator).masked_fill(~usable, -1.0).argmax(-1)
        rows = torch.arange(len(tokens))
        rows = rows[usable[rows, choice]]
        if len(rows) == 0:
            return None
        choice, index = choice[rows], torch.arange(len(rows))
        correct = seqs.outputs[rows, choice]
        allowed = torch.ones(len(rows), self.stats.n_tokens, dtype=torch.bool)
        allowed[index[:, None], seqs.triggers[rows]] = False
        allowed[index, correct] = False
        if not bool(allowed.any(-1).all()):
            raise MechmemError(
                "birth task: no token is left to corrupt the answer with (vocabulary too small)"
            )
        probs = self.sampler.output_probs(seqs.triggers[rows, choice]) * allowed
        probs = torch.where(probs.sum(-1, keepdim=True) > 0, probs, allowed.float())
        incorrect = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        clean = tokens[rows].contiguous()
        corrupted = clean.clone()
        corrupted[index, at.first[rows, choice] + 1] = incorrect
        return PatchingPair(clean, corrupted, at.second[rows, choice], correct, incorrect)

    def batch_metrics(self, logits: Tensor, batch: Batch, prefix: str = "") -> dict[str, float]:
        """In-context / first-occurrence accuracy, global and in-context loss on one batch."""
        counter = batch.info["counter"]
        return {
            f"{prefix}icl_acc": _accuracy(logits, batch.targets, counter >= 2),
            f"{prefix}first_acc": _accuracy(logits, batch.targets, counter == 1),
            f"{prefix}global_loss": _ce(logits, batch.targets, counter == 0),
            f"{prefix}icl_loss": _ce(logits, batch.targets, counter >= 2),
        }

    def probe_tokens(self) -> dict[str, Tensor]:
        """Which tokens each memory probe ranges over (see `mechmem.tasks.birth.probes`)."""
        n = self.stats.n_tokens
        everything = torch.arange(n)
        if self.config.fixed_triggers:
            triggers = self.sampler.fixed.sort().values
            others = everything[~torch.isin(everything, triggers)]
        else:
            triggers, others = everything, everything
        outputs = torch.arange(self.sampler.n_train_tokens) if self.config.outputs == "ood" else everything
        return {"trigger_tokens": triggers, "output_tokens": outputs, "non_trigger_tokens": others}

    def probes(self, model: torch.nn.Module) -> dict[str, float]:
        """Memory probes when `model` has the simplified model's structure; empty otherwise."""
        config = getattr(model, "mechmem_config", None)
        if config is None or not is_simplified(config):
            return {}
        return memory_probes(model, bigram=self.sampler.bigram.float(), **self.probe_tokens())

    def train_metrics(self, model: torch.nn.Module, batch: Batch, logits: Tensor) -> dict[str, float]:
        return {**self.batch_metrics(logits, batch), **self.probes(model)}

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, *, generator: torch.Generator, n: int = 2048
    ) -> dict[str, float]:
        device = model_device(model)
        batch = self.eval_batch(n, generator=generator).to(device)
        names = [f"blocks.{i}.attn.hook_pattern" for i in range(len(model.blocks))]
        logits, cache = model.run_with_cache(batch.tokens, names_filter=lambda name: name in names)
        out = {"eval_loss": float(self.loss(logits, batch)), **self.batch_metrics(logits, batch, "eval_")}
        patterns = [cache[name][:, 0] for name in names]
        out.update(attention_probes(patterns, batch.tokens, batch.targets, batch.info["counter"]))
        if self.config.outputs == "ood":
            test = self.ood_batch(n, generator=generator).to(device)
            out["eval_ood_icl_acc"] = _accuracy(model(test.tokens), test.targets, test.info["counter"] >= 2)
        return out

    def headline(self, metrics: dict) -> str:
        keys = ["eval_icl_acc", "icl_acc", "wo2_recall", "wk2_recall", "wk1_recall", "wk1_recall_64", "wf_kl"]
        return ", ".join(f"{k} {metrics[k]:.3f}" for k in keys if isinstance(metrics.get(k), float))


def _sgd(steps: int, batch_size: int, lr: float = 0.2, **kw: object) -> TrainConfig:
    return TrainConfig(
        steps=steps, batch_size=batch_size, lr=lr, optimizer="sgd", momentum=0.9, weight_decay=1e-4, **kw
    )


def _presets() -> dict[str, Preset]:
    frozen = {"freeze_embeddings": True, "freeze_unembedding": True}
    quick_model = simplified_config(d_vocab=N_TOKENS, n_ctx=128, d_model=128, **frozen)
    quick_task = BirthConfig(seq_len=128, n_triggers=5, fixed_triggers=True)
    quick = _sgd(1500, 64, eval_every=50, eval_samples=256)
    paper = _sgd(3000, 512, eval_every=10, eval_samples=512)
    return {
        "quick": Preset(
            quick_model,
            quick_task,
            quick,
            "simplified model, K=5 fixed triggers, T=128, batch 64, head-only loss",
        ),
        "demo": Preset(
            quick_model,
            quick_task,
            _sgd(400, 64, eval_every=25, eval_samples=256),
            "the quick preset stopped at 400 steps, for the demo (its induction head is born by step 150)",
        ),
        "quick_ffn": Preset(
            simplified_config(d_vocab=N_TOKENS, n_ctx=128, d_model=128, ffn=True),
            BirthConfig(seq_len=128, n_triggers=5, fixed_triggers=False, head_only_loss=False),
            quick,
            "simplified model with W_F, random triggers, all layers trained jointly on every token (Fig. 4)",
        ),
        "quick_full": Preset(
            full_config(d_vocab=N_TOKENS, n_ctx=128, n_layers=2, d_model=128),
            BirthConfig(seq_len=128, n_triggers=5, fixed_triggers=True, head_only_loss=False),
            quick,
            "full 2-layer transformer (MLPs, LayerNorm), fixed triggers, loss on every token",
        ),
        "paper": Preset(
            simplified_config(d_vocab=N_TOKENS, n_ctx=256, d_model=128),
            BirthConfig(seq_len=256, n_triggers=5, fixed_triggers=False),
            paper,
            "the paper's sizes: d=128, T=256, batch 512, random triggers (GPU)",
        ),
        "paper_fixed": Preset(
            simplified_config(d_vocab=N_TOKENS, n_ctx=256, d_model=128, **frozen),
            BirthConfig(seq_len=256, n_triggers=5, fixed_triggers=True),
            paper,
            "the paper's sizes with fixed triggers and frozen embeddings (GPU)",
        ),
    }


BirthTask.presets = _presets()
