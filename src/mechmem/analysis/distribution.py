"""Prompt fit: how far an analysis's prompts are from the model's own task data.

    from mechmem.analysis.distribution import prompt_fit, repeats_fit
    fit = repeats_fit(model, task, 32, 256, generator=g)     # head detection's random probe, |r| = 32
    fit = prompt_fit(model, task, pair, generator=g, source="the generic repeats pair")   # any Batch or pair
    print(fit.message); fit.to_dict()                         # the line, the JSON

A verdict read on prompts the model was not trained on says little about the circuit it uses on its own
data. The check compares the model's loss on the prompts with a uniform guess, ln(d_vocab_out), and with
its loss on the task's own data of the same kind:

    prompts        loss on the prompts                          reference (the task's own data)
    Batch          its masked cross-entropy                     task.eval_batch, scored by task.loss
    PatchingPair   cross-entropy of `correct` at `answer_pos`   the task's own patching_pair, the same loss
                   of the clean prompts                         (the task's eval data when it has none)

The prompts are off the model's distribution (docs/analyses.md, "Prompt fit") when the upper end of the
prompt loss's 95% bootstrap interval reaches the uniform guess, or the prompt loss exceeds the task-data
loss by more than `MARGIN_NATS` and more than `FACTOR` times.

Caveats: the check sees only the loss (at most `FIT_PROMPTS` prompts), and a low loss on prompts of the
task's own kind says nothing about a behaviour the task never asks for.
"""

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from mechmem.analysis.stats import bootstrap_ratio
from mechmem.errors import BadArgumentType
from mechmem.models.checks import check_generator, check_model, check_tokens, kind_of
from mechmem.models.parts import model_device
from mechmem.tasks.base import Batch, PatchingPair, check_task
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask

MARGIN_NATS = 1.0
"""Off the model's distribution needs the prompt loss more than this many nats above the task-data loss..."""
FACTOR = 1.5
"""...and more than this many times it (both; fixed before any model was measured, docs/analyses.md)."""
FIT_PROMPTS = 128
"""Prompts the check scores at most (the first ones); the reference draws as many."""
LOGITS_BUDGET = 2**24
"""Logit entries (rows x positions x output vocabulary) one forward pass of the check holds at most."""


@dataclass(frozen=True)
class PromptFit:
    """The model's loss on an analysis's prompts beside a uniform guess's and task-data loss; a verdict."""

    source: str
    """What the prompts are, in words."""
    n: int
    """Number of prompts (sequences or pairs) the prompt loss averages over."""
    prompt_loss: float
    """Mean cross-entropy (nats) on the prompts (see the module docstring for what is scored)."""
    prompt_lower: float
    """Lower end of the prompt loss's 95% percentile bootstrap interval over the prompts."""
    prompt_upper: float
    """Upper end of that interval."""
    d_vocab_out: int
    """The model's output vocabulary: a uniform guess over it loses ln(d_vocab_out) nats."""
    task_loss: float | None
    """The same kind of loss on the task's own data; None without a task (no reference data)."""
    reference: str | None
    """What the reference data is, in words; None without a task."""

    def to_dataframe(self) -> Any:
        """One row: `source`, `n`, `prompt_loss` with its interval (`prompt_lower`, `prompt_upper`),
        `uniform_loss`, `task_loss`, `reference` and `off_distribution`."""
        import pandas as pd

        row = {name: getattr(self, name) for name in ("source", "n", "prompt_loss", "prompt_lower")}
        row |= {name: getattr(self, name) for name in ("prompt_upper", "uniform_loss", "task_loss")}
        return pd.DataFrame([row | {"reference": self.reference, "off_distribution": self.off_distribution}])

    @property
    def difference(self) -> float | None:
        """prompt_loss - task_loss in nats (None without reference data)."""
        return None if self.task_loss is None else self.prompt_loss - self.task_loss

    @property
    def ratio(self) -> float | None:
        """prompt_loss / task_loss (inf when the task-data loss is 0; None without reference data)."""
        if self.task_loss is None:
            return None
        return self.prompt_loss / self.task_loss if self.task_loss > 0 else float("inf")

    @property
    def uniform_loss(self) -> float:
        """ln(d_vocab_out): the cross-entropy of a uniform guess over the model's output vocabulary."""
        return math.log(self.d_vocab_out)

    @property
    def no_better_than_uniform(self) -> bool:
        """True when the prompt loss's interval reaches the uniform guess."""
        return self.prompt_upper >= self.uniform_loss

    @property
    def above_task_data(self) -> bool:
        """True when the prompt loss exceeds the task-data loss by more than MARGIN_NATS and FACTOR times."""
        if self.task_loss is None:
            return False
        return self.prompt_loss - self.task_loss > MARGIN_NATS and self.prompt_loss > FACTOR * self.task_loss

    @property
    def off_distribution(self) -> bool:
        """True when either test flags the prompts (docs/analyses.md, "Prompt fit")."""
        return self.no_better_than_uniform or self.above_task_data

    @property
    def reasons(self) -> list[str]:
        """Why the prompts are flagged, in words (empty when they are not)."""
        out = []
        if self.no_better_than_uniform:
            out.append(f"no better than a uniform guess (ln {self.d_vocab_out})")
        if self.above_task_data:
            out.append(f"more than {MARGIN_NATS} nat and {FACTOR}x above the task data")
        return out

    @property
    def message(self) -> str:
        """The check in one line, for the printed text and the report."""
        loss = (
            f"loss {self.prompt_loss:.3f} [{self.prompt_lower:.3f}, {self.prompt_upper:.3f}] nats on "
            f"{self.source} (n = {self.n}) vs {self.uniform_loss:.3f} for a uniform guess "
            f"(ln {self.d_vocab_out})"
        )
        if self.task_loss is None:
            rule = "off when the interval reaches the uniform guess; no task, so no task-data reference"
        else:
            away = f"{self.difference:+.3f} nats, {self.ratio:.2f}x"
            loss += f" and {self.task_loss:.3f} on {self.reference} ({away})"
            rule = f"off when the interval reaches the uniform guess, or > +{MARGIN_NATS} nat and > {FACTOR}x"
        if self.off_distribution:
            return (
                f"WARNING prompt fit: OFF the model's distribution ({'; '.join(self.reasons)}): {loss} "
                f"({rule}); results on these prompts may not show the circuit the model uses on its own data"
            )
        return f"prompt fit: on the model's distribution: {loss} ({rule})"

    def to_dict(self) -> dict[str, Any]:
        out = {"source": self.source, "n": self.n, "prompt_loss": self.prompt_loss}
        out["prompt_interval"] = [self.prompt_lower, self.prompt_upper]
        names = ("d_vocab_out", "uniform_loss", "task_loss", "reference", "difference", "ratio")
        names += ("no_better_than_uniform", "above_task_data", "off_distribution", "reasons")
        rule = {"uniform": "ln(d_vocab_out)", "margin_nats": MARGIN_NATS, "factor": FACTOR}
        return out | {k: getattr(self, k) for k in names} | {"rule": rule, "message": self.message}


@dataclass(frozen=True)
class RowLosses:
    """Per prompt, the summed cross-entropy over its scored positions and their number."""

    total: Float[Tensor, " batch"]
    scored: Float[Tensor, " batch"]
    d_vocab_out: int
    """The model's output vocabulary (its logits' last axis)."""

    @property
    def mean(self) -> float:
        """The mean loss per scored position (NaN when nothing is scored)."""
        scored = float(self.scored.sum())
        return float(self.total.sum()) / scored if scored > 0 else float("nan")


@torch.no_grad()
def row_losses(model: torch.nn.Module, prompts: Batch | PatchingPair) -> RowLosses:
    """The model's cross-entropy per prompt: a Batch's over its masked targets, or a pair's of `correct` at
    `answer_pos` of its clean prompts (one scored position per prompt)."""
    totals, scored = [], []
    for part, logits in _chunks(model, _checked(prompts, model)):
        if isinstance(part, Batch):
            per_pos = F.cross_entropy(logits.transpose(1, 2).float(), part.targets, reduction="none")
            mask = part.loss_mask.to(per_pos.dtype)
            totals.append((per_pos * mask).sum(1))
            scored.append(mask.sum(1))
        else:
            at = logits[torch.arange(len(part.answer_pos), device=logits.device), part.answer_pos]
            totals.append(F.cross_entropy(at.float(), part.correct, reduction="none"))
            scored.append(torch.ones_like(totals[-1]))
    return RowLosses(torch.cat(totals).double().cpu(), torch.cat(scored).double().cpu(), logits.shape[-1])


def prompt_loss(model: torch.nn.Module, prompts: Batch | PatchingPair) -> float:
    """The model's mean cross-entropy on `prompts` (`row_losses`)."""
    return row_losses(model, prompts).mean


def _checked(prompts: Any, model: torch.nn.Module) -> Batch | PatchingPair:
    """`prompts` if they are a `Batch` or `PatchingPair` the model reads; `BadArgumentType` / `BadArgument`
    else."""
    if isinstance(prompts, PatchingPair):
        prompts.check_model(model)
    elif isinstance(prompts, Batch):
        check_tokens(model, prompts.tokens, "the prompts' tokens")
        check_tokens(model, prompts.targets, "the prompts' targets", output=True)
    else:
        raise BadArgumentType(f"prompts must be a Batch or a PatchingPair, not {kind_of(prompts)}")
    return prompts


def _chunks(model: torch.nn.Module, prompts: Batch | PatchingPair) -> Iterator[tuple[Any, Tensor]]:
    """Chunks of `prompts` on the model's device with their logits, each within `LOGITS_BUDGET` entries."""
    device = model_device(model)
    is_batch = isinstance(prompts, Batch)
    n, pos = (prompts.tokens if is_batch else prompts.clean).shape
    vocab = getattr(getattr(model, "cfg", None), "d_vocab_out", None)
    rows = max(1, LOGITS_BUDGET // (pos * vocab)) if isinstance(vocab, int) and vocab > 0 else n
    for start in range(0, n, rows):
        part = prompts.rows(slice(start, start + rows)).to(device)
        yield part, model(part.tokens if is_batch else part.clean)


def _task_data_loss(
    model: torch.nn.Module, task: Any, like: Batch | PatchingPair, *, generator: torch.Generator
) -> tuple[float, str]:
    """The reference of `prompt_fit`: the model's loss on as many of the task's own prompts of the same
    kind as `like` holds, with what they are in words."""
    n = len(like)
    if isinstance(like, PatchingPair):
        try:
            pair = task.patching_pair(n, generator=generator)
            return prompt_loss(model, pair), f"the {task.name} task's clean/corrupted pair"
        except NotImplementedError:
            pass
    batch = task.eval_batch(n, generator=generator)
    total, weight = 0.0, 0.0
    with torch.no_grad():
        for part, logits in _chunks(model, batch):  # task.loss is a masked mean: weigh it by its positions
            w = float(part.loss_mask.sum())
            total, weight = total + (float(task.loss(logits, part)) * w if w > 0 else 0.0), weight + w
    return total / weight if weight > 0 else float("nan"), f"the {task.name} task's evaluation data"


def prompt_fit(
    model: torch.nn.Module,
    task: Any,
    prompts: Batch | PatchingPair,
    *,
    generator: torch.Generator,
    source: str = "the prompts",
) -> PromptFit:
    """How far `prompts` (a `Batch` or `PatchingPair`) are from `model`'s own data (`task`'s; None for a
    bare model) and from a uniform guess (docs/analyses.md, "Prompt fit"). `generator` draws the task's
    reference data, then the bootstrap resamples; `source` names the prompts in the message.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> pair = task.patching_pair(16, generator=torch.Generator().manual_seed(0))
        >>> fit = mechmem.prompt_fit(model, task, pair, generator=torch.Generator().manual_seed(1))
        >>> fit.off_distribution, fit.reference
        (False, "the repeats task's clean/corrupted pair")
    """
    check_model(model, cfg=False, hooks=False)
    if task is not None:
        check_task(task, model)
    check_generator(generator, none=False)
    prompts = _checked(prompts, model).rows(slice(0, FIT_PROMPTS))
    rows = row_losses(model, prompts)
    reference, words = (
        (None, None) if task is None else _task_data_loss(model, task, prompts, generator=generator)
    )
    lower, upper = bootstrap_ratio(rows.total, rows.scored, generator=generator)
    return PromptFit(
        source, len(prompts), rows.mean, float(lower), float(upper), rows.d_vocab_out, reference, words
    )


def repeats_fit(
    model: torch.nn.Module, task: Any, half: int, n: int, *, generator: torch.Generator
) -> PromptFit:
    """`prompt_fit` of head detection's random probe: n repeated random sequences [r, r] with |r| = `half`."""
    task_of_repeats = RepeatsTask(RepeatsConfig.for_model(model, half=half))
    batch = task_of_repeats.eval_batch(min(n, FIT_PROMPTS), generator=generator)
    return prompt_fit(model, task, batch, generator=generator, source=f"[r, r], |r| = {half}")


def own_data_fit(
    model: torch.nn.Module, task: Any, data: str, n: int, *, generator: torch.Generator
) -> PromptFit:
    """`prompt_fit` of an analysis that reads the task's own data (`data`: "eval" or "pair"), drawn from
    `generator` as the analysis draws them; only the uniform guess can flag them."""
    if data == "pair":
        prompts: Batch | PatchingPair = task.patching_pair(n, generator=generator)
        source = f"the {task.name} task's clean/corrupted pair"
    elif data == "eval":
        prompts, source = task.eval_batch(n, generator=generator), f"the {task.name} task's evaluation data"
    else:
        raise ValueError(f"data must be 'eval' or 'pair', not {data!r}")
    return prompt_fit(model, task, prompts, generator=generator, source=source)
