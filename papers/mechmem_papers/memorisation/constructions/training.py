"""Full-batch training of stacked challenge models, in the challenge's four modes.

Modes (Linsefors & Bushnaq, "Results"): `trained` (E1, E2, U all learned), `hybrid` (constructed E1, E2
frozen, U learned), `rand_emb` (random uniform E1, E2 frozen, U learned) and `hand_coded` (nothing learned).
Training is their recipe: Adam lr 1e-2, full batch, cross-entropy, at most 5,000 epochs, stop at 100% accuracy
or after 100 epochs without improvement, and a model is judged on the best argmax accuracy it reached
(measured on the logits of each step's forward pass, before the update). No biases, as in the challenge
architecture (the authors' code also trains an output bias; see the report).

Stacked models are trained as one: the loss is the sum of the per-model mean losses and Adam is elementwise,
so each model follows exactly the trajectory it would follow alone. Once a model has stopped (perfect or out
of patience) its best accuracy is frozen, even though its weights keep moving with the others. The searches
need only the best accuracy of the stack (`unembedding_score`, `full_score`): there stopped models leave the
stack, which changes no other model's trajectory, and training ends once one model is perfect.

Not the project's one training loop (`mechmem.training.train`, a task's stream of batches for a fixed number
of steps, one model): a different algorithm, many stacked models on one full batch with per-model early
stopping.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.config import ConfigMixin

MODES = ("trained", "hybrid", "rand_emb", "hand_coded")


@dataclass(frozen=True)
class ChallengeTrainConfig(ConfigMixin):
    """The challenge's training recipe."""

    lr: float = 1e-2
    """Adam learning rate."""
    max_epochs: int = 5000
    """Upper limit on full-batch epochs."""
    patience: int = 100
    """Stop a model after this many epochs without a new best accuracy."""


def stacked_accuracy(
    logits: Float[Tensor, "model batch d_vocab_out"], labels: Int[Tensor, " batch"]
) -> Float[Tensor, " model"]:
    """Argmax accuracy of every stacked model (ties go to the lowest label, as torch.argmax does)."""
    return (logits.argmax(dim=-1) == labels).float().mean(dim=-1)


def hidden_activations(
    E1: Float[Tensor, "model n_in d_mlp"],
    E2: Float[Tensor, "model n_in d_mlp"],
    inputs: Int[Tensor, "batch 2"],
) -> Float[Tensor, "model batch d_mlp"]:
    """ReLU(E1[t1] + E2[t2]) for every stacked model."""
    return torch.relu(E1[:, inputs[:, 0]] + E2[:, inputs[:, 1]])


def _run(params: list[Tensor], forward, labels: Tensor, cfg: ChallengeTrainConfig) -> Tensor:
    opt = torch.optim.Adam(params, lr=cfg.lr)
    n_models = params[0].shape[0]
    best = torch.zeros(n_models)
    stale = torch.zeros(n_models, dtype=torch.long)
    done = torch.zeros(n_models, dtype=torch.bool)
    for _ in range(cfg.max_epochs):
        logits = forward()
        loss = (
            F.cross_entropy(logits.flatten(0, 1), labels.repeat(n_models), reduction="sum") / labels.numel()
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = stacked_accuracy(logits.detach(), labels)
        improved = (acc > best) & ~done
        best = torch.where(improved, acc, best)
        stale = torch.where(improved, 0, stale + 1)
        done |= (best >= 1.0) | (stale >= cfg.patience)
        if bool(done.all()):
            break
    return best


def _score(
    params: list[Tensor], frozen: tuple[Tensor, ...], forward, labels: Tensor, cfg: ChallengeTrainConfig
) -> float:
    """`_run(...).max()` without training what cannot change it: models out of patience leave the stack
    (in batches of an eighth of it, so the copies stay few), and the run ends at the first perfect model.
    `forward(params, frozen)` gives the logits; `frozen` holds per-model inputs that are sliced alongside."""
    params = [p.detach().clone().requires_grad_(True) for p in params]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    best = torch.zeros(params[0].shape[0])
    stale = torch.zeros_like(best, dtype=torch.long)
    top = 0.0
    for _ in range(cfg.max_epochs):
        logits = forward(params, frozen)
        loss = (
            F.cross_entropy(logits.flatten(0, 1), labels.repeat(len(best)), reduction="sum") / labels.numel()
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = stacked_accuracy(logits.detach(), labels)
        live = stale < cfg.patience
        improved = (acc > best) & live
        best = torch.where(improved, acc, best)
        stale = torch.where(improved, 0, stale + 1)
        top = max(top, float(best.max()))
        live = stale < cfg.patience
        if top >= 1.0 or not bool(live.any()):
            break
        if int((~live).sum()) * 8 >= len(best):
            keep = live.nonzero().squeeze(1)
            state = [opt.state[p] for p in params]
            params = [p.detach()[keep].requires_grad_(True) for p in params]
            opt = torch.optim.Adam(params, lr=cfg.lr)
            for p, st in zip(params, state):
                opt.state[p] = {k: v if k == "step" else v[keep] for k, v in st.items()}
            frozen = tuple(f[keep] for f in frozen)
            best, stale = best[keep], stale[keep]
    return top


def unembedding_score(
    hidden: Float[Tensor, "model batch d_mlp"],
    labels: Int[Tensor, " batch"],
    n_out: int,
    cfg: ChallengeTrainConfig,
    *,
    generator: torch.Generator,
) -> float:
    """The best accuracy any stacked U reaches: `train_unembedding(...)[0].max()`, with the same draws."""
    n_models, _, d_mlp = hidden.shape
    bound = d_mlp**-0.5
    U = (torch.rand(n_models, d_mlp, n_out, generator=generator) * 2 - 1) * bound
    return _score([U], (hidden,), lambda ps, fr: fr[0] @ ps[0], labels, cfg)


def full_score(
    E1: Float[Tensor, "model n_in d_mlp"],
    E2: Float[Tensor, "model n_in d_mlp"],
    U: Float[Tensor, "model d_mlp n_out"],
    inputs: Int[Tensor, "batch 2"],
    labels: Int[Tensor, " batch"],
    cfg: ChallengeTrainConfig,
) -> float:
    """The best accuracy any stacked model reaches, all weights trained: `train_full(...)[0].max()`."""
    forward = lambda ps, fr: hidden_activations(ps[0], ps[1], inputs) @ ps[2]
    return _score([E1, E2, U], (), forward, labels, cfg)


def train_unembedding(
    hidden: Float[Tensor, "model batch d_mlp"],
    labels: Int[Tensor, " batch"],
    n_out: int,
    cfg: ChallengeTrainConfig,
    *,
    generator: torch.Generator,
) -> tuple[Float[Tensor, " model"], Float[Tensor, "model d_mlp n_out"]]:
    """Train U on frozen hidden activations (hybrid and rand-emb); returns (best accuracy, final U)."""
    n_models, _, d_mlp = hidden.shape
    bound = d_mlp**-0.5
    U = ((torch.rand(n_models, d_mlp, n_out, generator=generator) * 2 - 1) * bound).requires_grad_(True)
    best = _run([U], lambda: hidden @ U, labels, cfg)
    return best, U.detach()


def train_full(
    E1: Float[Tensor, "model n_in d_mlp"],
    E2: Float[Tensor, "model n_in d_mlp"],
    U: Float[Tensor, "model d_mlp n_out"],
    inputs: Int[Tensor, "batch 2"],
    labels: Int[Tensor, " batch"],
    cfg: ChallengeTrainConfig,
) -> tuple[Float[Tensor, " model"], tuple[Tensor, Tensor, Tensor]]:
    """Train all weights from the given initial values; returns (best accuracy, final (E1, E2, U))."""
    params = [p.detach().clone().requires_grad_(True) for p in (E1, E2, U)]
    best = _run(params, lambda: hidden_activations(params[0], params[1], inputs) @ params[2], labels, cfg)
    return best, tuple(p.detach() for p in params)  # type: ignore[return-value]


def random_embeddings(
    n_models: int, n_in: int, d_mlp: int, *, generator: torch.Generator
) -> tuple[Float[Tensor, "model n_in d_mlp"], Float[Tensor, "model n_in d_mlp"]]:
    """Uniform +-1/sqrt(fan_in) embeddings, fan_in = 2 n_in (the folded up-matrix's nn.Linear init)."""
    bound = (2 * n_in) ** -0.5
    E1 = (torch.rand(n_models, n_in, d_mlp, generator=generator) * 2 - 1) * bound
    E2 = (torch.rand(n_models, n_in, d_mlp, generator=generator) * 2 - 1) * bound
    return E1, E2
