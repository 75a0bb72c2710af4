"""The challenge model of Linsefors & Bushnaq (their Figure 4), as a hookable TransformerLens-style module.

    h = ReLU(E1[t1] + E2[t2])        E1, E2: n_in x d_mlp   (the MLP's input matrix folded into two
    embeddings) logits = h U (+ b)               U: d_mlp x n_out       (no biases unless `output_bias`, no
    norms)

Every weight carries a leading `model` axis so that many initialisations (or many constructions) run as one
batched model; a single model simply has n_models = 1. Hook points: `hook_embed1`, `hook_embed2`
(`model batch d_mlp`, the two embedding rows), `mlp.hook_pre`, `mlp.hook_post` (pre- and post-ReLU) and
`hook_logits` (`model batch d_vocab_out`).
"""

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from mechmem.config import ConfigMixin
from mechmem.errors import MechmemError
from mechmem.models.backend import HookedRootModule, HookPoint
from mechmem.models.registry import register_architecture

ARCH = "challenge_mlp"


@dataclass(frozen=True)
class ChallengeConfig(ConfigMixin):
    """Sizes of the two-embedding ReLU memory model."""

    n_in: int
    """Input vocabulary size (both positions share it)."""
    d_mlp: int
    """Hidden (ReLU) width."""
    n_out: int
    """Number of labels."""
    n_models: int = 1
    """Independent models stacked along a leading axis."""
    output_bias: bool = False
    """Add a learned/constructed bias to the logits (Appendix A's d_mlp = n_in variant only)."""
    arch: str = ARCH
    """Architecture name used by the model registry."""

    def __post_init__(self) -> None:
        if min(self.n_in, self.d_mlp, self.n_out, self.n_models) < 1:
            raise MechmemError(f"challenge model sizes must be positive, got {self}")
        if self.arch != ARCH:
            raise MechmemError(f"ChallengeConfig.arch must be {ARCH!r}, got {self.arch!r}")


class _MLPHooks(nn.Module):
    """Holds the MLP's hook points so they are named `mlp.hook_pre` / `mlp.hook_post`."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pre = HookPoint()
        self.hook_post = HookPoint()


class ChallengeMLP(HookedRootModule):
    """n_models stacked copies of h = ReLU(E1[t1] + E2[t2]), logits = h U."""

    config_cls: ClassVar[type] = ChallengeConfig

    def __init__(self, cfg: ChallengeConfig, *, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        m = cfg.n_models
        # nn.Linear-style uniform init, as in the authors' code: the folded up-matrix sees a 2*n_in one-hot
        # input.
        bound_in, bound_out = 1 / math.sqrt(2 * cfg.n_in), 1 / math.sqrt(cfg.d_mlp)

        def uniform(*shape: int, bound: float) -> nn.Parameter:
            return nn.Parameter((torch.rand(*shape, generator=generator) * 2 - 1) * bound)

        self.E1 = uniform(m, cfg.n_in, cfg.d_mlp, bound=bound_in)
        self.E2 = uniform(m, cfg.n_in, cfg.d_mlp, bound=bound_in)
        self.U = uniform(m, cfg.d_mlp, cfg.n_out, bound=bound_out)
        self.b_U = nn.Parameter(torch.zeros(m, cfg.n_out)) if cfg.output_bias else None
        self.hook_embed1 = HookPoint()
        self.hook_embed2 = HookPoint()
        self.mlp = _MLPHooks()
        self.hook_logits = HookPoint()
        self.setup()

    def forward(self, tokens: Int[Tensor, "batch 2"]) -> Float[Tensor, "model batch d_vocab_out"]:
        """Logits of every stacked model for a batch of (t1, t2) pairs."""
        if tokens.ndim != 2 or tokens.shape[1] != 2:
            raise MechmemError(f"expected tokens of shape (batch, 2), got {tuple(tokens.shape)}")
        e1 = self.hook_embed1(self.E1[:, tokens[:, 0]])
        e2 = self.hook_embed2(self.E2[:, tokens[:, 1]])
        pre = self.mlp.hook_pre(e1 + e2)
        post = self.mlp.hook_post(torch.relu(pre))
        logits = post @ self.U
        if self.b_U is not None:
            logits = logits + self.b_U[:, None, :]
        return self.hook_logits(logits)

    @torch.no_grad()
    def set_weights(
        self,
        E1: Float[Tensor, "model n_in d_mlp"],
        E2: Float[Tensor, "model n_in d_mlp"],
        U: Float[Tensor, "model d_mlp d_vocab_out"] | None = None,
        b_U: Float[Tensor, "model d_vocab_out"] | None = None,
    ) -> "ChallengeMLP":
        """Overwrite the weights with constructed ones (U, b_U left as they are when None)."""
        self.E1.copy_(E1)
        self.E2.copy_(E2)
        if U is not None:
            self.U.copy_(U)
        if b_U is not None:
            if self.b_U is None:
                raise MechmemError("this model has no output bias (build it with output_bias=True)")
            self.b_U.copy_(b_U)
        return self


def build_challenge_model(cfg: ChallengeConfig, *, generator: torch.Generator | None = None) -> ChallengeMLP:
    """Registry builder: a freshly initialised challenge model."""
    return ChallengeMLP(cfg, generator=generator)


register_architecture(ARCH, ChallengeConfig, build_challenge_model)
