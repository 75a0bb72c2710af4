"""Numbers the memorisation page reports about the 54-variant table, computed from sweep records (dicts).

A *toggle effect* compares matched pairs of variants that differ in one component only (e.g. MLP residual on vs
off with mixing, norms, bias and activation equal) and reports the range of the capacity differences, in facts
and in percent of the "off" variant, and in how many pairs "on" stores more. The MLP toggle pairs each MLP
variant with the MLP-less variant of the same mixing and norms (MLP-less variants keep the unembedding bias, so
only MLP variants with bias pair up); every other toggle compares MLP variants only.
"""

from dataclasses import dataclass
from typing import Any

from mechmem.analysis.stats import format_mean_sd

MIXING_ORDER = ("2emb", "uniform", "attn")
FIELDS = ("mixing", "mlp", "norms", "mlp_residual", "bias", "act_fn")


@dataclass
class ToggleEffect:
    """Capacity of "on" minus "off" over matched pairs, under one criterion."""

    pairs: int
    better: int
    diff: tuple[float | int, float | int]
    pct: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "better": self.better, "diff": list(self.diff), "pct": list(self.pct)}


def _cfg(record: dict[str, Any]) -> dict[str, Any]:
    return {k: record["config"][k] for k in FIELDS}


def toggle_effect(
    records: list[dict[str, Any]], field: str, on: Any, off: Any, criterion: str = "any"
) -> ToggleEffect:
    """The effect of switching `field` from `off` to `on` (see the module docstring for the pairing)."""
    if field == "mlp":
        ignore = {"mlp", "mlp_residual", "act_fn"}
        pool = records
    else:
        ignore = {field}
        pool = [r for r in records if r["config"]["mlp"]]

    def key(r: dict[str, Any]) -> tuple:
        return tuple(v for k, v in _cfg(r).items() if k not in ignore)

    offs = {key(r): r[criterion] for r in pool if r["config"][field] == off}
    pairs = [(r[criterion], offs[key(r)]) for r in pool if r["config"][field] == on and key(r) in offs]
    if not pairs:
        raise ValueError(f"no matched pairs for {field} {on!r} vs {off!r}")
    diffs = [a - b for a, b in pairs]
    pcts = [100.0 * (a - b) / b for a, b in pairs if b]
    pct = (min(pcts), max(pcts)) if pcts else (float("nan"), float("nan"))  # nan: every "off" stored nothing
    return ToggleEffect(len(pairs), sum(d > 0 for d in diffs), (min(diffs), max(diffs)), pct)


TOGGLES = {
    "mlp": ("mlp", True, False),
    "2emb_vs_uniform": ("mixing", "2emb", "uniform"),
    "uniform_vs_attn": ("mixing", "uniform", "attn"),
    "mlp_residual": ("mlp_residual", True, False),
    "gelu": ("act_fn", "gelu", "relu"),
    "bias": ("bias", True, False),
    "norms": ("norms", True, False),
}
"""Every comparison of the published Appendix B text, keyed as in the published-values file."""


def toggle_effects(records: list[dict[str, Any]]) -> dict[str, ToggleEffect]:
    """The effect of each of `TOGGLES` that has matched pairs in `records` (a partial table skips the rest)."""
    out = {}
    for key, (field, on, off) in TOGGLES.items():
        try:
            out[key] = toggle_effect(records, field, on, off)
        except ValueError:
            continue
    return out


def sort_key(record: dict[str, Any]) -> tuple:
    """Order of the page's table: MLP variants first, by mixing, bias, norms, MLP residual, activation."""
    c = record["config"]
    return (
        not c["mlp"],
        MIXING_ORDER.index(c["mixing"]),
        c["bias"],
        c["norms"],
        c["mlp_residual"],
        c["act_fn"] != "gelu",
    )


def by_name(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Records keyed by variant name (the last record of a name wins)."""
    return {r["variant"]: r for r in records}


def outlier(records: list[dict[str, Any]], mixing: str) -> dict[str, Any] | None:
    """The published outlier (MLP + norms, no residual, no bias, ReLU) of one mixing, and that mixing's lowest."""
    mlp = [r for r in records if r["config"]["mlp"] and r["config"]["mixing"] == mixing]
    want = {"norms": True, "mlp_residual": False, "bias": False, "act_fn": "relu"}
    odd = next((r for r in mlp if all(r["config"][k] == v for k, v in want.items())), None)
    if odd is None:
        return None
    low = min(mlp, key=lambda r: r["any"])
    return {
        "any": odd["any"],
        "all": odd["all"],
        "lowest_any": low["any"],
        "is_lowest": odd["any"] == low["any"],
    }


def mean_sd(values: list[float | int]) -> str:
    """ "m +- s" over repeats in whole numbers (one value: the value): `stats.format_mean_sd`, sample sd."""
    return format_mean_sd(values, ".0f", " +- ")


def non_monotone(records: list[dict[str, Any]]) -> list[tuple[str, int, int, int, int]]:
    """(variant, n, successes at n, a larger n', more successes at n') for each record where success grows with n."""
    out = []
    for r in records:
        counts = sorted((int(n), k) for n, k in r["successes"].items())
        for (n1, k1), (n2, k2) in zip(counts, counts[1:]):
            if k2 > k1:
                out.append((r["variant"], n1, k1, n2, k2))
                break
    return out
