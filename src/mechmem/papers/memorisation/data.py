"""The published fact set: random distinct input pairs with labels spread evenly over the outputs.

Rule (Linsefors & Bushnaq, `models.generate_facts`): enumerate all n_in^2 ordered pairs (t1, t2) in
lexicographic order, shuffle them with `torch.randperm` from a CPU generator seeded `seed`, keep the first
n_facts, give fact i the label i % n_out, then sort the facts by label. Worked example, n_in=2, n_out=2,
n_facts=3, seed=42: randperm(4) = [2, 3, 0, 1] picks pairs (1,0), (1,1), (0,0) with labels 0, 1, 0; sorted by
label the inputs are [[1,0], [0,0], [1,1]] and the labels [0, 0, 1].
"""

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.errors import MechmemError


def generate_facts(
    n_facts: int, n_in: int, n_out: int, seed: int = 42
) -> tuple[Int[Tensor, "n_facts 2"], Int[Tensor, " n_facts"]]:
    """Return (inputs, labels) of the published fact set, on CPU, sorted by label.

    Args:
        n_facts: number of facts, at most n_in**2 (every ordered pair at most once).
        n_in: input vocabulary size.
        n_out: number of labels; fact i (before sorting) gets label i % n_out.
        seed: seed of the CPU generator that shuffles the pairs (42 in the paper).

    Raises:
        MechmemError: if n_facts exceeds n_in**2 or a size is not positive.
    """
    if n_in < 1 or n_out < 1 or n_facts < 1:
        raise MechmemError(f"n_facts, n_in and n_out must be positive, got {n_facts}, {n_in}, {n_out}")
    if n_facts > n_in**2:
        raise MechmemError(f"cannot make {n_facts} distinct facts from {n_in}^2 = {n_in**2} input pairs")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    tokens = torch.arange(n_in)
    pairs = torch.cartesian_prod(tokens, tokens)
    inputs = pairs[torch.randperm(n_in**2, generator=generator)[:n_facts]]
    labels = torch.arange(n_facts) % n_out
    # The published code uses the default (unstable) argsort; keep it, since the stable sort orders ties
    # differently for large n_facts and the fact order fixes which facts a capacity search sees.
    order = torch.argsort(labels)
    return inputs[order], labels[order]
