"""Appendix A of Linsefors & Bushnaq: all n_in^2 facts stored exactly when d_mlp = n_in + 1.

Selector neuron i < n_in fires only when the first token is i: E1[a, i] = 0 if i == a else -n_out, while the
second token writes the fact's label (shifted up by one) into it, E2[b, i] = L[i, b] + 1 <= n_out. The last
neuron is always on at 1 (E1 = E2 = 1/2). With U[i, c] = c + 1 and U[bias, c] = -(c + 1)^2 / 2 the logits are
    logit_c = (c + 1)(L + 1) - (c + 1)^2 / 2 = -((c + 1) - (L + 1))^2 / 2 + const,
a downward parabola peaked at c = L, so argmax recovers every label. With an output bias the always-on neuron
is unnecessary: d_mlp = n_in and b_U[c] = -(c + 1)^2 / 2.
"""

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.errors import MechmemError


def label_table(
    inputs: Int[Tensor, "n_facts 2"], labels: Int[Tensor, " n_facts"], n_in: int
) -> Int[Tensor, "n_in n_in"]:
    """L[a, b] = label of fact (a, b); pairs that are not facts get label 0."""
    table = torch.zeros(n_in, n_in, dtype=torch.long)
    table[inputs[:, 0], inputs[:, 1]] = labels
    return table


def appendix_a(
    inputs: Int[Tensor, "n_facts 2"],
    labels: Int[Tensor, " n_facts"],
    n_in: int,
    n_out: int,
    *,
    output_bias: bool = False,
) -> tuple[
    Float[Tensor, "n_in d_mlp"],
    Float[Tensor, "n_in d_mlp"],
    Float[Tensor, "d_mlp n_out"],
    Float[Tensor, " n_out"] | None,
]:
    """(E1, E2, U, b_U) of the Appendix A construction; d_mlp = n_in + 1, or n_in with `output_bias`."""
    if int(labels.max()) >= n_out or int(inputs.max()) >= n_in:
        raise MechmemError("facts use tokens or labels outside n_in / n_out")
    table = label_table(inputs, labels, n_in).float()
    ramp = torch.arange(1, n_out + 1, dtype=torch.float32)
    E1 = torch.full((n_in, n_in), -float(n_out))
    E1.fill_diagonal_(0.0)
    E2 = (table + 1).T.contiguous()  # E2[b, i] = L[i, b] + 1
    U = ramp.expand(n_in, n_out).clone()
    parabola = -(ramp**2) / 2
    if output_bias:
        return E1, E2, U, parabola
    half = torch.full((n_in, 1), 0.5)
    E1 = torch.cat([E1, half], dim=1)
    E2 = torch.cat([E2, half], dim=1)
    U = torch.cat([U, parabola[None]], dim=0)
    return E1, E2, U, None
