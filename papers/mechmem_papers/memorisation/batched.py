"""Train many initialisations of one facts variant at once, with the published schedule.

The published protocol trains each initialisation separately: full-batch Adam on cross-entropy, lr 1e-2 for up
to `max_epochs` epochs, stopping at 100% argmax accuracy or after `patience` epochs without a new best
accuracy; if the best accuracy reached `continue_above` (0.95) but not 100%, training continues from the same
weights with a fresh Adam at lr 3e-3, then 1e-3, under the same rule. Accuracy is measured on the logits of
each step's forward pass (before the update), as in the authors' loop.

`train_batched` runs all initialisations as one stacked model: every parameter carries a leading `init` axis,
one forward/backward serves all inits, and Adam is applied elementwise with per-init learning rate, step count
and phase. Inits that finish are dropped from the stack, so stragglers do not pay for the rest. The loss
gradient is `fused.loss_grad` (the per-fact work with a hand-written backward). `train_reference` is the plain
per-init loop (a hooked model and `torch.optim.Adam`); tests check the two agree.

Why not the project's one training loop (`mechmem.training.train`): that loop streams fresh batches from a
task for a fixed number of steps, one model at a time. This is a different algorithm: many inits in one
tensor, a fixed full batch, per-init stopping, phases and restarts; `train_reference` is the naive loop it is
tested against.

A long training (hours on a CPU at the published schedule) can save its whole state every few minutes
(`snapshots.Snapshots`); started again with the same snapshot file, it goes on from the last save and ends
exactly as an uninterrupted run does.
"""

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechmem.config import ConfigMixin
from mechmem.models.facts import (
    FactsModelConfig,
    Params,
    init_params,
    model_from_params,
    model_params,
    readout,
)
from mechmem_papers.memorisation.fused import FactBatch, loss_grad, mixing_tables
from mechmem_papers.memorisation.heap import cpu_training
from mechmem_papers.memorisation.snapshots import Snapshots, load_snapshot, save_snapshot

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
    earlier_seconds: float = 0.0
    """Wall seconds this training ran in earlier, interrupted runs (from its snapshot)."""

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


STACK_STATE = ("flat", "m", "v", "ids", "step", "phase", "phase_epoch", "best", "since")


def fact_logits(
    cfg: FactsModelConfig, params: Params, tokens: Int[Tensor, "n 2"]
) -> Float[Tensor, "init n d_vocab_out"]:
    """Last-position logits of every fact from the per-vocabulary mixing tables (`fused.mixing_tables`), with
    autograd: resid_mid = second[t2] + p0 (first[t1] - minus[t2]), p0 = sigmoid(gap[t2, t1]) the attention on
    the first token. Equal to `forward_params(cfg, params, tokens, last_only=True)[:, :, 0]` (tests check it);
    the
    trainer's hand-written step (`fused.loss_grad`) is checked against its gradient."""
    tables = mixing_tables(cfg, params)
    first, second = tokens[:, 0], tokens[:, 1]
    if "gap" in tables:
        p0 = torch.sigmoid(tables["gap"][:, second, first])[..., None]
        resid = tables["second"][:, second] + p0 * (tables["first"][:, first] - tables["minus"][:, second])
    else:  # a constant attention weight is folded into the tables
        resid = tables["first"][:, first] + tables["second"][:, second]
    return readout(cfg, params, resid[:, :, None, :])[:, :, 0]


def _hits_needed(n_facts: int, target_acc: float) -> int:
    return math.ceil(target_acc * n_facts - 1e-9)


class ParamStack:
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
        for name in STACK_STATE[1:]:
            setattr(self, name, getattr(self, name)[rows])

    def state(self) -> dict[str, Tensor]:
        return {name: getattr(self, name).detach().cpu() for name in STACK_STATE}

    def load_state(self, state: dict[str, Tensor]) -> None:
        device = self.flat.device
        for name in STACK_STATE[1:]:
            setattr(self, name, state[name].to(device))
        self.flat = state["flat"].to(device).requires_grad_(True)


def train_batched(
    cfg: FactsModelConfig,
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    seeds: list[int],
    schedule: Schedule = Schedule(),
    *,
    device: str | torch.device = "cpu",
    snapshots: Snapshots | None = None,
) -> TrainOutcome:
    """Train one init per seed as one stacked model.

    Each init is drawn from `torch.Generator().manual_seed(seed)`. With `snapshots`, the state is saved every
    `snapshots.every` seconds and when the run is interrupted (Ctrl-C), and a run started with an existing
    snapshot file goes on from it.
    """
    device = torch.device(device)
    n_facts = labels.shape[0]
    need = torch.full((len(seeds),), _hits_needed(n_facts, schedule.target_acc))
    cont = torch.full((len(seeds),), _hits_needed(n_facts, schedule.continue_above))
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in seeds]
    final: Params = {k: torch.stack([p[k] for p in inits]) for k in inits[0]}
    inputs, labels = inputs.to(device), labels.to(device)
    batch = FactBatch(inputs, labels, cfg.n_in, cfg.n_out, final["embed.W_E"].dtype)
    totals, success, earlier = _train_stack(cfg, batch, final, need, cont, schedule, device, snapshots)
    return TrainOutcome(
        seeds=list(seeds),
        success=success,
        best_acc=totals["best"].float() / n_facts,
        final_acc=totals["last"].float() / n_facts,
        epochs=totals["epochs"],
        phases=totals["phases"],
        params=final,
        earlier_seconds=earlier,
    )


def train_counts(
    cfg: FactsModelConfig,
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    counts: list[int],
    seeds: list[int],
    schedule: Schedule = Schedule(),
    *,
    device: str | torch.device = "cpu",
) -> dict[int, TrainOutcome]:
    """`train_batched` on the first n facts, for every n in `counts`, all in one stack; n -> its outcome.

    `inputs`/`labels` are the facts in the order drawn (`data.fact_sequence`), so the first n are the set of
    `generate_facts(n)`. Row (n, seed) starts from the seed's init and sees only its first n facts: the same
    algorithm as one `train_batched` per n, in one tensor (a GPU runs the many fact counts of a capacity
    search at the cost of its slowest). Float sums run in another order than `train_batched`'s, so single
    epochs may differ in the last bits.
    """
    device = torch.device(device)
    counts = list(dict.fromkeys(counts))
    rows = torch.tensor([n for n in counts for _ in seeds])
    need = torch.tensor([_hits_needed(int(n), schedule.target_acc) for n in rows])
    cont = torch.tensor([_hits_needed(int(n), schedule.continue_above) for n in rows])
    inits = [init_params(cfg, generator=torch.Generator().manual_seed(s)) for s in seeds]
    final: Params = {k: torch.stack([p[k] for p in inits] * len(counts)) for k in inits[0]}
    inputs, labels = inputs[: max(counts)].to(device), labels[: max(counts)].to(device)
    dtype = final["embed.W_E"].dtype
    batch = FactBatch(inputs, labels, cfg.n_in, cfg.n_out, dtype, counts=rows.to(device))
    totals, success, _ = _train_stack(cfg, batch, final, need, cont, schedule, device)
    out, k = {}, len(seeds)
    for i, n in enumerate(counts):
        part = slice(i * k, (i + 1) * k)
        out[n] = TrainOutcome(
            seeds=list(seeds),
            success=success[part],
            best_acc=totals["best"][part].float() / n,
            final_acc=totals["last"][part].float() / n,
            epochs=totals["epochs"][part],
            phases=totals["phases"][part],
            params={name: p[part] for name, p in final.items()},
        )
    return out


def _train_stack(
    cfg: FactsModelConfig,
    batch: FactBatch,
    final: Params,
    need: Int[Tensor, " row"],
    cont: Int[Tensor, " row"],
    schedule: Schedule,
    device: torch.device,
    snapshots: Snapshots | None = None,
) -> tuple[dict[str, Tensor], Tensor, float]:
    """The schedule on every row of `final` (initial weights, overwritten with each row's final weights);
    returns the per-row totals (best, last, epochs, phases), successes, and the seconds run before a resumed
    snapshot. `need` and `cont` are the hits each row needs to succeed and to go on to the next phase.
    `snapshots`: see `train_batched`."""
    with cpu_training(device):  # denormals flushed, freed memory kept (`heap.cpu_training`)
        n_rows = need.shape[0]
        stack, lr_table = ParamStack(final, device), torch.tensor(schedule.lrs, device=device)
        need_all, cont_all = need.to(device), cont.to(device)
        totals = {k: torch.zeros(n_rows, dtype=torch.long) for k in ("best", "last", "epochs", "phases")}
        success = torch.zeros(n_rows, dtype=torch.bool)
        full, need, earlier = batch, need_all, 0.0
        if snapshots is not None and snapshots.path.exists():
            resumed = load_snapshot(snapshots, final, totals, success)
            stack.load_state(resumed.stack)
            batch, need, earlier = full.select(stack.ids), need_all[stack.ids], resumed.seconds
        started = saved = time.monotonic()
        while stack.ids.numel():
            if snapshots is not None and time.monotonic() - saved >= snapshots.every:
                ran = earlier + time.monotonic() - started
                save_snapshot(snapshots, stack.state(), final, totals, success, ran)
                saved = time.monotonic()
            try:
                grad, hits = loss_grad(cfg, stack.flat, stack.params(), batch)
            except KeyboardInterrupt:  # Ctrl-C: keep every finished epoch, then stop
                if snapshots is not None:
                    ran = earlier + time.monotonic() - started
                    save_snapshot(snapshots, stack.state(), final, totals, success, ran)
                raise
            with torch.no_grad():
                stack.adam_step(grad, lr_table)
                stack.track(hits)
                won = hits >= need
                over = won | (stack.since >= schedule.patience) | (stack.phase_epoch >= schedule.max_epochs)
                if not bool(over.any()):
                    continue
                # Bookkeeping on the (rare) epochs where some row ends a phase.
                go_on = (
                    over & ~won & (stack.best >= cont_all[stack.ids]) & (stack.phase + 1 < len(schedule.lrs))
                )
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
                    batch, need = full.select(stack.ids), need_all[stack.ids]
        return totals, success, earlier


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
