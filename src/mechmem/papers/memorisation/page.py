"""The memorisation page (`Paper.page`): a `Report` computed from the run record, prose from docs/.

Every number here is read or computed from the record (`records.collect`): the sweep records, the
constructions' capacity results and the published values file, which names the source of each value. The
constructions' sections are in `page_constructions`.
"""

import json
import math
from typing import Any

from mechmem.papers.memorisation.figures import plot_convergence, plot_scaling
from mechmem.papers.memorisation.fits import ScalingFit
from mechmem.papers.memorisation.page_constructions import constructions_headline, constructions_sections
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
SCALING_LABELS = {
    "2emb+mlp/relu": "simple",
    "2emb+mlp+bias/relu": "simple + bias",
    "attn+mlp+norms+bias+res/gelu": "full",
}
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


def _longer_effects(record: dict[str, Any], key: str, facts: bool) -> str:
    """A toggle's effect at each longer schedule with matched pairs, e.g. "; +464 - +552 (...) (50,000 / 5,000)"."""
    parts = []
    for schedule, rs in _by_schedule(record)[1:]:
        effects = toggle_effects([r for r in rs if r["d"] == record["table"][0]["d"]])
        if key in effects:
            parts.append(f"; {_effect(effects[key], facts=facts)} ({_short(schedule)})")
    return "".join(parts)


def _norms_no_mlp(record: dict[str, Any]) -> str:
    """Norms on vs off without an MLP, per mixing, at the base schedule and at any longer one both ran with."""
    parts = []
    for schedule, rs in _by_schedule(record):
        named = {r["variant"]: r for r in rs if r["d"] == record["table"][0]["d"]}
        pcts = [
            f"{MIXING_LABELS[m]} {100 * (named[m + '+norms']['any'] - named[m]['any']) / named[m]['any']:+.0f}%"
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
    named, effects = by_name(table), toggle_effects(table)
    lines = [
        f"Schedule of the table and scaling: {_schedule(record)}; {_repeats(table)} repeat(s) of 11 inits."
    ]
    if "2emb" in named:
        a = named["2emb"]
        line = f"Anchor: 2Emb without MLP and norms stores {a['any']} facts (Any; Most {a['most']}, All {a['all']})"
        line += f" [published {pub['anchor_no_mlp']['value']}]"
        if record.get("anchor"):
            anc, s = record["anchor"], record["anchor"]["schedule"]
            line += f"; with {s['max_epochs']} epochs per phase, patience {s['patience']}: {anc['any']}"
        lines.append(line + ". " + _no_mlp_line(table))
    lines += _longer_lines(record)
    best = max(table, key=lambda r: r["any"])
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
            f"the MLP adds {_effect(effects['mlp'], facts=True)} pairs [published {pub['toggles']['mlp']['value']}]"
        )
    lines.append(
        "; ".join(parts) + f". Best: {best['variant']}, {best['any']} facts (Any) of the"
        f" {best['config']['n_in'] ** 2} ceiling."
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
    """One headline line per longer schedule of the table: each variant's Any (All) there, base Any beside it."""
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
    """The 54 variants at the base schedule (mean +- sd over repeats), and each variant's longest other schedule."""
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
            f"{len(groups)} variants, {_repeats(record['table'])} repeat(s); Any / Most / All at the base schedule:"
            f" {_schedule(record)} (epochs per lr phase / patience: {_short(record['schedule'])})."
        ),
        (
            f"s = wall seconds of a cell's search (sum over the base cells: {total_h:.1f} h). The last three columns:"
            " the longest other schedule a variant ran with (epochs per lr phase / patience), its Any / Most / All"
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
    """variant -> [(epoch cap, Any, All)] for variants with at least two schedules (repeat 0; the anchor file too)."""
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


def comparisons_section(record: dict[str, Any]) -> Section:
    """Published findings of Appendix B next to ours (Any)."""
    table, pub = record["table"], record["published"]
    effects = toggle_effects(table)
    named = by_name(table)
    labels = {
        "mlp": "MLP on vs off",
        "2emb_vs_uniform": "2Emb vs uniform attention",
        "uniform_vs_attn": "uniform vs learned attention",
        "mlp_residual": "MLP residual on vs off",
        "gelu": "GELU vs ReLU",
        "bias": "bias on vs off",
        "norms": "norms on vs off",
    }
    longest = _longest(record)

    def ours(m: str) -> str:
        more = longest.get(m)
        extra = (
            f" ({', '.join(str(r['any']) for r in more)} at {_short(more[0]['schedule'])})" if more else ""
        )
        return f"{MIXING_LABELS[m]} {named[m]['any']}{extra}"

    rows = [
        [
            "no MLP, no norms, every mixing",
            pub["anchor_no_mlp"]["value"],
            ", ".join(ours(m) for m in ("2emb", "uniform", "attn") if m in named),
        ]
    ]
    for key, label in labels.items():
        facts = key in ("mlp", "2emb_vs_uniform", "uniform_vs_attn")
        ours_base = (
            f"{_effect(effects[key], facts=facts)} ({_short(record['schedule'])})" if key in effects else "-"
        )
        rows.append([label, pub["toggles"][key]["value"], ours_base + _longer_effects(record, key, facts)])
    odd = {m: o for m in ("2emb", "uniform", "attn") if (o := outlier(table, m))}
    rows.append(
        [
            "outlier: MLP + norms, no residual, no bias, ReLU",
            pub["outlier"]["value"],
            "; ".join(
                f"{MIXING_LABELS[m]} {o['any']} (All {o['all']}), "
                + ("the lowest MLP variant" if o["is_lowest"] else f"lowest is {o['lowest_any']}")
                for m, o in odd.items()
            ),
        ]
    )
    if "norms_no_mlp" in pub:
        rows.append(["norms on vs off, no MLP", pub["norms_no_mlp"]["value"], _norms_no_mlp(record)])
    best, ceiling = max(r["any"] for r in table), table[0]["config"]["n_in"] ** 2
    rows.append(
        [
            "dataset ceiling",
            str(pub["ceiling"]["value"]),
            f"{ceiling}: " + ("reached" if best >= ceiling else f"never reached (best {best})"),
        ]
    )
    sources = sorted(
        {pub["toggles"][k]["source"] for k in labels}
        | {pub["anchor_no_mlp"]["source"]}
        | ({pub["norms_no_mlp"]["source"]} if "norms_no_mlp" in pub else set())
    )
    caption = (
        f"Published (Any; {'; '.join(sources)}) vs ours (Any, base schedule: {_schedule(record)}). Each of"
        " our values names its schedule (epochs per lr phase / patience); a toggle's effect is given at every"
        " schedule with matched pairs, and the first row gives each variant's longest schedule in brackets."
    )
    return Section(
        "comparisons",
        "Published anchors and comparisons",
        tables=[Table(["finding", "published", "ours"], rows, caption=caption)],
    )


def scaling_section(record: dict[str, Any]) -> Section:
    """Scaling records (mean over repeats), fits and the figure."""
    rows = []
    every = record["scaling"] + record.get("scaling_other", [])
    for r in sorted(
        every,
        key=lambda r: (r["variant"] not in SCALING_LABELS, r["variant"], r["d"], r["schedule"]["max_epochs"]),
    ):
        rows.append(
            [
                SCALING_LABELS.get(r["variant"], r["variant"]),
                r["d"],
                _short(r["schedule"]),
                r["any"],
                r["most"],
                r["all"],
                r["config"]["n_in"] ** 2,
                f"{r['seconds']:.0f}",
            ]
        )
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    lines = [f"{name}: S = {f.a:.2f} d^2 / ln d (free: {f.b:.2f} d^{f.k:.2f})" for name, f in fits.items()]
    section = Section(
        "scaling",
        "Results: scaling",
        lines=lines,
        tables=[Table(["model", "d", "epochs / patience", "Any", "Most", "All", "ceiling", "s"], rows)],
    )
    section.lines.insert(0, f"Fits use the base schedule ({_short(record['schedule'])}) only.")
    any_fits = _any_fits(record)
    if any_fits:
        ds = sorted({d for f in any_fits.values() for d in f.d})
        secant = 2 - math.log(math.log(ds[-1]) / math.log(ds[0])) / math.log(ds[-1] / ds[0])
        lo, hi = record["published"]["scaling_exponents"]["value"]
        section.lines.append(
            f"Over d = {ds[0]} .. {ds[-1]} the law d^2 / ln d itself has secant exponent {secant:.2f}; "
            f"published fitted exponents {lo:.2f} - {hi:.2f} (over d = 16 .. 256)."
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
            f"d = {bench['d']}, {bench['n_facts']} facts, {bench['inits']} inits, {bench['epochs']} epochs per run,"
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


def page(record: dict[str, Any]) -> Report:
    """The whole page from a run record (`records.collect`)."""
    headline = Section("headline", "Headline", lines=facts_headline(record) + constructions_headline(record))
    sections = [
        headline,
        Section(
            "commands", "Commands", lines=[f"Data: {', '.join(f'`data/{s}`' for s in record['sources'])}."]
        ),
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
