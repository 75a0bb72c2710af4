"""The memorisation page (`Paper.page`): a `Report` computed from the run record, prose from docs/.

Every number here is read or computed from the record (`records.collect`): the sweep records, the
constructions' capacity results and the published values file, which names the source of each value. The
constructions' sections are in `page_constructions`.
"""

import json
import math
from typing import Any

from mechmem.papers.memorisation.fits import ScalingFit
from mechmem.papers.memorisation.page_constructions import constructions_headline, constructions_sections
from mechmem.papers.memorisation.plots import plot_scaling
from mechmem.papers.memorisation.summary import (
    ToggleEffect,
    by_name,
    mean_sd,
    non_monotone,
    outlier,
    sort_key,
    toggle_effects,
)
from mechmem.report.document import Report, Section, Table

TITLE = "Fact memorisation in one-layer models (Linsefors & Bushnaq): capacity, scaling and hand-coded constructions"
SCALING_LABELS = {"2emb+mlp+bias/relu": "simple", "attn+mlp+norms+bias+res/gelu": "full"}
MIXING_LABELS = {"2emb": "2Emb", "uniform": "uniform", "attn": "learned attention"}


def _yes(v: bool) -> str:
    return "yes" if v else "-"


def _effect(e: ToggleEffect, *, facts: bool = False) -> str:
    pct = "-" if math.isnan(e.pct[0]) else f"{e.pct[0]:+.0f}% - {e.pct[1]:+.0f}%"
    span = f"{e.diff[0]:+.0f} - {e.diff[1]:+.0f} ({pct})" if facts else pct
    return f"{span}, better in {e.better}/{e.pairs}"


def _schedule(record: dict[str, Any]) -> str:
    s = record["schedule"]
    return f"{s['max_epochs']} epochs per lr phase, patience {s['patience']}, acc >= {s['target_acc']:g}"


def _repeats(records: list[dict[str, Any]]) -> int:
    return len({r["repeat"] for r in records})


def _no_mlp_line(table: list[dict[str, Any]]) -> str:
    named = by_name(table)
    parts = [
        f"{MIXING_LABELS[m]} {named[m]['any']} / {named[m + '+norms']['any']}"
        for m in ("2emb", "uniform", "attn") if m in named and m + "+norms" in named
    ]
    return "MLP-less variants (no norms / norms, Any): " + ", ".join(parts) + "."


def facts_headline(record: dict[str, Any]) -> list[str]:
    """The facts half of the headline: anchor, component ordering, best variant, scaling."""
    table, pub = record["table"], record["published"]
    named, effects = by_name(table), toggle_effects(table)
    lines = [f"Schedule of the table and scaling: {_schedule(record)}; {_repeats(table)} repeat(s) of 11 inits."]
    if "2emb" in named:
        a = named["2emb"]
        line = f"Anchor: 2Emb without MLP and norms stores {a['any']} facts (Any; Most {a['most']}, All {a['all']})"
        line += f" [published {pub['anchor_no_mlp']['value']}]"
        if record.get("anchor"):
            anc, s = record["anchor"], record["anchor"]["schedule"]
            line += f"; with {s['max_epochs']} epochs per phase, patience {s['patience']}: {anc['any']}"
        lines.append(line + ". " + _no_mlp_line(table))
    best = max(table, key=lambda r: r["any"])
    full = named.get("attn+mlp+norms+bias+res/gelu")
    parts = [f"{label} in {effects[k].better}/{effects[k].pairs} matched pairs" for k, label in (
        ("2emb_vs_uniform", "2Emb > uniform attention"), ("uniform_vs_attn", "uniform > learned attention"))
        if k in effects]
    if "mlp" in effects:
        parts.append(f"the MLP adds {_effect(effects['mlp'], facts=True)} pairs [published {pub['toggles']['mlp']['value']}]")
    lines.append(
        "; ".join(parts) + f". Best: {best['variant']}, {best['any']} facts (Any) of the"
        f" {best['config']['n_in'] ** 2} ceiling." + (f" Learned attention across inits (full model): Any {full['any']} vs All {full['all']}." if full else "")
    )
    for name, fit in _any_fits(record).items():
        caps = " -> ".join(f"{c:.0f}" for c in fit.capacity)
        ds = " -> ".join(str(d) for d in fit.d)
        lines.append(
            f"Scaling, {SCALING_LABELS.get(name, name)} model ({name}), d = {ds} (Any): {caps}, "
            f"S = {fit.a:.2f} d^2 / ln d (free: {fit.b:.2f} d^{fit.k:.2f})."
        )
    return lines


def _any_fits(record: dict[str, Any]) -> dict[str, ScalingFit]:
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    return {k.removesuffix(" any"): f for k, f in fits.items() if k.endswith(" any")}


def variants_section(record: dict[str, Any]) -> Section:
    """The 54 variants: Any / Most / All (mean +- sd over repeats) and search seconds."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(record["table"], key=sort_key):
        groups.setdefault(r["variant"], []).append(r)
    rows = []
    for rs in groups.values():
        c = rs[0]["config"]
        mlp_cells = [_yes(c["mlp_residual"]), _yes(c["bias"]), c["act_fn"]] if c["mlp"] else ["", _yes(c["bias"]), ""]
        rows.append([c["mixing"], _yes(c["mlp"]), _yes(c["norms"]), *mlp_cells,
                     *(mean_sd([r[k] for r in rs]) for k in ("any", "most", "all")),
                     f"{sum(r['seconds'] for r in rs) / len(rs):.0f}"])
    total_h = sum(r["seconds"] for r in record["table"]) / 3600
    lines = [f"{len(groups)} variants, {_repeats(record['table'])} repeat(s); {_schedule(record)}.",
             f"s = wall seconds of a cell's search (sum over the cells: {total_h:.1f} h)."]
    if record.get("other_schedules"):
        lines.append(f"{len(record['other_schedules'])} record(s) of other schedules in the data file are not shown.")
    headers = ["mixing", "MLP", "norms", "MLP res", "bias", "act", "Any", "Most", "All", "s"]
    return Section("variants", "Results: the 54 variants", lines=lines, tables=[Table(headers, rows)])


def comparisons_section(record: dict[str, Any]) -> Section:
    """Published findings of Appendix B next to ours (Any)."""
    table, pub = record["table"], record["published"]
    effects = toggle_effects(table)
    named = by_name(table)
    labels = {"mlp": "MLP on vs off", "2emb_vs_uniform": "2Emb vs uniform attention",
              "uniform_vs_attn": "uniform vs learned attention", "mlp_residual": "MLP residual on vs off",
              "gelu": "GELU vs ReLU", "bias": "bias on vs off", "norms": "norms on vs off"}
    rows = [["no MLP, no norms, every mixing", pub["anchor_no_mlp"]["value"],
             ", ".join(f"{MIXING_LABELS[m]} {named[m]['any']}" for m in ("2emb", "uniform", "attn") if m in named)]]
    for key, label in labels.items():
        facts = key in ("mlp", "2emb_vs_uniform", "uniform_vs_attn")
        rows.append([label, pub["toggles"][key]["value"], _effect(effects[key], facts=facts) if key in effects else "-"])
    odd = {m: o for m in ("2emb", "uniform", "attn") if (o := outlier(table, m))}
    rows.append(["outlier: MLP + norms, no residual, no bias, ReLU", pub["outlier"]["value"], "; ".join(
        f"{MIXING_LABELS[m]} {o['any']} (All {o['all']}), " + ("the lowest MLP variant" if o["is_lowest"]
                                                               else f"lowest is {o['lowest_any']}")
        for m, o in odd.items())])
    best, ceiling = max(r["any"] for r in table), table[0]["config"]["n_in"] ** 2
    rows.append(["dataset ceiling", str(pub["ceiling"]["value"]),
                 f"{ceiling}: " + ("reached" if best >= ceiling else f"never reached (best {best})")])
    sources = sorted({pub["toggles"][k]["source"] for k in labels} | {pub["anchor_no_mlp"]["source"]})
    caption = f"Published (Any; {'; '.join(sources)}) vs ours (Any, {_schedule(record)})."
    return Section("comparisons", "Published anchors and comparisons",
                   tables=[Table(["finding", "published", "ours"], rows, caption=caption)])


def scaling_section(record: dict[str, Any]) -> Section:
    """Scaling records (mean over repeats), fits and the figure."""
    rows = []
    for r in sorted(record["scaling"], key=lambda r: (r["variant"] not in SCALING_LABELS, r["variant"], r["d"])):
        rows.append([SCALING_LABELS.get(r["variant"], r["variant"]), r["d"], r["any"], r["most"], r["all"],
                     r["config"]["n_in"] ** 2])
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    lines = [f"{name}: S = {f.a:.2f} d^2 / ln d (free: {f.b:.2f} d^{f.k:.2f})" for name, f in fits.items()]
    section = Section("scaling", "Results: scaling", lines=lines,
                      tables=[Table(["model", "d", "Any", "Most", "All", "ceiling"], rows)])
    any_fits = _any_fits(record)
    if any_fits:
        ds = sorted({d for f in any_fits.values() for d in f.d})
        secant = 2 - math.log(math.log(ds[-1]) / math.log(ds[0])) / math.log(ds[-1] / ds[0])
        lo, hi = record["published"]["scaling_exponents"]["value"]
        section.lines.append(
            f"Over d = {ds[0]} .. {ds[-1]} the law d^2 / ln d itself has secant exponent {secant:.2f}; "
            f"published fitted exponents {lo:.2f} - {hi:.2f} (over d = 16 .. 256)."
        )
        section.add_figure("capacity", plot_scaling({SCALING_LABELS.get(k, k): f for k, f in any_fits.items()}))
    return section


def benchmark_section(record: dict[str, Any]) -> Section:
    """Batched vs per-init training time, from the benchmark's JSON."""
    bench = record.get("benchmark")
    if not bench:
        return Section("benchmark", "Batched training speed", skipped="no benchmark record (facts_benchmark.json)")
    rows = [[r["variant"], r["sequential_ms"], r["batched_ms"], f"{r['speed_up']:.1f}x"]
            for r in bench["rows"]]
    goal = record["published"]["benchmark_goal"]["value"]
    caption = f"`{bench['source']}`; goal {goal}x ({record['published']['benchmark_goal']['source']})."
    table = Table(["variant", "sequential ms / init-epoch", "batched ms / init-epoch", "speed-up"], rows,
                  caption=caption, floatfmt=".2f")
    return Section("benchmark", "Batched training speed", tables=[table])


def deviations_section(record: dict[str, Any], other: list[dict[str, Any]]) -> Section:
    """Computed caveats: success not monotone in n; the time per cell of records of other schedules."""
    table = record["table"]
    odd = non_monotone(table)
    lines = [f"Success grows with n somewhere in {len(odd)} of {len(table)} searches, e.g. " + "; ".join(
        f"{v}: {k1}/11 inits at {n1} facts, {k2}/11 at {n2}" for v, n1, k1, n2, k2 in odd[:2]) + "."] if odd else []
    for s in {json.dumps(r["schedule"], sort_keys=True) for r in other}:
        rs = [r for r in other if json.dumps(r["schedule"], sort_keys=True) == s]
        mean_s = sum(r["seconds"] for r in rs) / len(rs)
        sched = json.loads(s)
        lines.append(f"Cells at {sched['max_epochs']} epochs per phase, patience {sched['patience']} (aborted run,"
                     f" {len(rs)} cells in the data file): {mean_s:.0f} s per cell, about"
                     f" {mean_s * len(table) / 3600:.1f} h for one repeat of the table on this machine.")
    return Section("deviations", "Deviations and caveats", lines=lines)


def page(record: dict[str, Any]) -> Report:
    """The whole page from a run record (`records.collect`)."""
    headline = Section("headline", "Headline", lines=facts_headline(record) + constructions_headline(record))
    sections = [
        headline,
        Section("commands", "Commands", lines=[f"Data: {', '.join(f'`data/{s}`' for s in record['sources'])}."]),
        Section("setup", "Setup: the 54 variants and the scaling"),
        variants_section(record),
        comparisons_section(record),
        scaling_section(record),
        benchmark_section(record),
        *constructions_sections(record),
        deviations_section(record, record.get("other_schedules", [])),
    ]
    meta = {"variant": record["variant"], "published values": "data/memorisation_published.json"}
    return Report(TITLE, "", meta, sections)
