"""Associative-memory recall probes (Bietti et al. 2023, generalised).

A weight matrix W is read as an associative memory: it should map each input embedding u_i to the output
embedding v_j of its target partner. With TransformerLens's row-vector convention the score of output j for input
i is (u_i W) . v_j, and the recall R is the fraction of inputs whose best-scoring output is the target:

    R = mean_i [ argmax_j (u_i W v_j^T) == target(i) ]

Intuition: if W = sum_k v_{t(k)}^T u_k (a sum of outer products, written transposed for row vectors) and the
embeddings are near-orthogonal, each input recalls its partner and R = 1; a random W gives R near 1 / #outputs.
Caveat: R only looks at the argmax; a memory that is right but barely (small margin) still counts.
"""

import torch
from jaxtyping import Float, Int
from torch import Tensor


def recall_scores(
    inputs: Float[Tensor, "n_in d_in"], matrix: Float[Tensor, "d_in d_out"], outputs: Float[Tensor, "n_out d_out"]
) -> Float[Tensor, "n_in n_out"]:
    """Scores (u_i W) . v_j for every input i and output j. `matrix` may be a TL `FactoredMatrix`."""
    mapped = inputs @ matrix
    if not isinstance(mapped, Tensor):  # FactoredMatrix @ tensor returns a tensor; keep both paths explicit
        mapped = mapped.AB
    return mapped @ outputs.T


def recall_rate(
    inputs: Float[Tensor, "n_in d_in"],
    matrix: Float[Tensor, "d_in d_out"],
    outputs: Float[Tensor, "n_out d_out"],
    targets: Int[Tensor, " n_in"],
) -> float:
    """Fraction of inputs whose highest-scoring output is their target."""
    scores = recall_scores(inputs, matrix, outputs)
    return float((scores.argmax(-1) == targets.to(scores.device)).float().mean())
