"""Train many initialisations of one facts variant at once, with the published schedule.

The published protocol trains each initialisation separately: full-batch Adam on cross-entropy, lr 1e-2 for up to
`max_epochs` epochs, stopping at 100% argmax accuracy or after `patience` epochs without a new best accuracy; if
the best accuracy reached `continue_above` (0.95) but not 100%, training continues from the same weights with a
fresh Adam at lr 3e-3, then 1e-3, under the same rule. Accuracy is measured on the logits of each step's forward
pass (before the update), as in the authors' loop.

`train_batched` runs all initialisations as one stacked model: every parameter carries a leading `init` axis, one
forward/backward serves all inits, and Adam is applied elementwise with per-init learning rate, step count and
phase. Inits that finish are dropped from the stack, so stragglers do not pay for the rest. `train_reference` is
the plain per-init loop (a hooked model and `torch.optim.Adam`); tests check the two agree.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.config import ConfigMixin
from mechmem.papers.memorisation.models import (
    FactsModelConfig,
    Params,
    forward_params,
    init_params,
    model_from_params,
    model_params,
)

BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class Schedule(ConfigMixin):
    """The published training schedule (defaults) or a capped version of it."""

    lrs: tuple[float, ...] = (1e-2, 3e-3, 1e-3)
    """Learning rate of each phase; a phase starts with a fresh Adam on the previous phase's weights."""
    max_epochs: int = 50_000
    """Epoch cap of each phase."""
    patience: int = 5_000
    """Stop a phase after this many epochs without a new best accuracy."""
    continue_above: float = 0.95
    """Go on to the next phase only if the phase's best accuracy reached this (and missed `target_acc`)."""
    target_acc: float = 1.0
    """Accuracy that counts as success (1.0, or 0.9 for the relaxed criterion)."""

    def __post_init__(self) -> None:
        if not self.lrs or self.max_epochs < 1 or self.patience < 1 or not 0 < self.target_acc <= 1:
            raise ValueError("need at least one lr, max_epochs >= 1, patience >= 1 and 0 < target_acc <= 1")


@dataclass
class TrainOutcome:
    """Per-init results of one training run; `params` holds the final weights with a leading init axis."""

    seeds: list[int]
    success: Bool[Tensor, " init"]
    best_acc: Float[Tensor, " init"]
    final_acc: Float[Tensor, " init"]
    epochs: Int[Tensor, " init"]
    phases: Int[Tensor, " init"]
    params: Params

    def __post_init__(self) -> None:
        n = len(self.seeds)
        for name in ("success", "best_acc", "final_acc", "epochs", "phases"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape [init] = ({n},)")

    @property
    def n_success(self) -> int:
        return int(self.success.sum())

    def to_dict(self) -> dict:
        return {
            "seeds": self.seeds,
            "success": self.success.tolist(),
            "best_acc": self.best_acc.tolist(),
            "final_acc": self.final_acc.tolist(),
            "epochs": self.epochs.tolist(),
            "phases": self.phases.tolist(),
        }


def _hits_needed(n_facts: int, target_acc: float) -> int:
    return math.ceil(target_acc * n_facts - 1e-9)


def train_batched(
    cfg: FactsModelConfig,
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    seeds: list[int],
    schedule: Schedule = Schedule(),
    *,
    device: str | torch.device = "cpu",
) -> TrainOutcome:
    """Train one init per seed (init drawn from `torch.Generator().manual_seed(seed)`) as one stacked model."""
    device = torch.device(device)
    n_init, n_facts = len(seeds), labels.shape[0]
    inputs, labels = inputs.to(device), labels.to(device)
    need = _hits_needed(n_facts, schedule.target_acc)
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in seeds]
    final: Params = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    # All parameters of an init live in one row of a flat [init, n_params] leaf, so Adam is a handful of ops.
    names = list(final)
    shapes = [final[k].shape[1:] for k in names]
    sizes = [math.prod(shape) for shape in shapes]
    flat = torch.cat([final[k].reshape(n_init, -1) for k in names], dim=1).to(device).requires_grad_(True)
    m, v = torch.zeros_like(flat), torch.zeros_like(flat)

    def unflatten(rows: Tensor) -> Params:
        return {
            k: t.reshape(rows.shape[0], *shape) for k, t, shape in zip(names, rows.split(sizes, 1), shapes)
        }

    ids = torch.arange(n_init, device=device)  # original index of each active row
    step = torch.zeros(n_init, device=device)
    phase = torch.zeros(n_init, dtype=torch.long, device=device)
    lr_table = torch.tensor(schedule.lrs, device=device)
    phase_epoch = torch.zeros(n_init, dtype=torch.long, device=device)
    best = torch.full((n_init,), -1, dtype=torch.long, device=device)
    since = torch.zeros(n_init, dtype=torch.long, device=device)
    best_all = torch.zeros(n_init, dtype=torch.long)
    last_hits = torch.zeros(n_init, dtype=torch.long)
    epochs = torch.zeros(n_init, dtype=torch.long)
    phases = torch.zeros(n_init, dtype=torch.long)
    success = torch.zeros(n_init, dtype=torch.bool)
    b1, b2 = BETAS
    while ids.numel():
        a = ids.numel()
        logits = forward_params(cfg, unflatten(flat), inputs, last_only=True)[:, :, 0]
        per_init = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.repeat(a), reduction="none")
        loss = per_init.view(a, n_facts).mean(1).sum()
        (grad,) = torch.autograd.grad(loss, flat)
        with torch.no_grad():
            step += 1
            bc1, bc2 = 1 - b1**step, 1 - b2**step
            lr = lr_table[phase]
            m.lerp_(grad, 1 - b1)
            v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
            denom = (v.sqrt() / bc2.sqrt()[:, None]).add_(ADAM_EPS)
            flat.addcdiv_(m, denom * (bc1 / lr)[:, None], value=-1.0)
            hits = (logits.argmax(-1) == labels).sum(1)
            phase_epoch += 1
            improved = hits > best
            since = torch.where(improved, 0, since + 1)
            best = torch.maximum(best, hits)
            won = hits >= need
            phase_over = won | (since >= schedule.patience) | (phase_epoch >= schedule.max_epochs)
            if not bool(phase_over.any()):
                continue
            # Bookkeeping on the (rare) epochs where some init ends a phase.
            go_on = phase_over & ~won & (best >= _hits_needed(n_facts, schedule.continue_above))
            go_on &= phase + 1 < len(schedule.lrs)
            finished = phase_over & ~go_on
            cpu = ids.cpu()
            best_all[cpu] = torch.maximum(best_all[cpu], best.cpu())
            last_hits[cpu] = hits.cpu()
            epochs[cpu] += phase_over.cpu() * phase_epoch.cpu()
            phases[cpu] = phase.cpu() + 1
            success[cpu] = won.cpu() & finished.cpu()
            for i in torch.nonzero(go_on).flatten().tolist():
                phase[i] += 1
                step[i], phase_epoch[i], best[i], since[i] = 0, 0, -1, 0
                m[i], v[i] = 0.0, 0.0
            if bool(finished.any()):
                for k, p in unflatten(flat[finished].detach().cpu()).items():
                    final[k][cpu[finished.cpu()]] = p
                keep = ~finished
                flat = flat[keep].detach().requires_grad_(True)
                m, v = m[keep], v[keep]
                ids, step, phase, phase_epoch = ids[keep], step[keep], phase[keep], phase_epoch[keep]
                best, since = best[keep], since[keep]
    return TrainOutcome(
        seeds=list(seeds),
        success=success,
        best_acc=best_all.float() / n_facts,
        final_acc=last_hits.float() / n_facts,
        epochs=epochs,
        phases=phases,
        params=final,
    )


def train_reference(
    cfg: FactsModelConfig,
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    seeds: list[int],
    schedule: Schedule = Schedule(),
) -> TrainOutcome:
    """The per-init loop, literally as published: a hooked model, a fresh `torch.optim.Adam` per phase."""
    n_facts = labels.shape[0]
    need = _hits_needed(n_facts, schedule.target_acc)
    cont = _hits_needed(n_facts, schedule.continue_above)
    rows = []
    for seed in seeds:
        model = model_from_params(cfg, init_params(cfg, generator=torch.Generator().manual_seed(seed)))
        trainable = [p for p in model.parameters() if p.requires_grad]
        total, best_all, won, n_phases = 0, 0, False, 0
        for lr in schedule.lrs:
            optimizer = torch.optim.Adam(trainable, lr=lr, betas=BETAS, eps=ADAM_EPS)
            best, since, n_phases = -1, 0, n_phases + 1
            for _ in range(schedule.max_epochs):
                optimizer.zero_grad()
                logits = model(inputs)[:, -1]
                F.cross_entropy(logits, labels).backward()
                optimizer.step()
                hits = int((logits.argmax(-1) == labels).sum())
                total += 1
                if hits >= need:
                    won = True
                    break
                if hits > best:
                    best, since = hits, 0
                else:
                    since += 1
                    if since >= schedule.patience:
                        break
            best_all = max(best_all, best, hits)
            if won or best < cont:
                break
        rows.append((won, best_all, hits, total, n_phases, model_params(cfg, model)))
    return TrainOutcome(
        seeds=list(seeds),
        success=torch.tensor([r[0] for r in rows]),
        best_acc=torch.tensor([r[1] for r in rows], dtype=torch.float) / n_facts,
        final_acc=torch.tensor([r[2] for r in rows], dtype=torch.float) / n_facts,
        epochs=torch.tensor([r[3] for r in rows]),
        phases=torch.tensor([r[4] for r in rows]),
        params={k: torch.stack([r[5][k] for r in rows]) for k in rows[0][5]},
    )
