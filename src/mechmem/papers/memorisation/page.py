"""The memorisation page (`Paper.page`): a `Report` computed from the run record, prose from docs/.

Every number here is read or computed from the record (`records.collect`): the sweep records, the
constructions' capacity results and the published values (the package's `published.json`, copied into the
record), which give each value's source and the exact sentence, table row or code line it is read from. The
pair comparisons follow Appendix B (the outlier combination left out); the project's earlier inclusion is
shown beside them. The constructions' sections are in `page_constructions`."""

import json
import math
import statistics
from typing import Any

from mechmem.papers.memorisation.fits import ScalingFit, fit_scaling
from mechmem.papers.memorisation.page_constructions import constructions_headline, constructions_sections
from mechmem.papers.memorisation.plots import plot_convergence, plot_scaling
from mechmem.papers.memorisation.records import PUBLISHED_NAME
from mechmem.papers.memorisation.summary import (
    PublishedComparison,
    ToggleEffect,
    by_name,
    compare_to_published,
    mean_sd,
    non_monotone,
    outlier,
    published_records,
    published_row,
    sort_key,
    toggle_effects,
)
from mechmem.report.document import Report, Section, Table

TITLE = (
    "Fact memorisation in one-layer models (Linsefors & Bushnaq):"
    " capacity, scaling and hand-coded constructions"
)
SCALING_LABELS = {
    "2emb+mlp/relu": "simple",
    "2emb+mlp+bias/relu": "simple + bias",
    "attn+mlp+norms+bias+res/gelu": "full",
}
MIXING_LABELS = {"2emb": "2Emb", "uniform": "uniform", "attn": "learned attention"}
SWEEP = "python analyses/sweep_facts.py"
"""How the page's commands call the sweep script."""
MAX_FACTS = "python analyses/max_facts.py"
SCALING_SWEEP = {
    "2emb+mlp/relu": "nb",
    "2emb+mlp+bias/relu": "reduced",
    "attn+mlp+norms+bias+res/gelu": "full",
}
"""Scaling model -> its `analyses/sweep_facts.py scaling --variant` name."""


def _yes(v: bool) -> str:
    return "yes" if v else "-"


def _effect(e: ToggleEffect, *, facts: bool = False) -> str:
    pct = "-" if math.isnan(e.pct[0]) else f"{e.pct[0]:+.0f}% - {e.pct[1]:+.0f}%"
    span = f"{e.diff[0]:+.0f} - {e.diff[1]:+.0f} ({pct})" if facts else pct
    return f"{span}, better in {e.better}/{e.pairs}"


def _schedule(record: dict[str, Any]) -> str:
    s = record["schedule"]
    return f"{s['max_epochs']} epochs per lr phase, patience {s['patience']}, acc >= {s['target_acc']:g}"


def _short(schedule: dict[str, Any]) -> str:
    """ "50,000 / 5,000": epochs per lr phase / patience (acc appended when it is not 1)."""
    acc = "" if schedule["target_acc"] == 1 else f", acc {schedule['target_acc']:g}"
    return f"{schedule['max_epochs']:,} / {schedule['patience']:,}{acc}"


def _longest(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
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


def _by_schedule(record: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(schedule, its records) for the base schedule and every other one, shortest first."""
    groups = [(record["schedule"], record["table"])]
    for s in {json.dumps(r["schedule"], sort_keys=True) for r in record.get("other_schedules", [])}:
        groups.append(
            (
                json.loads(s),
                [r for r in record["other_schedules"] if json.dumps(r["schedule"], sort_keys=True) == s],
            )
        )
    return sorted(groups, key=lambda g: g[0]["max_epochs"])


def _effects_by_schedule(record: dict[str, Any], key: str, facts: bool, exclude_outlier: bool) -> str:
    """A toggle's effect at every schedule with matched pairs, e.g. "+88 - +448 (...) (150 / 50); ..."."""
    parts = []
    for schedule, rs in _by_schedule(record):
        effects = toggle_effects(
            [r for r in rs if r["d"] == record["table"][0]["d"]], exclude_outlier=exclude_outlier
        )
        if key in effects:
            parts.append(f"{_effect(effects[key], facts=facts)} ({_short(schedule)})")
    return "; ".join(parts) or "-"


def _all_cells(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Every table record at the base d and accuracy, whatever its schedule (base and other schedules)."""
    d, acc = record["table"][0]["d"], record["schedule"]["target_acc"]
    other = [
        r for r in record.get("other_schedules", []) if r["d"] == d and r["schedule"]["target_acc"] == acc
    ]
    return record["table"] + other


def _best(record: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The largest Any over every schedule's cells, and the cells that reach it."""
    cells = _all_cells(record)
    best = max(r["any"] for r in cells)
    return best, [r for r in cells if r["any"] == best]


def _b1_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    return record["published"]["table_b1"]["rows"]


def b1_comparisons(
    record: dict[str, Any],
) -> list[tuple[dict[str, Any], dict[str, Any], PublishedComparison]]:
    """(our cell, its Table B.1 row, the comparison of Any) per variant, each at its longest schedule."""
    longest: dict[str, dict[str, Any]] = {}
    for r in sorted(_all_cells(record), key=lambda r: r["schedule"]["max_epochs"]):
        if r.get("repeat", 0) == 0:
            longest[r["variant"]] = r
    out = []
    for r in sorted(longest.values(), key=sort_key):
        row = published_row(_b1_rows(record), r["config"])
        if row is not None:
            out.append((r, row, compare_to_published(r["any"], row["any"])))
    return out


def b1_counts(
    comparisons: list[tuple[dict[str, Any], dict[str, Any], PublishedComparison]],
) -> tuple[int, int, int]:
    """(rows, rows within 10% of the published mean, rows inside the published range)."""
    return (
        len(comparisons),
        sum(c.within_10 for _, _, c in comparisons),
        sum(c.inside for _, _, c in comparisons),
    )


def _at_published(
    record: dict[str, Any], comparisons: list[tuple[dict[str, Any], dict[str, Any], PublishedComparison]]
) -> list[tuple[dict[str, Any], dict[str, Any], PublishedComparison]]:
    pub = record["published"]["schedule"]["value"]
    return [
        t
        for t in comparisons
        if (t[0]["schedule"]["max_epochs"], t[0]["schedule"]["patience"])
        == (pub["max_epochs"], pub["patience"])
    ]


def b1_summary(record: dict[str, Any]) -> str:
    """The counts line: within 10% of the published mean, inside its range (published schedule, all)."""
    comparisons = b1_comparisons(record)
    n_pub, w_pub, i_pub = b1_counts(_at_published(record, comparisons))
    n, w, i = b1_counts(comparisons)
    sched = _short(record["published"]["schedule"]["value"] | {"target_acc": 1})
    return (
        f"Table B.1 (Any, four published repeats) against ours: at the published schedule ({sched}) {n_pub}"
        " rows,"
        f" {w_pub} within 10% of the published mean, {i_pub} inside the published range; overall (each"
        " variant"
        f" at its longest schedule) {n} rows, {w} within 10%, {i} inside."
    )


def _norms_no_mlp(record: dict[str, Any]) -> str:
    """Norms on vs off without an MLP, per mixing, at the base schedule and any longer one both ran with."""
    parts = []
    for schedule, rs in _by_schedule(record):
        named = {r["variant"]: r for r in rs if r["d"] == record["table"][0]["d"]}
        pcts = [
            f"{MIXING_LABELS[m]}"
            f" {100 * (named[m + '+norms']['any'] - named[m]['any']) / named[m]['any']:+.0f}%"
            for m in ("2emb", "uniform", "attn")
            if m in named and m + "+norms" in named and named[m]["any"]
        ]
        if pcts:
            parts.append(f"{', '.join(pcts)} ({_short(schedule)})")
    return "; ".join(parts) or "-"


def _repeats(records: list[dict[str, Any]]) -> int:
    return len({r["repeat"] for r in records})


def _no_mlp_line(table: list[dict[str, Any]]) -> str:
    named = by_name(table)
    parts = [
        f"{MIXING_LABELS[m]} {named[m]['any']} / {named[m + '+norms']['any']}"
        for m in ("2emb", "uniform", "attn")
        if m in named and m + "+norms" in named
    ]
    return "MLP-less variants (no norms / norms, Any): " + ", ".join(parts) + "."


def facts_headline(record: dict[str, Any]) -> list[str]:
    """The facts half of the headline: anchor, component ordering, best variant, scaling."""
    table, pub = record["table"], record["published"]
    named = by_name(table)
    lines = [
        f"Schedule of the table and scaling: {_schedule(record)}; {_repeats(table)} repeat(s) of 11 inits."
    ]
    if "2emb" in named:
        a = named["2emb"]
        line = (
            f"Anchor: 2Emb without MLP and norms stores {a['any']} facts"
            f" (Any; Most {a['most']}, All {a['all']})"
        )
        anchors = [
            (MIXING_LABELS[m], published_row(_b1_rows(record), named[m]["config"]))
            for m in ("2emb", "uniform", "attn")
            if m in named
        ]
        line += " [published, Table B.1 Any of the four repeats: " + ", ".join(
            f"{label} {' / '.join(map(str, row['any']))}" for label, row in anchors if row
        )
        line += "]"
        if record.get("anchor"):
            anc, s = record["anchor"], record["anchor"]["schedule"]
            line += f"; with {s['max_epochs']} epochs per phase, patience {s['patience']}: {anc['any']}"
        lines.append(line + ". " + _no_mlp_line(table))
    lines += _longer_lines(record)
    lines.append(b1_summary(record))
    effects = toggle_effects(table, exclude_outlier=True)
    best, at_best = _best(record)
    base_best = max(table, key=lambda r: r["any"])
    full = named.get("attn+mlp+norms+bias+res/gelu")
    parts = [
        f"{label} in {effects[k].better}/{effects[k].pairs} matched pairs"
        for k, label in (
            ("2emb_vs_uniform", "2Emb > uniform attention"),
            ("uniform_vs_attn", "uniform > learned attention"),
        )
        if k in effects
    ]
    if "mlp" in effects:
        parts.append(
            f"the MLP adds {_effect(effects['mlp'], facts=True)} pairs [published"
            f" {pub['toggles']['mlp']['value']}]"
        )
    ceiling = base_best["config"]["n_in"] ** 2
    reached = ", ".join(f"{r['variant']} at {_short(r['schedule'])}" for r in sorted(at_best, key=sort_key))
    lines.append(
        f"At the base schedule ({_short(record['schedule'])}; pairs as in Appendix B, the outlier combination"
        " left out): "
        + "; ".join(parts)
        + f". Best over every schedule: {best} facts (Any) of the {ceiling} ceiling"
        + (" (reached)" if best >= ceiling else "")
        + f", by {reached}; best at the base schedule: {base_best['variant']}, {base_best['any']}."
        + (
            f" Learned attention across inits (full model): Any {full['any']} vs All {full['all']}."
            if full
            else ""
        )
    )
    for name, fit in _any_fits(record).items():
        caps = " -> ".join(f"{c:.0f}" for c in fit.capacity)
        ds = " -> ".join(str(d) for d in fit.d)
        lines.append(
            f"Scaling, {SCALING_LABELS.get(name, name)} model ({name}), d = {ds} (Any): {caps}, "
            f"S = {fit.a:.2f} d^2 / ln d (free: {fit.b:.2f} d^{fit.k:.2f})."
        )
    return lines


def _longer_lines(record: dict[str, Any]) -> list[str]:
    """One headline line per longer schedule of the table: each variant's Any (All) there, base Any beside."""
    base = by_name(record["table"])
    out = []
    for schedule in sorted(
        {json.dumps(r["schedule"], sort_keys=True) for r in record.get("other_schedules", [])},
        key=lambda s: -json.loads(s)["max_epochs"],
    ):
        rs = [
            r
            for r in record["other_schedules"]
            if json.dumps(r["schedule"], sort_keys=True) == schedule and r["d"] == record["table"][0]["d"]
        ]
        parts = [
            f"{r['variant']} {r['any']} (All {r['all']}; base {base[r['variant']]['any']})"
            for r in sorted(rs, key=sort_key)
            if r["variant"] in base
        ]
        if parts:
            out.append(
                f"At {_short(json.loads(schedule))} (epochs per lr phase / patience), Any: "
                + ", ".join(parts)
                + "."
            )
    return out


def _any_fits(record: dict[str, Any]) -> dict[str, ScalingFit]:
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    return {k.removesuffix(" any"): f for k, f in fits.items() if k.endswith(" any")}


def variants_section(record: dict[str, Any]) -> Section:
    """The 54 variants at the base schedule (mean +- sd over repeats) and at each one's longest other one."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(record["table"], key=sort_key):
        groups.setdefault(r["variant"], []).append(r)
    longest = _longest(record)
    rows = []
    for name, rs in groups.items():
        c = rs[0]["config"]
        mlp_cells = (
            [_yes(c["mlp_residual"]), _yes(c["bias"]), c["act_fn"]] if c["mlp"] else ["", _yes(c["bias"]), ""]
        )
        long = longest.get(name, [])
        rows.append(
            [
                c["mixing"],
                _yes(c["mlp"]),
                _yes(c["norms"]),
                *mlp_cells,
                *(mean_sd([r[k] for r in rs]) for k in ("any", "most", "all")),
                f"{sum(r['seconds'] for r in rs) / len(rs):.0f}",
                _short(long[0]["schedule"]) if long else "",
                " / ".join(mean_sd([r[k] for r in long]) for k in ("any", "most", "all")) if long else "",
                f"{sum(r['seconds'] for r in long) / len(long):.0f}" if long else "",
            ]
        )
    total_h = sum(r["seconds"] for r in record["table"]) / 3600
    lines = [
        (
            f"{len(groups)} variants, {_repeats(record['table'])} repeat(s); Any / Most / All at the base"
            " schedule:"
            f" {_schedule(record)} (epochs per lr phase / patience: {_short(record['schedule'])})."
        ),
        (
            f"s = wall seconds of a cell's search (sum over the base cells: {total_h:.1f} h). The last three"
            " columns:"
            " the longest other schedule a variant ran with (epochs per lr phase / patience), its Any / Most"
            " / All"
            " and seconds; blank where the variant ran only at the base schedule."
        ),
    ]
    headers = [
        "mixing",
        "MLP",
        "norms",
        "MLP res",
        "bias",
        "act",
        "Any",
        "Most",
        "All",
        "s",
        "longer schedule",
        "Any / Most / All",
        "s ",
    ]
    section = Section("variants", "Results: the 54 variants", lines=lines, tables=[Table(headers, rows)])
    points = _convergence_points(record)
    if points:
        pub = record["published"].get("anchor_no_mlp_mean")
        section.add_figure(
            "convergence", plot_convergence(points, published=float(pub["value"]) if pub else None)
        )
    return section


def _convergence_points(record: dict[str, Any]) -> dict[str, list[tuple[int, int, int]]]:
    """variant -> [(epoch cap, Any, All)] for variants with 2+ schedules (repeat 0; the anchor file too)."""
    d = record["table"][0]["d"]
    base = [r for r in record["table"] if r.get("repeat", 0) == 0]
    other = [r for r in record.get("other_schedules", []) if r["d"] == d and r.get("repeat", 0) == 0]
    anchor = [record["anchor"]] if record.get("anchor") else []
    points: dict[str, dict[int, tuple[int, int, int]]] = {}
    for r in base + other + anchor:
        if r["schedule"]["target_acc"] == record["schedule"]["target_acc"]:
            points.setdefault(r["variant"], {})[r["schedule"]["max_epochs"]] = (
                r["schedule"]["max_epochs"],
                r["any"],
                r["all"],
            )
    return {v: sorted(p.values()) for v, p in points.items() if len(p) >= 2}


def _cfg_cells(c: dict[str, Any]) -> list[str]:
    """mixing, MLP, norms, MLP res, bias, act cells of a variant (MLP-less rows leave res and act blank)."""
    mlp = [_yes(c["mlp_residual"]), _yes(c["bias"]), c["act_fn"]] if c["mlp"] else ["", _yes(c["bias"]), ""]
    return [c["mixing"], _yes(c["mlp"]), _yes(c["norms"]), *mlp]


def table_b1_section(record: dict[str, Any]) -> Section:
    """Every variant at its longest schedule against the four published repeats of its Table B.1 row (Any)."""
    rows = []
    for r, row, c in b1_comparisons(record):
        rows.append(
            [
                *_cfg_cells(r["config"]),
                " / ".join(map(str, row["any"])),
                f"{c.low:.0f} - {c.high:.0f}",
                f"{c.mean:.0f}",
                _short(r["schedule"]),
                r["any"],
                f"{100 * c.rel:+.0f}%",
                _yes(c.within_10),
                _yes(c.inside),
            ]
        )
    headers = ["mixing", "MLP", "norms", "MLP res", "bias", "act", "published (1)-(4)", "range", "mean"]
    headers += ["our schedule", "ours", "vs mean", "within 10%", "inside range"]
    b1 = record["published"]["table_b1"]
    caption = (
        f"Any. Published: {b1['source']}; each row's source line is in {PUBLISHED_NAME}. Ours: one repeat of"
        " 11"
        " inits at the schedule named (epochs per lr phase / patience), the longest the variant ran with."
    )
    return Section(
        "table_b1",
        "Table B.1: ours against the published repeats",
        lines=[b1_summary(record)],
        tables=[Table(headers, rows, caption=caption)],
    )


def _norms_no_mlp_published(record: dict[str, Any]) -> str:
    """The no-MLP norms gain per mixing from the means of the Table B.1 rows (Appendix B's range)."""
    b1, parts = _b1_rows(record), []
    for m in ("2emb", "uniform", "attn"):
        off = published_row(b1, {"mixing": m, "mlp": False, "norms": False})
        on = published_row(b1, {"mixing": m, "mlp": False, "norms": True})
        if off and on:
            a, b = sum(on["any"]) / len(on["any"]), sum(off["any"]) / len(off["any"])
            parts.append(f"{MIXING_LABELS[m]} {100 * (a - b) / b:+.0f}%")
    return ", ".join(parts)


def _norms_no_mlp_verdict(record: dict[str, Any]) -> str:
    """At the published schedule: each mixing's no-MLP norms gain, in or out of the published range."""
    pub = record["published"]["schedule"]["value"]
    d = record["table"][0]["d"]
    named = {
        r["variant"]: r
        for r in _all_cells(record)
        if r["d"] == d
        and (r["schedule"]["max_epochs"], r["schedule"]["patience"]) == (pub["max_epochs"], pub["patience"])
    }
    gains = {
        m: 100 * (named[m + "+norms"]["any"] - named[m]["any"]) / named[m]["any"]
        for m in ("2emb", "uniform", "attn")
        if m in named and m + "+norms" in named and named[m]["any"]
    }
    if not gains:
        return ""
    lo, hi = record["published"]["norms_no_mlp"]["pct"]
    inside = [MIXING_LABELS[m] for m, g in gains.items() if lo <= g <= hi]
    below = [MIXING_LABELS[m] for m, g in gains.items() if g < lo]
    text = (
        f"Norms without an MLP at the published schedule ({_short(pub | {'target_acc': 1})}): "
        + ", ".join(f"{MIXING_LABELS[m]} {g:+.0f}%" for m, g in gains.items())
        + f"; the published range is {lo:+.0f}% .. {hi:+.0f}%: inside it "
        + (", ".join(inside) or "none")
        + ("; below it " + ", ".join(below) if below else "")
        + "."
    )
    return text


def comparisons_section(record: dict[str, Any]) -> Section:
    """Published findings of Appendix B next to ours (Any), with Appendix B's pairs and with all pairs."""
    table, pub = record["table"], record["published"]
    named = by_name(table)
    labels = {
        "mlp": "MLP on vs off",
        "2emb_vs_uniform": "2Emb vs uniform attention",
        "uniform_vs_attn": "uniform vs learned attention",
        "mlp_residual": "MLP residual on vs off",
        "gelu": "GELU vs ReLU",
        "bias": "bias on vs off",
        "norms": "norms on vs off (with an MLP)",
    }
    longest = _longest(record)

    def ours(m: str) -> str:
        more = longest.get(m)
        extra = (
            f" ({', '.join(str(r['any']) for r in more)} at {_short(more[0]['schedule'])})" if more else ""
        )
        return f"{MIXING_LABELS[m]} {named[m]['any']}{extra}"

    anchor = ", ".join(ours(m) for m in ("2emb", "uniform", "attn") if m in named)
    b1 = _b1_rows(record)
    b1_anchor = ", ".join(
        f"{MIXING_LABELS[m]} {' / '.join(map(str, row['any']))}"
        for m in ("2emb", "uniform", "attn")
        if (row := published_row(b1, {"mixing": m, "mlp": False, "norms": False}))
    )
    rows = [["no MLP, no norms, every mixing", pub["anchor_no_mlp"]["value"], b1_anchor, anchor, anchor]]
    b1_effects = toggle_effects(published_records(b1), exclude_outlier=True)
    for key, label in labels.items():
        facts = key in ("mlp", "2emb_vs_uniform", "uniform_vs_attn")
        rows.append(
            [
                label,
                pub["toggles"][key]["value"],
                _effect(b1_effects[key], facts=True),
                _effects_by_schedule(record, key, facts, exclude_outlier=True),
                _effects_by_schedule(record, key, facts, exclude_outlier=False),
            ]
        )
    odd = {m: o for m in ("2emb", "uniform", "attn") if (o := outlier(table, m))}
    odd_text = "; ".join(
        f"{MIXING_LABELS[m]} {o['any']} (All {o['all']}), "
        + ("the lowest MLP variant" if o["is_lowest"] else f"lowest is {o['lowest_any']}")
        for m, o in odd.items()
    )
    b1_odd = "; ".join(
        f"{MIXING_LABELS[m]} {statistics.mean(row['any']):.0f}"
        for m in ("2emb", "uniform", "attn")
        if (
            row := published_row(
                b1,
                {
                    "mixing": m,
                    "mlp": True,
                    "norms": True,
                    "mlp_residual": False,
                    "bias": False,
                    "act_fn": "relu",
                },
            )
        )
    )
    rows.append(
        ["outlier: MLP + norms, no residual, no bias, ReLU", pub["outlier"]["value"], b1_odd, "-", odd_text]
    )
    no_mlp = _norms_no_mlp(record)
    rows.append(
        [
            "norms on vs off, no MLP",
            pub["norms_no_mlp"]["value"],
            _norms_no_mlp_published(record),
            no_mlp,
            no_mlp,
        ]
    )
    best, at_best = _best(record)
    ceiling = table[0]["config"]["n_in"] ** 2
    base_best = max(r["any"] for r in table)
    reached = ", ".join(f"{r['variant']} at {_short(r['schedule'])}" for r in sorted(at_best, key=sort_key))
    ours_ceiling = (
        f"{ceiling}: reached by {reached}"
        if best >= ceiling
        else f"{ceiling}: not reached (best {best}, {reached})"
    ) + f"; best at the base schedule {base_best}"
    b1_ceiling = sum(max(row["any"]) >= pub["ceiling"]["value"] for row in b1)
    rows.append(
        [
            "dataset ceiling",
            str(pub["ceiling"]["value"]),
            f"reached in {b1_ceiling} of {len(b1)} rows",
            ours_ceiling,
            ours_ceiling,
        ]
    )
    caption = (
        "Published: Appendix B of the seed text (each value's sentence is listed above). Table B.1: the same"
        " comparison"
        " recomputed by this page's code from the means of Table B.1's four repeats, Appendix B's pairs. Ours"
        " (Any):"
        " each value names its schedule (epochs per lr phase / patience), one repeat; a toggle's effect is"
        " given at"
        " every schedule with matched pairs. 'Appendix B pairs' leaves out the outlier combination (MLP +"
        " norms, no"
        " residual, no bias, ReLU); 'all pairs' keeps it (the project's earlier comparison)."
    )
    headers = [
        "finding",
        "published (text)",
        "Table B.1 means, Appendix B pairs",
        "ours, Appendix B pairs (outlier left out)",
        "ours, all pairs",
    ]
    quotes = [
        ("no MLP, no norms", pub["anchor_no_mlp"]),
        *((labels[k], pub["toggles"][k]) for k in labels),
        ("outlier", pub["outlier"]),
        ("outlier left out", pub["outlier_excluded"]),
        ("norms, no MLP", pub["norms_no_mlp"]),
        ("dataset ceiling", pub["ceiling"]),
    ]
    lines = [line for line in (_norms_no_mlp_verdict(record),) if line]
    lines += [f'Source, {name}: {v["source"]}: "{v["quote"]}"' for name, v in quotes]
    return Section(
        "comparisons",
        "Published anchors and comparisons",
        lines=lines,
        tables=[Table(headers, rows, caption=caption)],
    )


def _e7(record: dict[str, Any]) -> dict[str, dict[int, int]]:
    """Scaling model -> d -> the authors' E7 Any (published values file)."""
    models = record["published"]["e7_any"]["models"]
    return {name: {p["d"]: p["any"] for p in points} for name, points in models.items()}


def _e7_schedule(record: dict[str, Any], d: int) -> tuple[int, int] | None:
    """(epochs per lr phase, patience) of the authors' E7 at d, or None for a d E7 did not run."""
    pub = record["published"]["scaling_schedule"]["value"]
    epochs = pub["max_epochs"].get(str(d))
    return (epochs, pub["patience"]) if epochs else None


def scaling_section(record: dict[str, Any]) -> Section:
    """Scaling records (mean over repeats) beside the authors' E7 values, fits and the figure."""
    rows = []
    e7 = _e7(record)
    every = record["scaling"] + record.get("scaling_other", [])
    for r in sorted(
        every,
        key=lambda r: (r["variant"] not in SCALING_LABELS, r["variant"], r["d"], r["schedule"]["max_epochs"]),
    ):
        pub = e7.get(r["variant"], {}).get(r["d"])
        e7_sched = _e7_schedule(record, r["d"])
        at_e7 = e7_sched == (r["schedule"]["max_epochs"], r["schedule"]["patience"])
        rows.append(
            [
                SCALING_LABELS.get(r["variant"], r["variant"]),
                r["d"],
                _short(r["schedule"]) + (" (E7)" if at_e7 else ""),
                r["any"],
                r["most"],
                r["all"],
                r["config"]["n_in"] ** 2,
                pub if pub else "-",
                f"{100 * (r['any'] / pub - 1):+.0f}%" if pub else "-",
                f"{r['seconds']:.0f}",
            ]
        )
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    lines = [f"{name}: S = {f.a:.2f} d^2 / ln d (free: {f.b:.2f} d^{f.k:.2f})" for name, f in fits.items()]
    headers = ["model", "d", "epochs / patience", "Any", "Most", "All", "ceiling", "E7 Any", "vs E7", "s"]
    e7_source = record["published"]["e7_any"]["source"]
    caption = (
        f"E7 Any: {e7_source} (one run per d; source lines in {PUBLISHED_NAME}). (E7) marks a row run at the"
        " authors' E7 schedule for its d."
    )
    section = Section(
        "scaling",
        "Results: scaling",
        lines=lines,
        tables=[Table(headers, rows, caption=caption)],
    )
    section.lines.insert(0, f"Fits use the base schedule ({_short(record['schedule'])}) only.")
    for name, by_d in e7.items():
        ds = sorted(by_d)
        f = fit_scaling(ds, [by_d[d] for d in ds])
        section.lines.append(
            f"The authors' E7 Any, {SCALING_LABELS.get(name, name)} model, d = {ds[0]} .. {ds[-1]}, fitted by"
            " the"
            f" same code: S = {f.a:.2f} d^2 / ln d (free: {f.b:.2f} d^{f.k:.2f})."
        )
    law, ce = record["published"]["scaling_law"], record["published"]["construction_exponents"]["value"]
    section.lines.append(
        f"Published law: {law['value']} ({law['source']}). The post's fitted exponents {ce['hand_coded']} and"
        f" {ce['trained']} belong to the constructions comparison (hand-coded vs trained challenge model at"
        " acc >= 0.9, see there), not to these models."
    )
    any_fits = _any_fits(record)
    if any_fits:
        ds = sorted({d for f in any_fits.values() for d in f.d})
        secant = 2 - math.log(math.log(ds[-1]) / math.log(ds[0])) / math.log(ds[-1] / ds[0])
        section.lines.append(
            f"Over d = {ds[0]} .. {ds[-1]} the law d^2 / ln d itself has secant exponent {secant:.2f}."
        )
        section.add_figure(
            "capacity", plot_scaling({SCALING_LABELS.get(k, k): f for k, f in any_fits.items()})
        )
    return section


def benchmark_section(record: dict[str, Any]) -> Section:
    """Batched vs per-init training time, from the benchmark's JSON."""
    bench = record.get("benchmark")
    if not bench:
        return Section(
            "benchmark", "Batched training speed", skipped="no benchmark record (facts_benchmark.json)"
        )
    rows = [
        [r["variant"], r["sequential_ms"], r["batched_ms"], f"{r['speed_up']:.1f}x"] for r in bench["rows"]
    ]
    goal = record["published"]["benchmark_goal"]["value"]
    caption = f"`{bench['source']}`; goal {goal}x ({record['published']['benchmark_goal']['source']})."
    table = Table(
        ["variant", "sequential ms / init-epoch", "batched ms / init-epoch", "speed-up"],
        rows,
        caption=caption,
        floatfmt=".2f",
    )
    met = [r["variant"] for r in bench["rows"] if r["speed_up"] >= goal]
    lines = [
        (
            f"d = {bench['d']}, {bench['n_facts']} facts, {bench['inits']} inits, {bench['epochs']} epochs"
            " per run,"
            f" {bench.get('threads', 1)} thread(s), best of {bench.get('rounds', 1)} alternating round(s)."
            f" Goal met for {len(met)} of {len(bench['rows'])} variants."
        )
    ]
    return Section("benchmark", "Batched training speed", lines=lines, tables=[table])


def deviations_section(record: dict[str, Any], other: list[dict[str, Any]]) -> Section:
    """Computed caveats: success not monotone in n; the time per cell of records of other schedules."""
    table = record["table"]
    odd = non_monotone(table)
    lines = (
        [
            f"Success grows with n somewhere in {len(odd)} of {len(table)} searches, e.g. "
            + "; ".join(f"{v}: {k1}/11 inits at {n1} facts, {k2}/11 at {n2}" for v, n1, k1, n2, k2 in odd[:2])
            + "."
        ]
        if odd
        else []
    )
    for s in sorted(
        {json.dumps(r["schedule"], sort_keys=True) for r in other}, key=lambda s: json.loads(s)["max_epochs"]
    ):
        rs = [r for r in other if json.dumps(r["schedule"], sort_keys=True) == s]
        mean_s = sum(r["seconds"] for r in rs) / len(rs)
        sched = json.loads(s)
        lines.append(
            f"Cells at {sched['max_epochs']:,} epochs per phase, patience {sched['patience']:,}"
            f" ({len(rs)} in the data file): {mean_s:.0f} s per cell on average."
        )
    devices = record.get("facts_devices", ["cpu"])
    lines.append(
        f"Fact permutations drawn on: {', '.join(devices)} (the published runs drew theirs on CUDA's default"
        " generator, which gives a different fact set for the same seed)."
    )
    return Section("deviations", "Deviations and caveats", lines=lines)


def _groups(records: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """(epochs per lr phase, patience) -> records of that schedule (accuracy 1), shortest first."""
    out: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in records:
        if r["schedule"]["target_acc"] == 1:
            out.setdefault((r["schedule"]["max_epochs"], r["schedule"]["patience"]), []).append(r)
    return dict(sorted(out.items()))


def commands_section(record: dict[str, Any]) -> Section:
    """The sweep commands that produce the records in the data files, one per schedule (and model)."""
    lines = [
        f"Data: {', '.join(f'`data/{s}`' for s in record['sources'])}; published values: `{PUBLISHED_NAME}`."
    ]
    table = _all_cells(record)
    for (epochs, patience), rs in _groups(table).items():
        flags = f"--max-epochs {epochs} --patience {patience}"
        if len({r["variant"] for r in rs}) == 54:
            lines.append(f"Table, all 54 variants at {epochs:,} / {patience:,}: `{SWEEP} table {flags}`.")
            continue
        names = sorted(
            {r["variant"] for r in rs}, key=lambda v: sort_key(next(r for r in rs if r["variant"] == v))
        )
        lines.append(
            f"Table at {epochs:,} / {patience:,} ({len(names)} variants): for each NAME in"
            f" {', '.join(names)}:"
            f" `{SWEEP} table --only NAME {flags}` (`--only` matches substrings; finished"
            " cells are skipped)."
        )
    scaling = record["scaling"] + record.get("scaling_other", [])
    by_model: dict[tuple[str, int, int], list[int]] = {}
    for (epochs, patience), rs in _groups(scaling).items():
        for r in rs:
            by_model.setdefault((r["variant"], epochs, patience), []).append(r["d"])
    for (variant, epochs, patience), ds in sorted(by_model.items()):
        lines.append(
            f"Scaling, {SCALING_LABELS.get(variant, variant)} model at {epochs:,} / {patience:,}:"
            f" `{SWEEP} scaling --variant {SCALING_SWEEP.get(variant, variant)} --ds"
            f" {' '.join(map(str, sorted(set(ds))))} --max-epochs {epochs} --patience {patience}`."
        )
    if record.get("anchor"):
        a = record["anchor"]["schedule"]
        lines.append(
            f"Anchor file: `{MAX_FACTS} --mixing 2emb --no-mlp --no-norms --max-epochs {a['max_epochs']}"
            f" --patience {a['patience']} --out docs/reproductions/data/facts_anchor_2emb_nomlp.json`."
        )
    if record.get("benchmark"):
        lines.append(f"Benchmark: `{record['benchmark']['source']}`.")
    return Section("commands", "Commands", lines=lines)


def page(record: dict[str, Any]) -> Report:
    """The whole page from a run record (`records.collect`)."""
    headline = Section("headline", "Headline", lines=facts_headline(record) + constructions_headline(record))
    sections = [
        headline,
        commands_section(record),
        Section("setup", "Setup: the 54 variants and the scaling"),
        variants_section(record),
        table_b1_section(record),
        comparisons_section(record),
        scaling_section(record),
        benchmark_section(record),
        *constructions_sections(record),
        deviations_section(record, record.get("other_schedules", [])),
    ]
    meta = {"variant": record["variant"], "published values": PUBLISHED_NAME}
    return Report(TITLE, "", meta, sections)
