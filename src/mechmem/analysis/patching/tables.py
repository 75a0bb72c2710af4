"""What `mechmem patch` prints and writes, as library functions: run the sweeps by a chosen method (exact
activation patching or attribution patching), summarise the largest effect per sweep, and build the JSON
record."""

from collections.abc import Sequence
from typing import Any

import torch

from mechmem.analysis.patching.attribution import attribute_sweeps
from mechmem.analysis.patching.sweeps import PatchingResult, model_sweeps, run_sweeps
from mechmem.errors import MechmemError
from mechmem.tables import format_table
from mechmem.tasks.base import PatchingPair

METHODS = ("exact", "attribution")
METRIC_DESCRIPTION = (
    "logit[clean answer] - logit[corrupted answer] at the answer position, mean over the pairs; "
    "each value is the metric after one patch"
)


def run_method(
    model: torch.nn.Module,
    pair: PatchingPair,
    sweeps: Sequence[str] | None = None,
    *,
    method: str = "exact",
    direction: str = "denoising",
    memory_mb: float = 256.0,
) -> dict[str, PatchingResult]:
    """Sweeps (default: all the model has) by exact patching (`run_sweeps`) or attribution
    (`attribute_sweeps`, which falls back to exact patching for a sweep whose sampled agreement fails
    `attribution.TRUST`)."""
    sweeps = list(sweeps or model_sweeps(model))
    if method == "exact":
        return run_sweeps(model, pair, sweeps, direction=direction, memory_mb=memory_mb)
    if method == "attribution":
        return attribute_sweeps(model, pair, sweeps, direction=direction)
    raise MechmemError(f"method must be one of {', '.join(METHODS)}, got {method!r}")


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
    """Per sweep: name, axes, the cell with the largest |value - baseline|, its value and normalised value."""
    rows = []
    for name, res in results.items():
        best = int((res.values - res.baseline).abs().flatten().argmax())
        cell = [int(i) for i in torch.unravel_index(torch.tensor(best), res.values.shape)]
        value, normalised = float(res.values.flatten()[best]), float(res.normalised().flatten()[best])
        rows.append([name, " x ".join(res.axes), str(cell), value, normalised])
    return rows


def patching_record(results: dict[str, PatchingResult], **fields: Any) -> dict[str, Any]:
    """The `patching.json` record: `fields` (task, method, n_samples, seed...), the unpatched metrics and
    the sweeps."""
    first = next(iter(results.values()))
    return {
        **fields,
        "metric": first.metric,
        "metric_description": METRIC_DESCRIPTION,
        "direction": first.direction,
        "clean": first.clean,
        "corrupted": first.corrupted,
        "sweeps": {
            name: {"axes": list(r.axes), "values": r.values.tolist(), "method": r.method, "check": r.check}
            for name, r in results.items()
        },
    }


def patch_checkpoint(
    ckpt: Any,
    sweeps: Sequence[str] | None = None,
    *,
    n: int,
    seed: int,
    method: str = "exact",
    direction: str = "denoising",
    memory_mb: float = 256.0,
) -> tuple[dict[str, PatchingResult], dict[str, Any]] | str:
    """`mechmem patch`'s work: the sweeps (`run_method`) on `n` pairs of the checkpoint's task drawn from
    `seed`, and their `patching_record`; the reason as a string when the task defines no pairs."""
    try:
        pair = ckpt.task.patching_pair(n, generator=torch.Generator().manual_seed(seed))
    except NotImplementedError as exc:
        return str(exc)
    results = run_method(ckpt.model, pair, sweeps, method=method, direction=direction, memory_mb=memory_mb)
    record = patching_record(results, task=ckpt.task_name, method=method, n_samples=n, seed=seed)
    return results, record


def patching_lines(
    results: dict[str, PatchingResult], *, task: str, method: str, direction: str, n: int
) -> list[str]:
    """What `mechmem patch` prints: the unpatched metrics, the attribution notes, the largest effect per
    sweep and, for each 2-D sweep of at most 16 columns, its table."""
    first = next(iter(results.values()))
    lines = [
        (
            f"{task}: {first.metric} clean {first.clean:.4f}, corrupted {first.corrupted:.4f} "
            f"({direction}, {method}, {n} pairs)"
        ),
        *attribution_notes(results),
        format_table(
            largest_effects(results), ["sweep", "axes", "largest effect at", "metric", "normalised"]
        ),
    ]
    for name, res in results.items():
        if res.values.ndim == 2 and res.values.shape[1] <= 16:
            rows = [[i, *row] for i, row in enumerate(res.values.tolist())]
            headers = [res.axes[0], *(str(j) for j in range(res.values.shape[1]))]
            lines += [f"\n{name} ({res.axes[0]} x {res.axes[1]})", format_table(rows, headers)]
    return lines


__all__ = [
    "METHODS",
    "METRIC_DESCRIPTION",
    "attribution_notes",
    "largest_effects",
    "model_sweeps",
    "patch_checkpoint",
    "patching_lines",
    "patching_record",
    "run_method",
]
