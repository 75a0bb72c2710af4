"""Logit lens before and after each sub-layer: what would the model predict if it stopped here?

The residual stream is read at every stage, in order

    resid_pre.L   input of block L (the embeddings for L = 0)
    resid_mid.L   after block L's attention, before its MLP (absent in attention-only models)
    resid_post.L  output of block L (equal to resid_pre.L+1)

and decoded as the model decodes its last residual: the final norm with its statistics recomputed at that
stage (not the final layer's cached scale, which `ActivationCache.apply_ln_to_stack` reuses by default), then
the unembedding; the last stage equals the model's logits (tested). resid_mid.L vs resid_post.L isolates what
block L's MLP adds. Each stage's mean target probability and top-1 accuracy over the masked positions carry a
95% percentile bootstrap interval over sequences (`stats.bootstrap_ratio`, seeded).

Caveat: early residuals were never trained to be read by the unembedding; a low lens probability says
the answer is not yet linearly decodable in the output basis, not that the information is absent.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechmem.analysis.frames import grid_frame, shape_text, short_repr, with_tokens
from mechmem.analysis.stats import RESAMPLES, bootstrap_ratio
from mechmem.errors import BadArgument
from mechmem.io import strict_json
from mechmem.models.backend import is_transformer_lens_model
from mechmem.models.checks import check_count, check_instance, check_model, check_tokens
from mechmem.models.parts import model_device
from mechmem.plotting import plt


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why the lens does not apply to `model` (None when it does)."""
    if not is_transformer_lens_model(model):
        return f"{type(model).__name__} is not a HookedTransformer, so it has no residual stages to decode"
    return None


def lens_stages(model: torch.nn.Module) -> list[tuple[str, str]]:
    """(stage name, hook name) for every residual stage, in forward order."""
    out = []
    for layer in range(model.cfg.n_layers):
        out.append((f"resid_pre.{layer}", f"blocks.{layer}.hook_resid_pre"))
        # A parallel block adds attention and MLP together: there is no stream between them.
        if not model.cfg.attn_only and not getattr(model.cfg, "parallel_attn_mlp", False):
            out.append((f"resid_mid.{layer}", f"blocks.{layer}.hook_resid_mid"))
        out.append((f"resid_post.{layer}", f"blocks.{layer}.hook_resid_post"))
    return out


def decode_residual(
    model: torch.nn.Module, resid: Float[Tensor, "batch pos d_model"]
) -> Float[Tensor, "batch pos d_vocab_out"]:
    """Logits of a residual stream read as the last one: final norm (recomputed), then unembedding."""
    if model.cfg.normalization_type is not None:
        resid = model.ln_final(resid)
    return model.unembed(resid)


def answer_probability(
    logits: Float[Tensor, "batch pos d_vocab_out"], pos: Int[Tensor, " batch"], answer: Int[Tensor, " batch"]
) -> Float[Tensor, " batch"]:
    """p(answer): per sequence, the softmax probability of token `answer[i]` at position `pos[i]`."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, pos].float().softmax(-1)[rows, answer]


@dataclass
class LogitLensResult:
    """Target probability and rank (1 = top) per stage, sequence and position, plus the top-k tokens."""

    stages: tuple[str, ...]
    target_prob: Float[Tensor, "stage batch pos"]
    target_rank: Int[Tensor, "stage batch pos"]
    top_tokens: Int[Tensor, "stage batch pos k"]
    top_probs: Float[Tensor, "stage batch pos k"]
    mask: Float[Tensor, "batch pos"]

    def __post_init__(self) -> None:
        shape = (len(self.stages), *self.mask.shape)
        for name in ("target_prob", "target_rank", "top_tokens", "top_probs"):
            got, per_token = tuple(getattr(self, name).shape), name.startswith("top")
            if (got[:3] if per_token else got) != shape:
                axes = "[stage batch pos k]" if per_token else f"[stage batch pos] = {shape}"
                raise ValueError(f"{name} must be {axes}, got {got}")

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage, over the masked positions: mean target probability and top-1 accuracy with their 95%
        intervals over sequences (`*_lower`, `*_upper`), and mean rank."""
        w = self.mask.double()
        total = w.sum().clamp_min(1.0)
        values = {
            "target_prob": self.target_prob.double(),
            "target_rank": self.target_rank.double(),
            "top1_acc": (self.target_rank == 1).double(),
        }
        bounds = {
            name: bootstrap_ratio(
                (values[name] * w).sum(-1).T, w.sum(-1), generator=torch.Generator().manual_seed(0)
            )
            for name in ("target_prob", "top1_acc")
        }
        out: dict[str, dict[str, float]] = {stage: {} for stage in self.stages}
        for i, stage in enumerate(self.stages):
            for name, value in values.items():
                out[stage][name] = float((value[i] * w).sum() / total)
                if name in bounds:
                    out[stage][f"{name}_lower"], out[stage][f"{name}_upper"] = (
                        float(b[i]) for b in bounds[name]
                    )
        return out

    def by_position(self) -> dict[str, Tensor]:
        """Mean target probability and rank per [stage pos] over the batch (NaN where no position counts)."""
        w = self.mask.double()
        count = w.sum(0)
        prob = (self.target_prob.double() * w).sum(1) / count
        rank = (self.target_rank.double() * w).sum(1) / count
        return {"target_prob": prob.float(), "target_rank": rank.float()}

    def to_dataframe(self, *, top_tokens: bool = False, token_names: Sequence[str] | None = None) -> Any:
        """One row per stage, sequence and position: `stage`, `batch`, `pos`, `weight` (the mask), `value`
        (the target's probability) and `rank` (1 = top).

        With `top_tokens`, one row per stage, sequence, position and top-k entry: `stage`, `batch`,
        `pos`, `k`, `token_id`, `token` (its name in `token_names`, else the id) and `value` (its
        probability).
        """
        import pandas as pd

        labels = {"stage": self.stages}
        if top_tokens:
            frame = grid_frame(self.top_probs, ("stage", "batch", "pos", "k"), labels=labels)
            frame["k"] += 1
            frame.insert(4, "token_id", self.top_tokens.cpu().reshape(-1).numpy())
            frame = with_tokens(frame, token_names)
        else:
            frame = grid_frame(self.target_prob, ("stage", "batch", "pos"), labels=labels)
            frame.insert(3, "weight", self.mask.cpu().expand(self.target_prob.shape).reshape(-1).numpy())
            frame["rank"] = self.target_rank.cpu().reshape(-1).numpy()
        frame["stage"] = pd.Categorical(frame["stage"], categories=list(self.stages), ordered=True)
        return frame

    def __repr__(self) -> str:
        summary, ends = self.summary(), dict.fromkeys(self.stages[:1] + self.stages[-1:])
        probs = ", ".join(f"{stage} {summary[stage]['target_prob']:.3f}" for stage in ends)
        return short_repr(
            "LogitLensResult",
            f"{len(self.stages)} stages",
            shape_text(("batch", "pos", "k"), (*self.mask.shape, self.top_tokens.shape[-1])),
            f"mean target probability {probs}" if probs else "",
        )

    def to_dict(self, *, example: int = 0) -> dict[str, Any]:
        per_pos = self.by_position()
        summary = self.summary()
        stages = {}
        for i, stage in enumerate(self.stages):
            stages[stage] = {
                **summary[stage],
                "target_prob_by_pos": strict_json(per_pos["target_prob"][i].tolist()),
                "target_rank_by_pos": strict_json(per_pos["target_rank"][i].tolist()),
                "example_top_tokens": self.top_tokens[i, example].tolist(),
                "example_top_probs": self.top_probs[i, example].tolist(),
            }
        return {
            "metric": "probability and rank (1 = top) of the target token, mean over the masked positions",
            "interval": (
                f"target_prob and top1_acc: 95% percentile bootstrap over {self.mask.shape[0]} sequences "
                f"({RESAMPLES} resamples) of masked sum / masked positions"
            ),
            "axes": {"stages": ["stage"], "by_pos": ["stage", "pos"], "example_top": ["pos", "k"]},
            "stage_order": list(self.stages),
            "stages": stages,
        }


@torch.no_grad()
def logit_lens(
    model: torch.nn.Module,
    tokens: Int[Tensor, "batch pos"],
    targets: Int[Tensor, "batch pos"],
    mask: Float[Tensor, "batch pos"] | None = None,
    *,
    k: int = 5,
) -> LogitLensResult:
    """Decode every residual stage and score `targets` (the token each position should predict); `mask`:
    positions that count in summaries (default: all); `k`: top tokens kept per stage and position.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> batch = task.eval_batch(32, generator=torch.Generator().manual_seed(0))
        >>> lens = mechmem.logit_lens(model, batch.tokens, batch.targets, batch.loss_mask)
        >>> {stage: round(v["target_prob"], 2) for stage, v in lens.summary().items()}["resid_post.1"]
        1.0
    """
    check_model(model)
    tokens = check_tokens(model, tokens)
    targets = check_tokens(model, targets, "targets", output=True)
    check_count("k", k)
    for name, value in (("targets", targets), ("mask", mask)):
        if value is not None and tuple(value.shape) != tuple(tokens.shape):
            raise BadArgument(
                f"{name} must have the tokens' shape {tuple(tokens.shape)}, got {tuple(value.shape)}"
            )
    if mask is not None:
        check_instance("mask", mask, Tensor)
        if mask.is_floating_point() and not bool(torch.isfinite(mask).all()):
            raise BadArgument("mask holds NaN or inf; it weights positions, 1 where they count")
    stages = lens_stages(model)
    tokens = tokens.to(model_device(model))
    targets = targets.to(model_device(model))
    wanted = {hook for _, hook in stages}
    _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in wanted)
    probs_t, ranks, top_t, top_p = [], [], [], []
    for _, hook in stages:
        logits = decode_residual(model, cache[hook]).float()
        target_logit = logits.gather(-1, targets.unsqueeze(-1))
        ranks.append((logits > target_logit).sum(-1) + 1)
        probs = logits.softmax(-1)
        probs_t.append(probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
        p, t = probs.topk(min(k, probs.shape[-1]), dim=-1)
        top_p.append(p)
        top_t.append(t)
    mask = torch.ones(tokens.shape) if mask is None else mask
    stacked = (torch.stack(values).cpu() for values in (probs_t, ranks, top_t, top_p))
    return LogitLensResult(tuple(name for name, _ in stages), *stacked, mask.float().cpu())


def plot_logit_lens(result: LogitLensResult, *, positions: Sequence[str] | None = None) -> Any:
    """Left: mean target probability per stage and position. Right: mean over masked positions per stage.
    `positions` labels the position axis (`frames.position_labels` of an example sequence; default the
    indices)."""
    from mechmem.plotting import cell_ticks

    per_pos = result.by_position()["target_prob"].numpy()
    summary = result.summary()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.35 * len(result.stages) + 2), layout="constrained")
    im = left.imshow(per_pos, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    cell_ticks(left, per_pos.shape, row_labels=list(result.stages), col_labels=positions)
    left.set(
        xlabel="position" if positions is None else "position (tokens of the first sequence)",
        title="target probability by position",
    )
    fig.colorbar(im, ax=left, shrink=0.8)
    y = range(len(result.stages))
    means = np.array([summary[s]["target_prob"] for s in result.stages])
    bounds = np.array(
        [[summary[s]["target_prob_lower"], summary[s]["target_prob_upper"]] for s in result.stages]
    )
    errors = np.abs(bounds.T - means).reshape(2, -1)  # distances below and above the mean
    right.barh(list(y), means, xerr=errors, color="tab:blue", ecolor="k", capsize=2)
    right.set(
        yticks=list(y),
        yticklabels=result.stages,
        xlim=(0, 1),
        xlabel="mean target probability (95% interval over sequences)",
        title="pre/post-FFN logit lens",
    )
    right.invert_yaxis()
    return fig
