"""The published fact set: random distinct input pairs with labels spread evenly over the outputs.

Rule (Linsefors & Bushnaq, `models.generate_facts`): enumerate all n_in^2 ordered pairs (t1, t2) in
lexicographic order, shuffle them with `torch.randperm` from a generator seeded `seed`, keep the first
n_facts, give fact i the label i % n_out, then sort the facts by label. Worked example, n_in=2, n_out=2,
n_facts=3, seed=42: randperm(4) = [2, 3, 0, 1] picks pairs (1,0), (1,1), (0,0) with labels 0, 1, 0; sorted by
label the inputs are [[1,0], [0,0], [1,1]] and the labels [0, 0, 1].

The published code draws the permutation on torch's default device, which was CUDA in their runs; a CUDA
generator gives a different permutation from a CPU one with the same seed, so the fact set depends on the
device. `device` chooses it (default "cpu"); results record which one they used (`facts_device`).
"""

import torch
from jaxtyping import Int
from torch import Tensor

from mechmem.errors import MechmemError


def fact_sequence(
    n_facts: int, n_in: int, n_out: int, seed: int = 42, *, device: str = "cpu"
) -> tuple[Int[Tensor, "n_facts 2"], Int[Tensor, " n_facts"]]:
    """The published facts in the order they are drawn, before the sort by label; on CPU.

    The set of `generate_facts(n)` is the first n of these, for every n: the fact sets of a capacity search
    are nested, so one sequence serves every fact count (`batched.train_counts`). Arguments and errors as in
    `generate_facts`.
    """
    if n_in < 1 or n_out < 1 or n_facts < 1:
        raise MechmemError(f"n_facts, n_in and n_out must be positive, got {n_facts}, {n_in}, {n_out}")
    if n_facts > n_in**2:
        raise MechmemError(f"cannot make {n_facts} distinct facts from {n_in}^2 = {n_in**2} input pairs")
    try:
        generator = torch.Generator(device=device).manual_seed(seed)
        perm = torch.randperm(n_in**2, generator=generator, device=device).cpu()
    except (RuntimeError, AssertionError) as err:
        raise MechmemError(f"cannot draw the fact permutation on device {device!r}: {err}") from None
    tokens = torch.arange(n_in)
    pairs = torch.cartesian_prod(tokens, tokens)
    return pairs[perm[:n_facts]], torch.arange(n_facts) % n_out


def generate_facts(
    n_facts: int, n_in: int, n_out: int, seed: int = 42, *, device: str = "cpu"
) -> tuple[Int[Tensor, "n_facts 2"], Int[Tensor, " n_facts"]]:
    """Return (inputs, labels) of the published fact set, on CPU, sorted by label.

    Args:
        n_facts: number of facts, at most n_in**2 (every ordered pair at most once).
        n_in: input vocabulary size.
        n_out: number of labels; fact i (before sorting) gets label i % n_out.
        seed: seed of the generator that shuffles the pairs (42 in the paper).
        device: device of that generator ("cpu", or "cuda" as in the published runs).

    Raises:
        MechmemError: if n_facts exceeds n_in**2, a size is not positive or the device is unavailable.
    """
    inputs, labels = fact_sequence(n_facts, n_in, n_out, seed, device=device)
    # The published code uses the default (unstable) argsort; keep it, since the stable sort orders ties
    # differently for large n_facts and the fact order fixes which facts a capacity search sees.
    order = torch.argsort(labels)
    return inputs[order], labels[order]
