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


def _train(
    params: list[Tensor],
    frozen: tuple[Tensor, ...],
    forward,
    labels: Tensor,
    cfg: ChallengeTrainConfig,
    *,
    score_only: bool = False,
) -> tuple[Tensor, list[Tensor]]:
    """Train stacked models by the recipe; returns (each model's best accuracy, the final weights).

    `forward(params, frozen)` gives the logits; `frozen` holds per-model inputs, sliced with the models. With
    `score_only` (a search needs only the best accuracy over the stack), models out of patience leave the
    stack, in batches of an eighth of it so the copies stay few, and the run ends at the first perfect model:
    the best over the stack is unchanged, a model's own best is a lower bound and the weights are not kept.
    """
    params = [p.detach().clone().requires_grad_(True) for p in params]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    best_of = torch.zeros(params[0].shape[0])
    rows = torch.arange(len(best_of))  # each stacked model's index in the input
    best, stale, done = best_of.clone(), torch.zeros_like(rows), torch.zeros_like(rows, dtype=torch.bool)
    for _ in range(cfg.max_epochs):
        logits = forward(params, frozen)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.repeat(len(rows)), reduction="sum")
        opt.zero_grad(set_to_none=True)
        (loss / labels.numel()).backward()
        opt.step()
        acc = stacked_accuracy(logits.detach(), labels)
        improved = (acc > best) & ~done
        best = torch.where(improved, acc, best)
        stale = torch.where(improved, 0, stale + 1)
        done |= (best >= 1.0) | (stale >= cfg.patience)
        if bool(done.all()) or (score_only and bool((best >= 1.0).any())):
            break
        if score_only and int(done.sum()) * 8 >= len(rows):
            keep = (~done).nonzero().squeeze(1)
            state = [opt.state[p] for p in params]
            params = [p.detach()[keep].requires_grad_(True) for p in params]
            opt = torch.optim.Adam(params, lr=cfg.lr)
            for p, st in zip(params, state):
                opt.state[p] = {k: v if k == "step" else v[keep] for k, v in st.items()}
            best_of[rows] = best
            frozen, rows = tuple(f[keep] for f in frozen), rows[keep]
            best, stale, done = best[keep], stale[keep], done[keep]
    best_of[rows] = best
    return best_of, [p.detach() for p in params]


def _unembedding(
    hidden: Tensor, labels: Tensor, n_out: int, cfg: ChallengeTrainConfig, generator, score_only: bool
) -> tuple[Tensor, list[Tensor]]:
    n_models, _, d_mlp = hidden.shape
    bound = d_mlp**-0.5
    U = (torch.rand(n_models, d_mlp, n_out, generator=generator) * 2 - 1) * bound
    return _train([U], (hidden,), lambda ps, fr: fr[0] @ ps[0], labels, cfg, score_only=score_only)


def train_unembedding(
    hidden: Float[Tensor, "model batch d_mlp"],
    labels: Int[Tensor, " batch"],
    n_out: int,
    cfg: ChallengeTrainConfig,
    *,
    generator: torch.Generator,
) -> tuple[Float[Tensor, " model"], Float[Tensor, "model d_mlp n_out"]]:
    """Train U on frozen hidden activations (hybrid and rand-emb); returns (best accuracy, final U)."""
    best, (U,) = _unembedding(hidden, labels, n_out, cfg, generator, score_only=False)
    return best, U


def unembedding_score(
    hidden: Float[Tensor, "model batch d_mlp"],
    labels: Int[Tensor, " batch"],
    n_out: int,
    cfg: ChallengeTrainConfig,
    *,
    generator: torch.Generator,
) -> float:
    """The best accuracy any stacked U reaches: `train_unembedding(...)[0].max()`, with the same draws."""
    return float(_unembedding(hidden, labels, n_out, cfg, generator, score_only=True)[0].max())


def _full(E1: Tensor, E2: Tensor, U: Tensor, inputs: Tensor, labels: Tensor, cfg, score_only: bool):
    forward = lambda ps, fr: hidden_activations(ps[0], ps[1], inputs) @ ps[2]
    return _train([E1, E2, U], (), forward, labels, cfg, score_only=score_only)


def train_full(
    E1: Float[Tensor, "model n_in d_mlp"],
    E2: Float[Tensor, "model n_in d_mlp"],
    U: Float[Tensor, "model d_mlp n_out"],
    inputs: Int[Tensor, "batch 2"],
    labels: Int[Tensor, " batch"],
    cfg: ChallengeTrainConfig,
) -> tuple[Float[Tensor, " model"], tuple[Tensor, Tensor, Tensor]]:
    """Train all weights from the given initial values; returns (best accuracy, final (E1, E2, U))."""
    best, params = _full(E1, E2, U, inputs, labels, cfg, score_only=False)
    return best, tuple(params)  # type: ignore[return-value]


def full_score(
    E1: Float[Tensor, "model n_in d_mlp"],
    E2: Float[Tensor, "model n_in d_mlp"],
    U: Float[Tensor, "model d_mlp n_out"],
    inputs: Int[Tensor, "batch 2"],
    labels: Int[Tensor, " batch"],
    cfg: ChallengeTrainConfig,
) -> float:
    """The best accuracy any stacked model reaches, all weights trained: `train_full(...)[0].max()`."""
    return float(_full(E1, E2, U, inputs, labels, cfg, score_only=True)[0].max())


def random_embeddings(
    n_models: int, n_in: int, d_mlp: int, *, generator: torch.Generator
) -> tuple[Float[Tensor, "model n_in d_mlp"], Float[Tensor, "model n_in d_mlp"]]:
    """Uniform +-1/sqrt(fan_in) embeddings, fan_in = 2 n_in (the folded up-matrix's nn.Linear init)."""
    bound = (2 * n_in) ** -0.5
    E1 = (torch.rand(n_models, n_in, d_mlp, generator=generator) * 2 - 1) * bound
    E2 = (torch.rand(n_models, n_in, d_mlp, generator=generator) * 2 - 1) * bound
    return E1, E2
