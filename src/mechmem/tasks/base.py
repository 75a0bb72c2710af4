"""The task contract every synthetic task implements.

A task turns a config into batches and knows how to score a model on itself:

    train_batch(n, generator=g) -> Batch          fresh training data (tokens, targets, loss mask)
    eval_batch(n, generator=g)  -> Batch          held-out evaluation data
    loss(logits, batch)         -> scalar         masked cross-entropy by default
    train_metrics(model, batch, logits) -> dict   metrics on a training batch, computed before the step
    evaluate(model, generator=g) -> dict          the task's default evaluation
    patching_pair(n, generator=g) -> PatchingPair clean/corrupted inputs with answers, for activation patching
    role_probes(n, generator=g) -> [RoleProbe]    optional: one counterfactual pair per task role
    attention_sites(n, generator=g) -> [AttentionSites]  where its role heads attend (from role_probes)
    probes(model) -> {name: value}                optional: the task's own weight probes

Every method that draws random numbers takes an explicit `torch.Generator`; nothing seeds globally.
"""

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.errors import BadArgument, BadArgumentType, MechmemError
from mechmem.models.checks import check_instance, check_model, check_tokens, kind_of
from mechmem.models.parts import model_device


@dataclass
class Batch:
    """Inputs, next-token targets and a loss mask, all [batch pos]; `info` holds task-specific extras."""

    tokens: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]
    loss_mask: Float[Tensor, "batch pos"]
    info: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tokens.shape != self.targets.shape or self.tokens.shape != self.loss_mask.shape:
            raise ValueError(
                f"tokens {tuple(self.tokens.shape)}, targets {tuple(self.targets.shape)} and loss_mask "
                f"{tuple(self.loss_mask.shape)} must share the shape [batch pos]"
            )

    def to(self, device: str | torch.device) -> "Batch":
        info = {k: v.to(device) for k, v in self.info.items()}
        return Batch(self.tokens.to(device), self.targets.to(device), self.loss_mask.to(device), info)

    def rows(self, index: slice) -> "Batch":
        """The sequences `index` selects (with every `info` tensor that has one entry per sequence)."""
        n = len(self)
        info = {k: v[index] if v.ndim and v.shape[0] == n else v for k, v in self.info.items()}
        return Batch(self.tokens[index], self.targets[index], self.loss_mask[index], info)

    def __len__(self) -> int:
        return self.tokens.shape[0]


@dataclass
class PatchingPair:
    """Clean and corrupted inputs of equal shape, with the answer read at `answer_pos`.

    `correct` is the clean run's answer and `incorrect` the corrupted run's; the default metric is the logit
    difference `logit[correct] - logit[incorrect]` at the answer position, averaged over the batch.
    """

    clean: Int[Tensor, "batch pos"]
    corrupted: Int[Tensor, "batch pos"]
    answer_pos: Int[Tensor, " batch"]
    correct: Int[Tensor, " batch"]
    incorrect: Int[Tensor, " batch"]

    def __post_init__(self) -> None:
        if self.clean.shape != self.corrupted.shape:
            raise ValueError("clean and corrupted inputs must have the same shape")
        n = self.clean.shape[0]
        for name in ("answer_pos", "correct", "incorrect"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape [batch] = ({n},)")

    def check_model(self, model: torch.nn.Module) -> None:
        """Raise `BadArgument` unless the model reads these inputs (ids in its vocabulary, no longer than its
        context), the answer positions lie inside them and the answers are in its output vocabulary."""
        for name in ("clean", "corrupted"):
            check_tokens(model, getattr(self, name), f"the pair's {name} tokens")
        for name in ("correct", "incorrect"):
            check_tokens(model, getattr(self, name), f"the pair's {name} answers", ndim=1, output=True)
        pos = self.clean.shape[1]
        if int(self.answer_pos.min()) < 0 or int(self.answer_pos.max()) >= pos:
            raise BadArgument(f"the pair's answer_pos must lie in [0, {pos}), the inputs' positions")

    def to(self, device: str | torch.device) -> "PatchingPair":
        return PatchingPair(*(getattr(self, n).to(device) for n in self.__dataclass_fields__))

    def rows(self, index: slice | Tensor) -> "PatchingPair":
        """The pair of the prompts `index` selects."""
        return PatchingPair(*(getattr(self, n)[index] for n in self.__dataclass_fields__))

    def __len__(self) -> int:
        return self.clean.shape[0]

    def logit_diff(self, logits: Float[Tensor, "batch pos d_vocab"]) -> Float[Tensor, ""]:
        """Mean over the batch of logit[correct] - logit[incorrect] at the answer position."""
        return self.logit_diff_per_prompt(logits).mean()

    def logit_diff_per_prompt(
        self, logits: Float[Tensor, "... batch pos d_vocab"]
    ) -> Float[Tensor, "... batch"]:
        """The logit difference per prompt; leading axes (e.g. a batch of patches) are kept."""
        idx = self.answer_pos.to(logits.device)
        rows = torch.arange(logits.shape[-3], device=logits.device)
        at = logits[..., rows, idx, :]
        good = at.gather(-1, self.correct.to(logits.device).expand(at.shape[:-1]).unsqueeze(-1)).squeeze(-1)
        bad = at.gather(-1, self.incorrect.to(logits.device).expand(at.shape[:-1]).unsqueeze(-1)).squeeze(-1)
        return good - bad

    def answer_loss_per_prompt(
        self, logits: Float[Tensor, "... batch pos d_vocab"]
    ) -> Float[Tensor, "... batch"]:
        """Cross-entropy of the correct answer at the answer position, -log softmax(logits)[correct], per
        prompt; leading axes are kept."""
        idx = self.answer_pos.to(logits.device)
        rows = torch.arange(logits.shape[-3], device=logits.device)
        at = logits[..., rows, idx, :].log_softmax(-1)
        return -at.gather(-1, self.correct.to(logits.device).expand(at.shape[:-1]).unsqueeze(-1)).squeeze(-1)


@dataclass
class RoleProbe:
    """What a head doing one task role is tested on: a counterfactual pair that changes only the information
    that role needs, and the keys such a head attends to from the answer position."""

    role: str
    """Name of the role, e.g. "recall" or "elimination"."""
    pair: PatchingPair
    """Clean inputs and their counterfactual, both answered at `pair.answer_pos`."""
    keys: Bool[Tensor, "batch pos"]
    """Key positions (of `pair.clean`) a head doing this role attends to from the answer position."""

    def __post_init__(self) -> None:
        if self.keys.shape != self.pair.clean.shape:
            raise ValueError(
                f"keys {tuple(self.keys.shape)} must have the shape of the inputs "
                f"{tuple(self.pair.clean.shape)}"
            )

    def to(self, device: str | torch.device) -> "RoleProbe":
        return RoleProbe(self.role, self.pair.to(device), self.keys.to(device))


@dataclass(frozen=True)
class AttentionSites:
    """Where a head's attention score is read: prompts and, per prompt, the (query, key) pairs."""

    name: str
    """What the pairs are, e.g. "recall" or "induction"."""
    tokens: Int[Tensor, "batch pos"]
    """The prompts."""
    pairs: Bool[Tensor, "batch query_pos key_pos"]
    """True at each (query, key) pair read; every key at or before its query."""
    note: str = ""
    """Where the prompts come from when not from the task's own data (e.g. repeated random tokens)."""

    def __post_init__(self) -> None:
        batch, pos = self.tokens.shape
        if self.pairs.shape != (batch, pos, pos) or self.pairs.dtype != torch.bool:
            raise ValueError(f"pairs must be bool [batch query_pos key_pos] = {(batch, pos, pos)}")
        if bool(self.pairs.triu(1).any()):
            raise ValueError("every key of a pair must sit at or before its query")

    @classmethod
    def from_role_probe(cls, probe: RoleProbe) -> "AttentionSites":
        """The probe's clean prompts, read from the answer position at the probe's keys."""
        tokens, pos = probe.pair.clean, probe.pair.answer_pos
        pairs = torch.zeros(*tokens.shape, tokens.shape[1], dtype=torch.bool)
        rows = torch.arange(len(tokens))
        pairs[rows, pos] = probe.keys.cpu().bool() & (torch.arange(tokens.shape[1]) <= pos[:, None].cpu())
        return cls(probe.role, tokens.cpu(), pairs)


def masked_cross_entropy(
    logits: Float[Tensor, "batch pos d_vocab"],
    targets: Int[Tensor, "batch pos"],
    mask: Float[Tensor, "batch pos"],
) -> Float[Tensor, ""]:
    """Cross-entropy per position times the mask, divided by the mask sum."""
    per_pos = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    mask = mask.flatten().to(per_pos.dtype)
    return (per_pos * mask).sum() / mask.sum().clamp_min(1.0)


def masked_accuracy(
    logits: Float[Tensor, "batch pos d_vocab"],
    targets: Int[Tensor, "batch pos"],
    mask: Float[Tensor, "batch pos"],
) -> float:
    """Fraction of masked positions whose argmax is the target."""
    hit = (logits.argmax(-1) == targets).float() * mask
    return float(hit.sum() / mask.sum().clamp_min(1.0))


class Task:
    """Base class: subclasses set `name`, `config_cls`, `presets` and implement the data methods."""

    name: ClassVar[str] = ""
    config_cls: ClassVar[type] = type(None)
    presets: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: Any) -> None:
        if isinstance(config, dict):
            config = self.config_cls.from_dict(config)
        if not isinstance(config, self.config_cls):
            raise BadArgumentType(
                f"task {self.name!r}: config must be a dict or a {self.config_cls.__name__}, got "
                f"{kind_of(config)}"
            )
        self.config = config

    # -- data -------------------------------------------------------------------------------------------
    @property
    def d_vocab(self) -> int:
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        """Length of the model inputs (tokens), i.e. the context the model needs."""
        raise NotImplementedError

    def train_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def token_names(self) -> list[str] | None:
        """A short, distinct name for every input token id, for tables and figures; None shows the ids."""
        return None

    @property
    def d_vocab_out(self) -> int:
        """Size of the output vocabulary the targets need (by default the input vocabulary)."""
        return self.d_vocab

    def check_model(self, model: torch.nn.Module) -> None:
        """Raise `MechmemError` when the model's input or output vocabulary or context is too small."""
        cfg, limits = getattr(model, "cfg", None), ("vocabulary", "output vocabulary", "context")
        try:
            need = dict(zip(limits, (self.d_vocab, self.d_vocab_out, self.seq_len)))
        except NotImplementedError:
            return
        d_vocab, d_vocab_out = getattr(cfg, "d_vocab", None), getattr(cfg, "d_vocab_out", None)
        if not (isinstance(d_vocab_out, int) and d_vocab_out > 0):
            d_vocab_out = d_vocab
        have = dict(zip(limits, (d_vocab, d_vocab_out, getattr(cfg, "n_ctx", None))))
        bad = [f"{k} {need[k]} > model's {v}" for k, v in have.items() if isinstance(v, int) and need[k] > v]
        if bad:
            raise MechmemError(f"task {self.name!r} does not fit the model: {'; '.join(bad)}")

    @classmethod
    def check_config_fits(cls, config: Any, model: torch.nn.Module) -> None:
        """`check_model` from the config alone, before the task is built; raises `MechmemError`."""
        shell = cls.__new__(cls)
        try:
            Task.__init__(shell, config if config is not None else cls.config_cls())
        except (TypeError, ValueError) as exc:
            raise MechmemError(f"task {cls.name!r}: bad config ({exc})") from None
        try:
            shell.check_model(model)
        except (AttributeError, KeyError):
            return

    def eval_batch(self, n: int, *, generator: torch.Generator) -> Batch:
        return self.train_batch(n, generator=generator)

    def patching_pair(self, n: int, *, generator: torch.Generator) -> PatchingPair:
        raise NotImplementedError(f"task {self.name!r} defines no clean/corrupted pairs")

    def role_probes(self, n: int, *, generator: torch.Generator) -> list[RoleProbe]:
        """One `RoleProbe` per task-specific head role (none by default)."""
        return []

    def attention_sites(self, n: int, *, generator: torch.Generator) -> list[AttentionSites]:
        """Where the task's role heads attend: one `AttentionSites` per role probe (`role_probes`)."""
        return [AttentionSites.from_role_probe(p) for p in self.role_probes(n, generator=generator)]

    def probes(self, model: torch.nn.Module) -> dict[str, float]:
        """Named memory-probe values of `model` that this task defines (none by default)."""
        return {}

    # -- scoring ----------------------------------------------------------------------------------------
    def optimal_loss(self, batch: Batch) -> float | None:
        """The loss of the optimal predictor on `batch`, if the task knows it."""
        return None

    def loss(self, logits: Float[Tensor, "batch pos d_vocab"], batch: Batch) -> Float[Tensor, ""]:
        return masked_cross_entropy(logits, batch.targets, batch.loss_mask)

    def train_metrics(self, model: torch.nn.Module, batch: Batch, logits: Tensor) -> dict[str, float]:
        """Metrics on the current training batch (before the optimiser step)."""
        return {"train_acc": masked_accuracy(logits, batch.targets, batch.loss_mask)}

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, *, generator: torch.Generator, n: int = 2048
    ) -> dict[str, float]:
        """Default evaluation: masked loss and accuracy on a held-out batch."""
        device = model_device(model)
        batch = self.eval_batch(n, generator=generator).to(device)
        logits = model(batch.tokens)
        return {
            "eval_loss": float(self.loss(logits, batch)),
            "eval_acc": masked_accuracy(logits, batch.targets, batch.loss_mask),
        }

    def headline(self, metrics: dict[str, Any]) -> str:
        """A one-line summary of a model's metrics for reports and indexes."""
        keys = [k for k in ("eval_loss", "eval_acc") if k in metrics]
        return ", ".join(f"{k} {metrics[k]:.4g}" for k in keys)


def check_task(task: Any, model: torch.nn.Module, name: str = "task") -> "Task":
    """Refuse anything but a TransformerLens model and a mechmem `Task` that fits it (`Task.check_model`)."""
    check_model(model)
    check_instance(name, task, Task, " (mechmem.build_task(name, config))")
    task.check_model(model)
    return task


def check_pair(pair: Any, model: torch.nn.Module, name: str = "pair") -> PatchingPair:
    """Refuse anything but a TransformerLens model and a `PatchingPair` it reads
    (`PatchingPair.check_model`)."""
    check_model(model)
    check_instance(name, pair, PatchingPair, " (task.patching_pair(n, generator=g))")
    pair.check_model(model)
    return pair
