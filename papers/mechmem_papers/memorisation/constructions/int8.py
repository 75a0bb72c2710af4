"""The constructions after int8 rounding: does what a model stores survive 8-bit weights?

Allen-Zhu & Li (ICLR 2025) find that about 2 bits per parameter survive int8 quantisation. Here, for a mode
and size, at the fact count our capacity search found under a criterion, the model's weights are built again
as the search built them (same facts, seeds, grid and training recipe), every weight tensor is rounded to
8-bit integers with one symmetric scale (max |w| -> 127), and the argmax accuracy of the final weights is
measured before and after rounding. The learned modes are judged on their final weights here, where the
search counted the best accuracy reached during training, so "before" can sit below the search's value.
"""

from typing import Any

import torch
from torch import Tensor

from mechmem_papers.memorisation.constructions.evaluators import (
    SweepGrid,
    challenge_facts,
    hand_accuracy,
    hand_settings,
    hybrid_settings,
    key_sizes,
    keyvalue_stack,
    published_stack,
)
from mechmem_papers.memorisation.constructions.experiments import trained_weights
from mechmem_papers.memorisation.constructions.training import hidden_activations, train_unembedding
from mechmem_papers.memorisation.options import INT8_MODES

MODES = INT8_MODES


def int8_rounded(w: Tensor) -> Tensor:
    """`w` rounded to 8-bit integers with one symmetric scale for the tensor (max |w| -> 127), as floats."""
    scale = w.abs().max() / 127
    return w.clone() if scale == 0 else torch.round(w / scale).clamp(-127, 127) * scale


def _best_of(
    stacks: list[tuple[Tensor, Tensor, Tensor]], inputs: Tensor, labels: Tensor
) -> tuple[Tensor, ...]:
    """The (E1, E2, U) of highest accuracy among stacked constructions (the first of equals)."""
    best, weights = -1.0, None
    for E1, E2, U in stacks:
        acc = hand_accuracy(E1, E2, U, inputs, labels)
        if float(acc.max()) > best:
            i = int(acc.argmax())
            best, weights = float(acc[i]), (E1[i], E2[i], U[i])
    return weights  # type: ignore[return-value]


def mode_weights(mode: str, d: int, n: int, grid: SweepGrid, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """(E1, E2, U) of `mode` on the search's n facts at size d, built as its evaluator builds them."""
    inputs, labels = challenge_facts(n, d)
    if mode == "trained":
        E1, E2, U, _ = trained_weights(d, n, grid, seed)
        return E1, E2, U
    if mode == "published_hand":
        stacks = [published_stack(n, d, hand_settings(d, grid), seed + r) for r in range(grid.retries)]
        return _best_of(stacks, inputs, labels)  # type: ignore[return-value]
    if mode == "keyvalue_hand":
        stacks = [keyvalue_stack(n, d, key_sizes(d, grid), seed + r) for r in range(grid.key_retries)]
        return _best_of(stacks, inputs, labels)  # type: ignore[return-value]
    if mode == "published_hybrid":
        E1, E2, _ = published_stack(n, d, hybrid_settings(d, grid), seed)
        hidden = hidden_activations(E1, E2, inputs)
        _, U = train_unembedding(hidden, labels, d, grid.train, generator=torch.Generator().manual_seed(seed))
        return _best_of([(E1, E2, U)], inputs, labels)  # type: ignore[return-value]
    raise ValueError(f"no int8 check for mode {mode!r} (known: {', '.join(MODES)})")


def int8_row(mode: str, d: int, criterion: str, n: int, grid: SweepGrid) -> dict[str, Any]:
    """Accuracy of `mode`'s weights on its n facts at size d before and after int8 rounding."""
    inputs, labels = challenge_facts(n, d)
    weights = mode_weights(mode, d, n, grid)
    accuracy = lambda E1, E2, U: float(hand_accuracy(E1[None], E2[None], U[None], inputs, labels))
    return {
        "mode": mode,
        "d": d,
        "criterion": criterion,
        "n": n,
        "accuracy": accuracy(*weights),
        "accuracy_int8": accuracy(*(int8_rounded(w) for w in weights)),
    }
