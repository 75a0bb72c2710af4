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
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.config import ConfigMixin
from mechmem.papers.memorisation.models import (
    EPS,
    FactsModelConfig,
    Params,
    init_params,
    model_from_params,
    model_params,
    readout,
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


def _rows(one_hot: Tensor, table: Tensor) -> Tensor:
    """table[init, t] for each one-hot row t, as one matmul over all inits: [n, n_in] x [init, n_in, d]."""
    n_init, n_in, d = table.shape
    rows = (one_hot @ table.transpose(0, 1).reshape(n_in, n_init * d)).view(-1, n_init, d)
    # Contiguous in [init, n, d]: elementwise results inherit their input's layout, and bmm would copy each one.
    return rows.transpose(0, 1).contiguous()


def _norm_rows(x: Tensor, gain: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * gain[:, None, :]


def fact_logits(
    cfg: FactsModelConfig, params: Params, tokens: Int[Tensor, "n 2"]
) -> Float[Tensor, "init n d_vocab_out"]:
    """Last-position logits of every fact, with the two-token mixing factorised over the vocabulary.

    Equal to `forward_params(cfg, params, tokens, last_only=True)[:, :, 0]` (tests check it) but cheaper: with two
    positions, every per-position quantity (norm, query, key, value times W_O) depends on one token only, so it
    is computed once per vocabulary entry and gathered; per fact only the attention weight on the first token,
    p0 = sigmoid(q(t2).k0(t1) - q(t2).k1(t2)) / sqrt(d), and the mixed vector remain:
    resid_mid = x1[t2] + o1[t2] + p0 (o0[t1] - o1[t2]), with x_p = W_E + W_pos[p], o_p = ln1(x_p) W_V W_O.

    Token tables are gathered by one-hot matmuls (one GEMM over all inits; a gather's backward is slower).
    """
    first, second = (F.one_hot(tokens[:, i], cfg.n_in).to(params["embed.W_E"].dtype) for i in (0, 1))
    W_E = params["embed.W_E"]
    if cfg.mixing == "2emb":  # W_E[t1] + W_E2[t2] as one one-hot product
        resid = _rows(torch.cat([first, second], 1), torch.cat([W_E, params["embed.W_E2"]], 1))
        return readout(cfg, params, resid[:, :, None, :])[:, :, 0]
    x0, x1 = W_E + params["pos_embed.W_pos"][:, :1], W_E + params["pos_embed.W_pos"][:, 1:]
    n0, n1 = x0, x1
    if cfg.norms:
        n0, n1 = _norm_rows(x0, params["blocks.0.ln1.w"]), _norm_rows(x1, params["blocks.0.ln1.w"])
    W_VO = params["blocks.0.attn.W_V"][:, 0] @ params["blocks.0.attn.W_O"][:, 0]
    o0, o1 = n0 @ W_VO, n1 @ W_VO
    if cfg.mixing == "attn":
        q1 = n1 @ params["blocks.0.attn.W_Q"][:, 0]
        k0, k1 = n0 @ params["blocks.0.attn.W_K"][:, 0], n1 @ params["blocks.0.attn.W_K"][:, 0]
        # gap[t2, t1] = score(first) - score(second) for the fact (t1, t2); read per fact as a one-hot product.
        gap = (q1 @ k0.transpose(1, 2) - (q1 * k1).sum(-1, keepdim=True)) / math.sqrt(cfg.d_model)
        p0 = torch.sigmoid(gap.flatten(1)[:, tokens[:, 1] * cfg.n_in + tokens[:, 0]])[..., None]
    else:
        p0 = 0.5
    resid = _rows(second, x1 + o1) + p0 * (_rows(first, o0) - _rows(second, o1))
    return readout(cfg, params, resid[:, :, None, :])[:, :, 0]


def _grad_fn(cfg: FactsModelConfig, stack: "_Stack") -> Callable[..., tuple[Tensor, Tensor]]:
    """(flat [init, n_params], tokens, labels) -> (gradient of the summed per-init mean losses, hits [init])."""
    names, shapes, sizes = list(stack.names), list(stack.shapes), list(stack.sizes)

    def grad_and_hits(flat: Tensor, tokens: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        params = {k: t.reshape(flat.shape[0], *shape) for k, t, shape in zip(names, flat.split(sizes, 1), shapes)}
        logits = fact_logits(cfg, params, tokens)
        n_init, n_facts = logits.shape[:2]
        # Each init's mean loss, summed: one cross-entropy over all rows, scaled by 1 / n_facts.
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.repeat(n_init), reduction="sum")
        (grad,) = torch.autograd.grad(loss / n_facts, flat)
        return grad, _hits(logits.detach(), labels)

    return grad_and_hits


def _hits(logits: Float[Tensor, "init n d_vocab_out"], labels: Int[Tensor, " n"]) -> Int[Tensor, " init"]:
    """Facts whose label has the largest logit, per init: argmax accuracy (argmax over 16 labels is a slow CPU
    kernel; this differs from it only on exact ties at the maximum, where argmax takes the lowest label)."""
    at_label = logits.gather(-1, labels[None, :, None].expand(logits.shape[0], -1, 1))[..., 0]
    return (at_label >= logits.amax(-1)).sum(1)


def _hits_needed(n_facts: int, target_acc: float) -> int:
    return math.ceil(target_acc * n_facts - 1e-9)


class _Stack:
    """The inits still training: one row each of a flat [init, n_params] leaf (so Adam is a handful of ops),
    with per-row Adam moments, step count, phase and patience state."""

    def __init__(self, final: Params, device: torch.device) -> None:
        self.names = list(final)
        self.shapes = [final[k].shape[1:] for k in self.names]
        self.sizes = [math.prod(shape) for shape in self.shapes]
        n = next(iter(final.values())).shape[0]
        rows = torch.cat([final[k].reshape(n, -1) for k in self.names], dim=1)
        self.flat = rows.to(device).requires_grad_(True)
        self.m, self.v = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.ids = torch.arange(n, device=device)  # original index of each active row
        self.step = torch.zeros(n, device=device)
        self.phase = torch.zeros(n, dtype=torch.long, device=device)
        self.phase_epoch = torch.zeros(n, dtype=torch.long, device=device)
        self.best = torch.full((n,), -1, dtype=torch.long, device=device)
        self.since = torch.zeros(n, dtype=torch.long, device=device)

    def params(self, rows: Tensor | None = None) -> Params:
        rows = self.flat if rows is None else rows
        parts = rows.split(self.sizes, 1)
        return {k: t.reshape(rows.shape[0], *shape) for k, t, shape in zip(self.names, parts, self.shapes)}

    def adam_step(self, grad: Tensor, lr_table: Tensor) -> None:
        b1, b2 = BETAS
        self.step += 1
        bc1, bc2 = 1 - b1**self.step, 1 - b2**self.step
        lr = lr_table[self.phase]
        self.m.lerp_(grad, 1 - b1)
        self.v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (self.v.sqrt() / bc2.sqrt()[:, None]).add_(ADAM_EPS)
        self.flat.addcdiv_(self.m, denom * (bc1 / lr)[:, None], value=-1.0)

    def track(self, hits: Tensor) -> None:
        self.phase_epoch += 1
        self.since = torch.where(hits > self.best, 0, self.since + 1)
        self.best = torch.maximum(self.best, hits)

    def restart(self, rows: Tensor) -> None:
        """Rows that go on to the next lr phase: fresh Adam, fresh patience."""
        for i in torch.nonzero(rows).flatten().tolist():
            self.phase[i] += 1
            self.step[i], self.phase_epoch[i], self.best[i], self.since[i] = 0, 0, -1, 0
            self.m[i], self.v[i] = 0.0, 0.0

    def keep(self, rows: Tensor) -> None:
        self.flat = self.flat[rows].detach().requires_grad_(True)
        for name in ("m", "v", "ids", "step", "phase", "phase_epoch", "best", "since"):
            setattr(self, name, getattr(self, name)[rows])


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
    need, cont = _hits_needed(n_facts, schedule.target_acc), _hits_needed(n_facts, schedule.continue_above)
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in seeds]
    final: Params = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    stack, lr_table = _Stack(final, device), torch.tensor(schedule.lrs, device=device)
    totals = {k: torch.zeros(n_init, dtype=torch.long) for k in ("best", "last", "epochs", "phases")}
    success = torch.zeros(n_init, dtype=torch.bool)
    grad_and_hits = _grad_fn(cfg, stack)
    while stack.ids.numel():
        grad, hits = grad_and_hits(stack.flat, inputs, labels)
        with torch.no_grad():
            stack.adam_step(grad, lr_table)
            stack.track(hits)
            won = hits >= need
            over = won | (stack.since >= schedule.patience) | (stack.phase_epoch >= schedule.max_epochs)
            if not bool(over.any()):
                continue
            # Bookkeeping on the (rare) epochs where some init ends a phase.
            go_on = over & ~won & (stack.best >= cont) & (stack.phase + 1 < len(schedule.lrs))
            finished, cpu = over & ~go_on, stack.ids.cpu()
            totals["best"][cpu] = torch.maximum(totals["best"][cpu], stack.best.cpu())
            totals["last"][cpu] = hits.cpu()
            totals["epochs"][cpu] += over.cpu() * stack.phase_epoch.cpu()
            totals["phases"][cpu] = stack.phase.cpu() + 1
            success[cpu] = won.cpu() & finished.cpu()
            stack.restart(go_on)
            if bool(finished.any()):
                for k, p in stack.params(stack.flat[finished].detach().cpu()).items():
                    final[k][cpu[finished.cpu()]] = p
                stack.keep(~finished)
    return TrainOutcome(
        seeds=list(seeds),
        success=success,
        best_acc=totals["best"].float() / n_facts,
        final_acc=totals["last"].float() / n_facts,
        epochs=totals["epochs"],
        phases=totals["phases"],
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
