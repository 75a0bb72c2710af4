"""Numbers the memorisation page reports about the 54-variant table, computed from sweep records (dicts).

A *toggle effect* compares matched pairs of variants that differ in one component only (e.g. MLP residual on
vs off with mixing, norms, bias and activation equal) and reports the range of the capacity differences, in
facts and in percent of the "off" variant, and in how many pairs "on" stores more. The MLP toggle pairs each
MLP variant with the MLP-less variant of the same mixing and norms, whatever its bias (Table B.1 gives the
MLP-less rows no bias setting, and Appendix B's "324 - 794" is reproduced from Table B.1 only with this
pairing); every other toggle compares MLP variants only. Appendix B leaves the outlier combination (MLP +
norms, no residual, no bias, ReLU) out of every pair comparison; `exclude_outlier=True` does the same.

`compare_to_published` holds one capacity against the four published repeats of its Table B.1 row. The last
functions read the run record (`records.collect`) for the page modules: a variant's cells at every schedule,
the best of them, and the table cells they share (`yes_no`, `short_schedule`, `effect_text`).
"""

import itertools
import math
import statistics
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


def is_outlier(config: dict[str, Any]) -> bool:
    """Appendix B's outlier combination: MLP + norms, no MLP residual, no bias, ReLU (any mixing)."""
    return (
        config["mlp"]
        and config["norms"]
        and not config["mlp_residual"]
        and not config["bias"]
        and config["act_fn"] == "relu"
    )


def toggle_effect(
    records: list[dict[str, Any]],
    field: str,
    on: Any,
    off: Any,
    criterion: str = "any",
    *,
    exclude_outlier: bool = False,
) -> ToggleEffect:
    """The effect of switching `field` from `off` to `on` (see the module docstring for the pairing).

    With `exclude_outlier`, no pair contains the outlier combination (`is_outlier`), as in Appendix B.
    """
    if exclude_outlier:
        records = [r for r in records if not is_outlier(r["config"])]
    records = _repeats_merged(records, criterion)
    if field == "mlp":
        ignore = {"mlp", "mlp_residual", "act_fn", "bias"}
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


def _repeats_merged(records: list[dict[str, Any]], criterion: str) -> list[dict[str, Any]]:
    """One record per variant, its `criterion` the mean over the variant's repeats (as the published side
    pairs the means of Table B.1's four repeats), so no repeat counts twice and none is chosen by order."""
    values: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        values.setdefault(tuple(_cfg(r).items()), []).append(r)
    return [
        {"config": rs[0]["config"], criterion: statistics.mean(r[criterion] for r in rs)}
        for rs in values.values()
    ]


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


def toggle_effects(
    records: list[dict[str, Any]], *, exclude_outlier: bool = False
) -> dict[str, ToggleEffect]:
    """The effect of each of `TOGGLES` with matched pairs in `records` (a partial table skips the rest)."""
    out = {}
    for key, (field, on, off) in TOGGLES.items():
        try:
            out[key] = toggle_effect(records, field, on, off, exclude_outlier=exclude_outlier)
        except ValueError:
            continue
    return out


@dataclass
class PublishedComparison:
    """One capacity against the published repeats of the same variant (Table B.1)."""

    ours: float | int
    mean: float | int
    low: float | int
    high: float | int

    @property
    def rel(self) -> float:
        """ours / published mean - 1 (0.1 = 10% above the mean)."""
        return self.ours / self.mean - 1

    @property
    def within_10(self) -> bool:
        """Within 10% of the published mean (inclusive)."""
        return abs(self.ours - self.mean) <= 0.1 * self.mean

    @property
    def inside(self) -> bool:
        """Inside the published repeats' range min .. max (inclusive)."""
        return self.low <= self.ours <= self.high


def compare_to_published(ours: float | int, repeats: list[float] | list[int]) -> PublishedComparison:
    """`ours` against the published repeats: their mean and range (min - max)."""
    if not repeats:
        raise ValueError("no published repeats")
    return PublishedComparison(ours, statistics.mean(repeats), min(repeats), max(repeats))


def published_records(rows: list[dict[str, Any]], criterion: str = "any") -> list[dict[str, Any]]:
    """Table B.1 rows as records (the mean of the four repeats as the capacity), for `toggle_effects`.

    MLP-less rows have no residual, bias or activation setting (None), so they pair only in the MLP toggle.
    """
    out = []
    for i, row in enumerate(rows):
        config = {k: row.get(k) for k in FIELDS}
        out.append(
            {"variant": f"table_b1[{i}]", "config": config, criterion: statistics.mean(row[criterion])}
        )
    return out


def published_row(rows: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any] | None:
    """The Table B.1 row of a variant (MLP-less rows match on mixing and norms only), or None."""
    fields = FIELDS if config["mlp"] else ("mixing", "mlp", "norms")
    return next((r for r in rows if all(r.get(k) == config[k] for k in fields)), None)


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
    """The published outlier (`is_outlier`) of one mixing, and that mixing's lowest MLP variant."""
    mlp = [r for r in records if r["config"]["mlp"] and r["config"]["mixing"] == mixing]
    odd = next((r for r in mlp if is_outlier(r["config"])), None)
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
    """(variant, n, successes at n, a larger n', more successes there) where success grows with n."""
    out = []
    for r in records:
        counts = sorted((int(n), k) for n, k in r["successes"].items())
        for (n1, k1), (n2, k2) in itertools.pairwise(counts):
            if k2 > k1:
                out.append((r["variant"], n1, k1, n2, k2))
                break
    return out


# --- over the run record (`records.collect`), shared by `page` and `page_published` ---


def yes_no(v: bool) -> str:
    """A table cell for a flag: "yes" or "-"."""
    return "yes" if v else "-"


def effect_text(e: ToggleEffect, *, facts: bool = False) -> str:
    """ "+88 - +448 (+75% - +233%), better in 24/24" (facts=False: the percentages only)."""
    pct = "-" if math.isnan(e.pct[0]) else f"{e.pct[0]:+.0f}% - {e.pct[1]:+.0f}%"
    span = f"{e.diff[0]:+.0f} - {e.diff[1]:+.0f} ({pct})" if facts else pct
    return f"{span}, better in {e.better}/{e.pairs}"


def short_schedule(schedule: dict[str, Any]) -> str:
    """ "50,000 / 5,000": epochs per lr phase / patience (acc appended when it is not 1)."""
    acc = "" if schedule["target_acc"] == 1 else f", acc {schedule['target_acc']:g}"
    return f"{schedule['max_epochs']:,} / {schedule['patience']:,}{acc}"


def longest_schedules(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """variant -> the table records of its longest other schedule (most epochs per phase), base d only."""
    d = record["table"][0]["d"]
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(record.get("other_schedules", []), key=lambda r: r["schedule"]["max_epochs"]):
        if r["d"] != d or r["schedule"]["target_acc"] != record["schedule"]["target_acc"]:
            continue
        prev = out.get(r["variant"])
        if prev and prev[0]["schedule"] == r["schedule"]:
            prev.append(r)
        else:
            out[r["variant"]] = [r]
    return out


def schedule_key(schedule: dict[str, Any]) -> tuple:
    """A training schedule as a hashable key: its (field, value) pairs by field name, lists as tuples."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in schedule.items()))


def by_schedule(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """Records grouped by their schedule (`schedule_key`), in the order each schedule first appears."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(schedule_key(r["schedule"]), []).append(r)
    return groups


def schedule_groups(record: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(schedule, its records) for the base schedule and every other one, shortest first."""
    groups = [(record["schedule"], record["table"])]
    groups += [(rs[0]["schedule"], rs) for rs in by_schedule(record.get("other_schedules", [])).values()]
    return sorted(groups, key=lambda g: g[0]["max_epochs"])


def all_cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every table record at the base d and accuracy, whatever its schedule (base and other schedules)."""
    d, acc = record["table"][0]["d"], record["schedule"]["target_acc"]
    other = [
        r for r in record.get("other_schedules", []) if r["d"] == d and r["schedule"]["target_acc"] == acc
    ]
    return record["table"] + other


def best_cells(record: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The largest Any over every schedule's cells, and the cells that reach it."""
    cells = all_cells(record)
    best = max(r["any"] for r in cells)
    return best, [r for r in cells if r["any"] == best]


def config_cells(c: dict[str, Any]) -> list[str]:
    """mixing, MLP, norms, MLP res, bias, act cells of a variant (MLP-less rows leave res and act blank)."""
    mlp = (
        [yes_no(c["mlp_residual"]), yes_no(c["bias"]), c["act_fn"]]
        if c["mlp"]
        else ["", yes_no(c["bias"]), ""]
    )
    return [c["mixing"], yes_no(c["mlp"]), yes_no(c["norms"]), *mlp]
