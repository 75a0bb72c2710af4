"""What `mechmem patch` prints and writes: the sweeps by exact or attribution patching, the largest effect
per sweep, and the JSON record."""

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from mechmem.analysis.frames import position_labels
from mechmem.analysis.patching.decided import DecidedPatching, decided_patching
from mechmem.analysis.patching.result import POSITION_AXES, PatchingResult
from mechmem.analysis.stats import PATCH_POLICY, format_interval
from mechmem.errors import NotApplicable
from mechmem.tables import format_table

METHODS = ("exact", "attribution")
METRIC_DESCRIPTION = (
    "logit[clean answer] - logit[corrupted answer] at the answer position, mean over the pairs; "
    "each value is the metric after one patch"
)


def attribution_notes(results: dict[str, PatchingResult]) -> list[str]:
    """One line per estimated sweep: its agreement with exact patching on the sampled cells, the outcome."""
    lines = []
    for name, res in results.items():
        c = res.check
        if c is None:
            continue
        verdict = "kept" if c["trusted"] else "UNTRUSTED, replaced by exact patching"
        if not c["trusted"] and not res.method.startswith("exact"):
            verdict = "UNTRUSTED"
        lines.append(
            f"{name}: attribution vs exact on {c['cells']} sampled cells: Pearson {c['pearson']:.2f}, "
            f"Spearman {c['spearman']:.2f}, top-{c['k']} {c['top_k']:.2f} (trusted at Pearson >= "
            f"{c['threshold']}): {verdict}"
        )
    return lines


def largest_effects(results: dict[str, PatchingResult]) -> list[list[Any]]:
    """Per sweep: name, axes, the cell with the largest |value - baseline|, its value and normalised value
    with their 95% intervals (NaN where the normalisation is refused)."""
    rows = []
    for name, res in results.items():
        best = int((res.values - res.baseline).abs().flatten().argmax())
        cell = [int(i) for i in torch.unravel_index(torch.tensor(best), res.values.shape)]
        value, normalised = float(res.values.flatten()[best]), float(res.normalised().flatten()[best])
        iv = res.intervals
        bounds = ["[-]", "[-]"]
        if iv is not None:
            at = [(getattr(iv, f"{k}lower"), getattr(iv, f"{k}upper")) for k in ("", "normalised_")]
            bounds = [format_interval(lo.flatten()[best], hi.flatten()[best]) for lo, hi in at]
        rows.append([name, " x ".join(res.axes), str(cell), value, bounds[0], normalised, bounds[1]])
    return rows


def interval_lines(results: dict[str, PatchingResult]) -> list[str]:
    """How the intervals were computed, and a warning when the clean - corrupted gap's interval includes 0."""
    first = next(iter(results.values()))
    iv = first.intervals
    if iv is None:
        return ["no intervals: the metric gives one value for all prompts, not one per prompt"]
    gap, lower, upper = iv.gap
    lines = [
        (
            f"95% intervals over {iv.n_prompts} prompts (mean -+ 1.96 standard errors; normalised: "
            f"bootstrap); clean - corrupted gap {gap:.4f} {format_interval(lower, upper, '.4f')}"
        )
    ]
    if first.normalised_refused:
        lines.append(
            "WARNING: the clean - corrupted gap's 95% interval includes 0: the two runs are not told apart, "
            "so no normalised effect is given (nan)"
        )
    return lines


def patching_record(results: dict[str, PatchingResult], **fields: Any) -> dict[str, Any]:
    """The `patching.json` record: `fields`, the unpatched metrics and the sweeps."""
    full = next(iter(results.values())).to_dict()
    out = {**fields, "metric": full["metric"], "metric_description": METRIC_DESCRIPTION}
    out |= {key: full.get(key) for key in ("direction", "clean", "corrupted", "gap", "normalised_refused")}
    return out | {"sweeps": {name: sweep_record(r) for name, r in results.items()}}


def sweep_record(result: PatchingResult) -> dict[str, Any]:
    """One sweep in `patching.json`: axes, values, 95% intervals (null without), the normalised effects
    (null where refused) with theirs, method and check."""
    full = result.to_dict()
    keys = ["axes", "values", "lower", "upper", "effect_lower", "effect_upper", "normalised"]
    keys += ["normalised_lower", "normalised_upper", "method", "check", "decision"]
    return {key: full.get(key) for key in keys}


def patch_checkpoint(
    ckpt: Any,
    sweeps: Sequence[str] | None = None,
    *,
    n: int,
    seed: int,
    method: str = "exact",
    direction: str = "denoising",
    memory_mb: float = 256.0,
) -> tuple[DecidedPatching, dict[str, Any]]:
    """`mechmem patch`'s work: `decided_patching` on the checkpoint's task pairs from `seed` up to `n`
    pairs, and its `patching_record`; raises `NotApplicable` when the task defines no pairs."""
    policy, options = PATCH_POLICY.with_budget(n), {"direction": direction, "memory_mb": memory_mb}
    try:
        found = decided_patching(
            ckpt.model, ckpt.task, sweeps, seed=seed, policy=policy, method=method, **options
        )
    except NotImplementedError as exc:
        raise NotApplicable(str(exc)) from None
    record = patching_record(
        found.results,
        task=ckpt.task_name,
        method=method,
        n_samples=found.n,
        budget=n,
        seed=seed,
        decision=found.record(),
    )
    return found, record


def pair_positions(task: Any, *, seed: int) -> list[str]:
    """Labels of the positions of the task's patching prompts: the tokens of the first clean prompt drawn
    from `seed` with their positions (`frames.position_labels`)."""
    example = task.patching_pair(1, generator=torch.Generator().manual_seed(seed)).clean[0]
    return position_labels(example, task.token_names())


def patching_lines(
    results: dict[str, PatchingResult],
    *,
    task: str,
    method: str,
    direction: str,
    n: int,
    positions: Sequence[str] | None = None,
) -> list[str]:
    """What `mechmem patch` prints: the unpatched metrics, the intervals note, the attribution notes, the
    largest effect per sweep and a table of each 2-D sweep of at most 16 columns (a position axis headed by
    `positions`, a prompt's tokens, where given)."""
    first = next(iter(results.values()))
    headers = ["sweep", "axes", "largest effect at", "metric", "95% interval", "normalised", "95% interval"]
    lines = [
        (
            f"{task}: {first.metric} clean {first.clean:.4f}, corrupted {first.corrupted:.4f} "
            f"({direction}, {method}, {n} pairs)"
        ),
        *interval_lines(results),
        *attribution_notes(results),
        format_table(largest_effects(results), headers),
    ]
    for name, res in results.items():
        if res.values.ndim == 2 and res.values.shape[1] <= 16:
            half = [None] * len(res.values) if res.intervals is None else (res.upper - res.lower) / 2
            rows = [[i, *cell_texts(v, h)] for i, (v, h) in enumerate(zip(res.values, half))]
            named = positions is not None and res.axes[1] in POSITION_AXES
            headers = [res.axes[0], *(positions[j] if named else str(j) for j in range(res.values.shape[1]))]
            lines += [f"\n{name} ({res.axes[0]} x {res.axes[1]})", format_table(rows, headers)]
    return lines


def cell_texts(values: Tensor, half: Tensor | None) -> list[Any]:
    """A table row: each value as a float, or as "mean±half-width" of its 95% interval given `half`."""
    if half is None:
        return values.tolist()
    pairs = zip(values.tolist(), half.tolist())
    return [f"{v:.3f}" if math.isnan(h) else f"{v:.3f}±{h:.3f}" for v, h in pairs]
