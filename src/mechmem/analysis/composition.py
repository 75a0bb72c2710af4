"""Composition scores: how much a later head reads what an earlier head writes, from the weights alone.

Technique (Elhage et al. 2021, "A Mathematical Framework for Transformer Circuits"): a head A writes into the
residual stream through its OV circuit W_A = W_V W_O [d_model d_model]; a head B of a later layer reads the
stream through its query (QK circuit W_Q W_K^T), its key (the same circuit transposed) or its value (its OV
circuit). With W_B that read-in matrix, the composition score is

    score(A, B) = ||W_A W_B||_F / (||W_A||_F ||W_B||_F)          (Q, K or V composition)

in [0, 1]: how much of what A writes lies where B reads. The convention is TransformerLens's
(`all_composition_scores`, row vectors: x W_V W_O W_Q W_K^T for Q): scores are [layer head layer head]
(sender, receiver), zero where the receiver's layer is not after the sender's, computed on TransformerLens's
`FactoredMatrix` (the d_model x d_model products are never formed). Grouped-query attention: each head uses
its key/value group (the weights TransformerLens expands to one per query head).

Baseline: the score of random matrices is not zero (about 1 / sqrt(d_model) for Gaussian factors), so
Elhage et al. compare it against matrices drawn at random. `baseline` is the mean and the 2.5% - 97.5% range
of the score between products of independent standard Gaussian factors of the heads' shapes ([d_model
d_head] times [d_head d_model] on both sides: one distribution serves all three modes, whose factors all have
these shapes); a pair is above the baseline when its score exceeds the range's upper end.

Caveats: read off the weights, so it says the subspaces line up, not that the path is used on any input. The
weights are taken as the model holds them, as TransformerLens does: LayerNorm scales are not folded in (no
folding unless the model was loaded folded), and biases, the norm's per-token scaling, positional
embeddings and the attention pattern are ignored. An MLP between the two heads is not in the product.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechmem.analysis.frames import grid_frame, short_repr
from mechmem.analysis.heads import no_attention_reason
from mechmem.errors import MechmemError
from mechmem.io import strict_json
from mechmem.models.backend import FactoredMatrix
from mechmem.models.checks import check_count, check_generator, check_model
from mechmem.models.parts import Head
from mechmem.plotting import plt

MODES = ("Q", "K", "V")
"""Where the later head reads the earlier head's output: its query, its key or its value."""
BASELINE_DRAWS = 1000
"""Random draws behind the baseline's mean and 95% range."""
AXES = ("sender_layer", "sender_head", "receiver_layer", "receiver_head")
TOP_HEADERS = ["mode", "sender", "receiver", "score", "above baseline"]
"""The columns of `CompositionScores.top_rows`."""
METRIC = (
    "||W_A W_B||_F / (||W_A||_F ||W_B||_F), W_A the sender's OV circuit, W_B the receiver's QK circuit (Q), "
    "its transpose (K) or its OV circuit (V); zero unless the receiver's layer is later"
)


def no_pairs_reason(model: torch.nn.Module) -> str | None:
    """Why `model` has no pair of heads to compose (no attention heads, or one layer), or None."""
    one_layer = "the model has one layer: no head reads the output of an earlier one"
    return no_attention_reason(model) or (one_layer if model.cfg.n_layers < 2 else None)


def factored_scores(left: FactoredMatrix, right: FactoredMatrix) -> Float[Tensor, "*leading"]:
    """||left @ right||_F / (||left||_F ||right||_F) over the broadcast leading dims of two `FactoredMatrix`
    (NaN where either is zero): TransformerLens's `composition_scores`, with each squared Frobenius norm read
    from the factors' small Gram matrices (||A B||^2 = sum(A^T A * B B^T), mdim x mdim) instead of an SVD."""
    a1, b1, a2, b2 = (m.double() for m in (left.A, left.B, right.A, right.B))
    gram_a1, gram_b2, middle = a1.mT @ a1, b2 @ b2.mT, b1 @ a2  # [... mdim mdim] each

    def squared(gram: Tensor, other: Tensor) -> Tensor:
        return (gram * other).sum(dim=(-2, -1))

    product = squared(gram_a1, middle @ gram_b2 @ middle.mT)
    return (product / squared(gram_a1, b1 @ b1.mT) / squared(a2.mT @ a2, gram_b2)).sqrt().float()


def later_layer_mask(n_layers: int, n_heads: int) -> Bool[Tensor, "layer head layer head"]:
    """True where the receiver's layer (third axis) is after the sender's (first axis): the scored pairs."""
    later = torch.arange(n_layers)[:, None] < torch.arange(n_layers)[None, :]
    return later[:, None, :, None].expand(n_layers, n_heads, n_layers, n_heads)


@dataclass(frozen=True)
class Baseline:
    """The composition score of random matrices of the heads' shapes: mean and 95% range over the draws."""

    mean: float
    lower: float
    """2.5% quantile of the random scores."""
    upper: float
    """97.5% quantile: a pair above it composes more than random matrices do."""
    draws: int

    def text(self) -> str:
        return f"{self.mean:.3f} [{self.lower:.3f}, {self.upper:.3f}]"


def random_baseline(d_model: int, d_head: int, *, draws: int, generator: torch.Generator | None) -> Baseline:
    """`Baseline` from `draws` pairs of standard Gaussian factored matrices [d_model d_head] [d_head d_model]
    (scored by `factored_scores`, as the heads are)."""
    if draws < 2:
        raise ValueError(f"baseline_draws must be at least 2, got {draws}")

    shapes = [(draws, d_model, d_head), (draws, d_head, d_model)] * 2
    a1, b1, a2, b2 = (torch.randn(shape, generator=generator, dtype=torch.float64) for shape in shapes)
    s = factored_scores(FactoredMatrix(a1, b1), FactoredMatrix(a2, b2)).double()
    lower, upper = torch.quantile(s, torch.tensor([0.025, 0.975], dtype=s.dtype)).tolist()
    return Baseline(float(s.mean()), lower, upper, draws)


@dataclass(frozen=True)
class CompositionPair:
    """One sender -> receiver pair of heads in one mode, with its score against the baseline."""

    mode: str
    sender: Head
    receiver: Head
    score: float
    above_baseline: bool
    """The score exceeds the upper end of the random baseline's 95% range."""

    def to_dict(self) -> dict[str, Any]:
        names = {"sender": self.sender.name, "receiver": self.receiver.name}
        return names | {"score": self.score, "above_baseline": self.above_baseline}


@dataclass(frozen=True)
class CompositionScores:
    """Q, K and V composition between every pair of heads, each [layer head layer head] (sender, receiver;
    zero unless the receiver's layer is later), and the random baseline they are read against."""

    scores: dict[str, Tensor]
    baseline: Baseline

    def __post_init__(self) -> None:
        shapes = {tuple(s.shape) for s in self.scores.values()}
        if (
            set(self.scores) != set(MODES)
            or len(shapes) != 1
            or (s := shapes.pop())[:2] != s[2:]
            or len(s) != 4
        ):
            raise ValueError(f"scores must be Q, K, V, each [layer head layer head], got {list(self.scores)}")

    @property
    def mask(self) -> Bool[Tensor, "layer head layer head"]:
        """True where the receiver's layer is after the sender's (a scored pair)."""
        return later_layer_mask(*self.scores["Q"].shape[:2])

    def top(self, mode: str, k: int = 5) -> list[CompositionPair]:
        """The `k` highest-scoring pairs of `mode`, best first (pairs with a NaN score left out)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        s = self.scores[mode]
        flat = s.masked_fill(~self.mask | s.isnan(), float("-inf")).flatten()
        order = flat.argsort(descending=True)[: min(k, int(flat.isfinite().sum()))]
        cells = [(np.unravel_index(i, tuple(s.shape)), float(flat[i])) for i in order.tolist()]
        return [
            CompositionPair(mode, Head(int(l1), int(h1)), Head(int(l2), int(h2)), v, v > self.baseline.upper)
            for (l1, h1, l2, h2), v in cells
        ]

    def top_rows(self, k: int = 3, *, above_only: bool = False) -> list[list[Any]]:
        """The `k` best pairs of every mode as table rows (`TOP_HEADERS`); only those above the baseline
        with `above_only`."""
        pairs = [p for m in MODES for p in self.top(m, k) if p.above_baseline or not above_only]
        return [[p.mode, p.sender.name, p.receiver.name, p.score, p.above_baseline] for p in pairs]

    def to_dataframe(self) -> Any:
        """One row per mode and scored pair: `mode`, `sender`, `receiver`, the layer and head of each,
        `score` (NaN where a circuit is zero), `baseline_mean`, `baseline_lower`, `baseline_upper` and
        `above_baseline`."""
        import pandas as pd

        frames = []
        for mode, s in self.scores.items():
            frame = grid_frame(s, AXES, leading={"mode": mode})[self.mask.flatten().numpy()]
            for side in ("sender", "receiver"):
                names = [str(Head(l, h)) for l, h in zip(frame[f"{side}_layer"], frame[f"{side}_head"])]
                frame.insert(frame.columns.get_loc("sender_layer"), side, names)
            frames.append(frame.rename(columns={"value": "score"}))
        out = pd.concat(frames, ignore_index=True)
        b = self.baseline
        return out.assign(baseline_mean=b.mean, baseline_lower=b.lower, baseline_upper=b.upper).assign(
            above_baseline=out["score"] > b.upper
        )

    def __repr__(self) -> str:
        best = [f"{p.mode} {p.sender}->{p.receiver} {p.score:.2f}" for m in MODES for p in self.top(m, 1)]
        return short_repr(
            "CompositionScores",
            f"{int(self.mask.sum())} pairs",
            f"best {'; '.join(best)}" if best else "no pairs",
            f"baseline {self.baseline.text()}",
        )

    def to_dict(self) -> dict[str, Any]:
        b = self.baseline
        return {
            "axes": list(AXES),
            "metric": METRIC,
            "scores": {m: strict_json(s.tolist()) for m, s in self.scores.items()},
            "baseline": {"mean": b.mean, "lower": b.lower, "upper": b.upper, "draws": b.draws},
            "baseline_about": "score between products of standard Gaussian factors of the heads' shapes; "
            "lower / upper: its 2.5% and 97.5% quantiles over the draws",
            "top": {m: [p.to_dict() for p in self.top(m)] for m in MODES},
        }


@torch.no_grad()
def composition_scores(
    model: torch.nn.Module, *, baseline_draws: int = BASELINE_DRAWS, generator: torch.Generator | None = None
) -> CompositionScores:
    """Q, K and V composition scores between every pair of heads of `model`, with the random baseline.

    Args:
        model: a TransformerLens model (either backend); raises `MechmemError` when it has no attention heads
            (a one-layer model gets all-zero scores: no pair).
        baseline_draws: random matrix pairs behind the baseline.
        generator: draws the baseline (default: seeded with 0).

    Example:
        >>> import mechmem
        >>> result = mechmem.composition_scores(mechmem.planted_induction_model())
        >>> best = result.top("K", 1)[0]
        >>> best.sender.name, best.receiver.name, best.above_baseline
        ('L0H2', 'L1H1', True)
    """
    check_model(model)
    check_count("baseline_draws", baseline_draws)
    check_generator(generator)
    if reason := no_attention_reason(model):
        raise MechmemError(f"no composition scores: {reason}")
    cfg = model.cfg
    baseline = random_baseline(
        cfg.d_model, cfg.d_head, draws=baseline_draws, generator=generator or torch.Generator().manual_seed(0)
    )
    ov, qk = model.OV, model.QK  # factored [layer head d_model d_model]; key/value groups expanded per head
    sender = ov.unsqueeze(2).unsqueeze(3)  # [layer head 1 1 ...]
    keep = later_layer_mask(cfg.n_layers, cfg.n_heads)
    scores = {}
    for mode, read in {"Q": qk, "K": qk.T, "V": ov}.items():
        s = factored_scores(sender, read.unsqueeze(0).unsqueeze(0)).cpu()
        scores[mode] = s.masked_fill(~keep, 0.0)
    return CompositionScores(scores, baseline)


def plot_composition(result: CompositionScores, *, title: str = "") -> Any:
    """One heatmap per mode, senders (rows) x receivers (columns) of later layers; pairs above the baseline's
    upper end are starred. Returns the Figure."""
    n_layers, n_heads = result.scores["Q"].shape[:2]
    if n_layers < 2:
        raise ValueError("no pair of heads to plot: the model has one layer")
    senders = [Head(l, h) for l in range(n_layers - 1) for h in range(n_heads)]
    receivers = [Head(l, h) for l in range(1, n_layers) for h in range(n_heads)]
    side = max(2.8, 0.35 * len(receivers) + 1.2)
    fig, axes = plt.subplots(1, 3, figsize=(3 * side, side), squeeze=False, layout="constrained")
    b = result.baseline
    finite = torch.cat([s[result.mask] for s in result.scores.values()]).nan_to_num(0.0)
    top = max(b.upper, float(finite.max()) if finite.numel() else 0.0)
    for ax, mode in zip(axes[0], MODES):
        grid = result.scores[mode].masked_fill(~result.mask, float("nan"))
        grid = grid.reshape(n_layers * n_heads, -1)[: len(senders), n_heads:].numpy()
        im = ax.imshow(grid, vmin=0, vmax=top, cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            if len(receivers) <= 16 and np.isfinite(v):
                text, color = f"{v:.2f}{'*' if v > b.upper else ''}", "w" if v < 0.6 * top else "k"
                ax.text(j, i, text, ha="center", va="center", color=color, fontsize=6)
        ax.set_xticks(range(len(receivers)), [str(h) for h in receivers], rotation=90, fontsize=7)
        ax.set_yticks(range(len(senders)), [str(h) for h in senders], fontsize=7)
        ax.set(title=f"{mode}-composition", xlabel="receiver", ylabel="sender")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    note = f"random baseline {b.text()} (mean, 95% range; * above it); blank: a zero circuit, no score"
    fig.suptitle(f"{title}\n{note}" if title else note, fontsize=9)
    return fig
