"""The memorisation page (`Paper.page`): a `Report` computed from the run record, prose from docs/.

Every number here is read or computed from the record (`records.collect`): the sweep records, the
constructions' capacity results and the published values (the package's `published.json`, copied into the
record), which give each value's source and the exact sentence, table row or code line it is read from. The
pair comparisons follow Appendix B (the outlier combination left out); the project's earlier inclusion is
shown beside them. The constructions' sections are in `page_constructions`; the E7 comparison's data and
fits in `e7`.
"""

import math
from typing import Any

from mechmem.report.document import Report, Section, Table
from mechmem_papers.memorisation.e7 import E7Fit, authors_fits, e7_any, e7_fits, e7_schedule, rows_at_e7
from mechmem_papers.memorisation.figures import (
    ScheduleSeries,
    plot_convergence,
    plot_e7_scaling,
    plot_scaling,
)
from mechmem_papers.memorisation.fits import ScalingFit
from mechmem_papers.memorisation.page_constructions import constructions_headline, constructions_sections
from mechmem_papers.memorisation.page_published import (
    MIXING_LABELS,
    b1_failures,
    b1_summary,
    bits_section,
    comparisons_section,
    is_published_schedule,
    published_schedule_text,
    table_b1_section,
)
from mechmem_papers.memorisation.records import PUBLISHED_NAME
from mechmem_papers.memorisation.summary import (
    all_cells,
    by_name,
    by_schedule,
    config_cells,
    effect_text,
    longest_schedules,
    mean_sd,
    non_monotone,
    published_row,
    short_schedule,
    sort_key,
    toggle_effects,
)

TITLE = (
    "Fact memorisation in one-layer models (Linsefors & Bushnaq):"
    " capacity, scaling and hand-coded constructions"
)
SCALING_LABELS = {
    "2emb+mlp/relu": "simple",
    "2emb+mlp+bias/relu": "simple + bias",
    "attn+mlp+norms+bias+res/gelu": "full",
}
SWEEP = "python -m mechmem_papers.memorisation.scripts.sweep_facts"
"""How the page's commands call the sweep script."""
MAX_FACTS = "python -m mechmem_papers.memorisation.scripts.max_facts"
SCALING_SWEEP = {
    "2emb+mlp/relu": "nb",
    "2emb+mlp+bias/relu": "reduced",
    "attn+mlp+norms+bias+res/gelu": "full",
}
"""Scaling model -> its `mechmem_papers.memorisation.scripts.sweep_facts scaling --variant` name."""


def _schedule(record: dict[str, Any]) -> str:
    s = record["schedule"]
    return f"{s['max_epochs']} epochs per lr phase, patience {s['patience']}, acc >= {s['target_acc']:g}"


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


def _anchor_line(record: dict[str, Any]) -> str:
    """Headline: the 2Emb anchor (no MLP, no norms) beside Table B.1's repeats of the three mixings."""
    named = by_name(record["table"])
    a = named["2emb"]
    line = (
        f"Anchor: 2Emb without MLP and norms stores {a['any']} facts (Any; Most {a['most']}, All {a['all']})"
    )
    rows = [
        (MIXING_LABELS[m], published_row(record["published"]["table_b1"]["rows"], named[m]["config"]))
        for m in ("2emb", "uniform", "attn")
        if m in named
    ]
    line += " [published, Table B.1 Any of the four repeats: " + ", ".join(
        f"{label} {' / '.join(map(str, row['any']))}" for label, row in rows if row
    )
    line += "]"
    if record.get("anchor"):
        anc, s = record["anchor"], record["anchor"]["schedule"]
        line += f"; with {s['max_epochs']} epochs per phase, patience {s['patience']}: {anc['any']}"
    return line + ". " + _no_mlp_line(record["table"])


def _ordering_parts(records: list[dict[str, Any]]) -> list[str]:
    """Mixing order and MLP gain over matched pairs (Appendix B pairs, the outlier left out)."""
    effects = toggle_effects(records, exclude_outlier=True)
    parts = [
        f"{label} in {effects[k].better}/{effects[k].pairs} matched pairs"
        for k, label in (
            ("2emb_vs_uniform", "2Emb > uniform attention"),
            ("uniform_vs_attn", "uniform > learned attention"),
        )
        if k in effects
    ]
    if "mlp" in effects:
        parts.append(f"the MLP adds {effect_text(effects['mlp'], facts=True)}")
    return parts


def _published_ordering_line(record: dict[str, Any]) -> str:
    """Headline: mixing order, MLP gain and best cell at the published schedule, beside Appendix B."""
    pub = record["published"]
    cells = [r for r in all_cells(record) if is_published_schedule(record, r["schedule"])]
    cells = [r for r in cells if r.get("repeat", 0) == 0]
    if not cells:
        return f"No cell has run at the published schedule ({published_schedule_text(record)}) yet."
    parts = _ordering_parts(cells) or ["no matched pair yet"]
    best = max(r["any"] for r in cells)
    ceiling = pub["ceiling"]["value"]
    reached = ", ".join(r["variant"] for r in sorted(cells, key=sort_key) if r["any"] == best)
    return (
        f"At the published schedule ({published_schedule_text(record)}; Appendix B's pairs, the outlier"
        " combination left out): "
        + "; ".join(parts)
        + f" [published: the MLP adds {pub['toggles']['mlp']['value']}]. Best: {best} facts (Any) of the"
        f" {ceiling} ceiling" + (" (reached)" if best >= ceiling else "") + f", by {reached}."
    )


def _capped_ordering_line(record: dict[str, Any]) -> str:
    """Sensitivity: the same comparisons at the capped base schedule (no published value beside them)."""
    table = record["table"]
    parts = _ordering_parts(table)
    base_best = max(table, key=lambda r: r["any"])
    full = by_name(table).get("attn+mlp+norms+bias+res/gelu")
    return (
        f"Sensitivity, capped base schedule ({short_schedule(record['schedule'])}; not comparable with"
        " Appendix B): "
        + "; ".join(parts)
        + f"; best {base_best['variant']}, {base_best['any']}."
        + (
            f" Learned attention across inits (full model): Any {full['any']} vs All {full['all']}."
            if full
            else ""
        )
    )


def facts_headline(record: dict[str, Any]) -> list[str]:
    """The facts half of the headline: Table B.1 at the published schedule first, then the capped runs."""
    table = record["table"]
    longer = _longer_lines(record)
    at_published = [line for line, published in longer if published]
    lines = [b1_summary(record), *[x for x in [b1_failures(record)] if x], *at_published]
    lines.append(_published_ordering_line(record))
    lines += [line for line in [_e7_scaling_line(record)] if line]
    if not is_published_schedule(record, record["schedule"]):
        lines.append(
            "Sensitivity check below (capped schedules; lower bounds, not compared with the paper): the full"
            f" table and the scaling ran at {_schedule(record)}; {_repeats(table)} repeat(s) of 11 inits."
        )
    if "2emb" in by_name(table):
        lines.append("Sensitivity: " + _anchor_line(record))
    lines += ["Sensitivity: " + line for line, published in longer if not published]
    lines.append(_capped_ordering_line(record))
    for name, fit in _any_fits(record).items():
        caps = " -> ".join(f"{c:.0f}" for c in fit.capacity)
        ds = " -> ".join(str(d) for d in fit.d)
        lines.append(
            f"Sensitivity: scaling at {short_schedule(record['schedule'])}, {SCALING_LABELS.get(name, name)}"
            f" model ({name}), d = {ds} (Any): {caps}, S = {fit.a:.2f} d^2 / ln d (free: {fit.b:.2f}"
            f" d^{fit.k:.2f})."
        )
    return lines


def _e7_scaling_line(record: dict[str, Any]) -> str:
    """The scaled models at the authors' E7 schedule of each d, Any beside E7's Any (searches still running
    say so), and the free exponent where two sizes have finished; empty when none ran at it."""
    e7, parts = e7_any(record), []
    fits = {f.model: f for f in e7_fits(record)}
    for variant, at in rows_at_e7(record).items():
        by_d = e7.get(variant, {})
        cells = []
        for d, r in sorted(at.items()):
            pub = by_d.get(d)
            if r["any"] is None:
                cells.append(f"d = {d}: search running ({r['trainings']} trainings so far)")
                continue
            vs = f" [E7 {pub}, {100 * (r['any'] / pub - 1):+.0f}%]" if pub else ""
            rest = [c for c in ("most", "all") if r[c] is None]
            cells.append(
                f"d = {d}: {r['any']}{vs}"
                + (f" ({', '.join(c.capitalize() for c in rest)} still running)" if rest else "")
            )
        if fit := fits.get(variant):
            theirs = f"E7 {fit.authors.k:.2f}; " if fit.authors else ""
            cells.append(
                f"free exponent over d = {fit.ours.d[0]} .. {fit.ours.d[-1]}: {fit.ours.k:.2f}"
                f" [{theirs}d^2 / ln d itself {fit.law_exponent:.2f}]"
            )
        if cells:
            parts.append(f"{SCALING_LABELS.get(variant, variant)} model " + "; ".join(cells))
    if not parts:
        return ""
    return "Scaling at the authors' E7 schedule of each d, Any: " + "; ".join(parts) + "."


def _longer_lines(record: dict[str, Any]) -> list[tuple[str, bool]]:
    """One headline line per longer schedule of the table (each variant's Any, All there, base Any beside),
    with whether that schedule is the published one."""
    base = by_name(record["table"])
    out = []
    groups = by_schedule(record.get("other_schedules", [])).values()
    for rows in sorted(groups, key=lambda rs: -rs[0]["schedule"]["max_epochs"]):
        repeats: dict[str, list[dict[str, Any]]] = {}  # a variant's repeats, joined by " / "
        for r in sorted(rows, key=lambda r: (sort_key(r), r.get("repeat", 0))):
            if r["d"] == record["table"][0]["d"] and r["variant"] in base:
                repeats.setdefault(r["variant"], []).append(r)
        parts = [
            f"{name} {' / '.join(str(r['any']) for r in rs)} (All {' / '.join(str(r['all']) for r in rs)};"
            f" base {base[name]['any']})"
            for name, rs in repeats.items()
        ]
        if parts:
            sched = rows[0]["schedule"]
            published = is_published_schedule(record, sched)
            out.append(
                (
                    f"At {short_schedule(sched)}"
                    + (" (the published schedule)" if published else "")
                    + " (epochs per lr phase / patience), Any: "
                    + ", ".join(parts)
                    + ".",
                    published,
                )
            )
    return out


def _any_fits(record: dict[str, Any]) -> dict[str, ScalingFit]:
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    return {k.removesuffix(" any"): f for k, f in fits.items() if k.endswith(" any")}


def _variants_title(record: dict[str, Any]) -> str:
    capped = not is_published_schedule(record, record["schedule"])
    return "Results: the 54 variants" + (" (sensitivity check: capped base schedule)" if capped else "")


def variants_section(record: dict[str, Any]) -> Section:
    """The 54 variants at the base schedule (mean +- sd over repeats) and at each one's longest other one."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(record["table"], key=sort_key):
        groups.setdefault(r["variant"], []).append(r)
    longest = longest_schedules(record)
    rows = []
    for name, rs in groups.items():
        long = longest.get(name, [])
        rows.append(
            [
                *config_cells(rs[0]["config"]),
                *(mean_sd([r[k] for r in rs]) for k in ("any", "most", "all")),
                f"{sum(r['seconds'] for r in rs) / len(rs):.0f}",
                short_schedule(long[0]["schedule"]) if long else "",
                " / ".join(mean_sd([r[k] for r in long]) for k in ("any", "most", "all")) if long else "",
                f"{sum(r['seconds'] for r in long) / len(long):.0f}" if long else "",
            ]
        )
    total_h = sum(r["seconds"] for r in record["table"]) / 3600
    lines = [
        (
            f"{len(groups)} variants, {_repeats(record['table'])} repeat(s); Any / Most / All at the base"
            " schedule:"
            f" {_schedule(record)} (epochs per lr phase / patience: {short_schedule(record['schedule'])})."
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
    section = Section("variants", _variants_title(record), lines=lines, tables=[Table(headers, rows)])
    series = convergence_series(record)
    if series:
        pub = record["published"].get("anchor_no_mlp_mean")
        section.add_figure(
            "convergence", plot_convergence(series, published=float(pub["value"]) if pub else None)
        )
    return section


def convergence_series(record: dict[str, Any]) -> list[ScheduleSeries]:
    """The variants with 2+ schedules, with their capacities per epoch cap (repeat 0; the anchor file too)."""
    d = record["table"][0]["d"]
    base = [r for r in record["table"] if r.get("repeat", 0) == 0]
    other = [r for r in record.get("other_schedules", []) if r["d"] == d and r.get("repeat", 0) == 0]
    anchor = [record["anchor"]] if record.get("anchor") else []
    cells: dict[str, dict[int, dict[str, Any]]] = {}
    for r in base + other + anchor:
        if r["schedule"]["target_acc"] == record["schedule"]["target_acc"]:
            cells.setdefault(r["variant"], {})[r["schedule"]["max_epochs"]] = r
    series = []
    for variant, by_cap in cells.items():
        if len(by_cap) < 2:
            continue
        rows = [by_cap[cap] for cap in sorted(by_cap)]
        config = rows[0]["config"]
        series.append(
            ScheduleSeries(
                variant=variant,
                mixing=config["mixing"],
                mlp=config["mlp"],
                norms=config["norms"],
                epochs=tuple(sorted(by_cap)),
                any=tuple(r["any"] for r in rows),
                all=tuple(r["all"] for r in rows),
            )
        )
    return series


def _scaling_rows(record: dict[str, Any]) -> list[list[Any]]:
    """One row per scaling record (every schedule) and per search still running, with the authors' E7 Any at
    its d beside it."""
    e7, rows = e7_any(record), []
    every = record["scaling"] + record.get("scaling_other", []) + record.get("scaling_running", [])
    for r in sorted(
        every,
        key=lambda r: (r["variant"] not in SCALING_LABELS, r["variant"], r["d"], r["schedule"]["max_epochs"]),
    ):
        pub = e7.get(r["variant"], {}).get(r["d"])
        at_e7 = e7_schedule(record, r["d"]) == (r["schedule"]["max_epochs"], r["schedule"]["patience"])
        vs = "-"
        if pub and r["any"] is not None:
            vs = f"{100 * (r['any'] / pub - 1):+.0f}%" if at_e7 else "capped: lower bound"
        seconds = f"{r['seconds']:.0f}"
        if "trainings" in r:  # a search still running: its trainings so far
            seconds += f" ({r['trainings']} trainings so far)"
        rows.append(
            [
                SCALING_LABELS.get(r["variant"], r["variant"]),
                r["d"],
                short_schedule(r["schedule"]) + (" (E7)" if at_e7 else ""),
                *("running" if r[c] is None else r[c] for c in ("any", "most", "all")),
                r["config"]["n_in"] ** 2,
                pub if pub else "-",
                vs,
                seconds,
            ]
        )
    return rows


def _published_scaling_lines(record: dict[str, Any]) -> list[str]:
    """The authors' E7 Any fitted by our code, and the published law (no fitted exponent for these models)."""
    lines = []
    for name, f in authors_fits(record).items():
        label = SCALING_LABELS.get(name, name)
        lines.append(
            f"The authors' E7 Any, {label} model, d = {f.d[0]} .. {f.d[-1]}, fitted by"
            f" the same code: S = {f.a:.2f} d^2 / ln d (free: {f.b:.2f} d^{f.k:.2f})."
        )
    law, ce = record["published"]["scaling_law"], record["published"]["construction_exponents"]["value"]
    lines.append(
        f"Published law: {law['value']} ({law['source']}). The post's fitted exponents {ce['hand_coded']} and"
        f" {ce['trained']} belong to the constructions comparison (hand-coded vs trained challenge model at"
        " acc >= 0.9, see there), not to these models."
    )
    return lines


def scaling_section(record: dict[str, Any]) -> Section:
    """Scaling records (mean over repeats) beside the authors' E7 values, fits and the figure."""
    fits = {k: ScalingFit.from_dict(v) for k, v in record["scaling_fits"].items()}
    first = f"The first fits use the base schedule ({short_schedule(record['schedule'])})."
    if not is_published_schedule(record, record["schedule"]):
        first += (
            " That schedule is capped: they are a sensitivity check (lower bounds), not comparable with the"
            " authors' E7 values."
        )
    lines = [first + " The fits at the authors' E7 schedule come last, beside E7's values over the same d."]
    lines += [f"{name}: S = {f.a:.2f} d^2 / ln d (free: {f.b:.2f} d^{f.k:.2f})" for name, f in fits.items()]
    lines += _published_scaling_lines(record)
    lines += [_e7_fit_line(f) for f in e7_fits(record)]
    headers = ["model", "d", "epochs / patience", "Any", "Most", "All", "ceiling", "E7 Any", "vs E7", "s"]
    caption = (
        f"E7 Any: {record['published']['e7_any']['source']} (one run per d; source lines in"
        f" {PUBLISHED_NAME}). (E7) marks a row run at the authors' E7 schedule for its d; only those rows are"
        " compared with E7, the capped rows are a sensitivity check (lower bounds)."
    )
    if record.get("scaling_running"):
        caption += (
            " running: that criterion's search has not ended; the row's other criteria are those whose"
            " searches have, read from the trainings finished so far (facts_trials.jsonl), and its s is their"
            " time so far."
        )
    section = Section("scaling", "Results: scaling", lines=lines)
    section.tables.append(Table(headers, _scaling_rows(record), caption=caption))
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
    ours = {SCALING_LABELS.get(f.model, f.model): f.ours for f in e7_fits(record)}
    if ours:
        authors = {SCALING_LABELS.get(name, name): f for name, f in authors_fits(record).items()}
        section.add_figure("e7", plot_e7_scaling(ours, authors))
    return section


def _e7_fit_line(fit: E7Fit) -> str:
    """One model's fit at the E7 schedule beside the authors' E7 values fitted over the same d."""
    ours, lo, hi = fit.ours, fit.ours.d[0], fit.ours.d[-1]
    name = SCALING_LABELS.get(fit.model, fit.model)
    line = (
        f"At the authors' E7 schedule, {name} model, Any over d = {lo} .. {hi}:"
        f" {' -> '.join(f'{c:g}' for c in ours.capacity)}, S = {ours.a:.2f} d^2 / ln d (free: {ours.b:.2f}"
        f" d^{ours.k:.2f})"
    )
    if fit.authors:
        a = fit.authors
        line += (
            f" [the authors' E7 over the same d: {' -> '.join(f'{c:g}' for c in a.capacity)}, S = {a.a:.2f}"
            f" d^2 / ln d (free: {a.b:.2f} d^{a.k:.2f})]"
        )
    return line + "."


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
    for rs in sorted(by_schedule(other).values(), key=lambda rs: rs[0]["schedule"]["max_epochs"]):
        mean_s = sum(r["seconds"] for r in rs) / len(rs)
        sched = rs[0]["schedule"]
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


RUNNING_NOTE = (
    ", search still running (the same command resumes it from `data/facts_trials.jsonl`; a second worker"
    " beside it: the same command with `--criteria all most --speculate`)"
)


def commands_section(record: dict[str, Any]) -> Section:
    """The sweep commands that produce the records in the data files, one per schedule (and model)."""
    lines = [
        f"Data: {', '.join(f'`data/{s}`' for s in record['sources'])}; published values: `{PUBLISHED_NAME}`."
    ]
    table = all_cells(record)
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
    running: dict[tuple[str, int, int], list[int]] = {}
    for r in record.get("scaling_running", []):
        running.setdefault((r["variant"], r["schedule"]["max_epochs"], r["schedule"]["patience"]), []).append(
            r["d"]
        )
    for group, note in ((by_model, ""), (running, RUNNING_NOTE)):
        for (variant, epochs, patience), ds in sorted(group.items()):
            lines.append(
                f"Scaling, {SCALING_LABELS.get(variant, variant)} model at {epochs:,} / {patience:,}{note}:"
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
        table_b1_section(record),
        commands_section(record),
        Section("setup", "Setup: the 54 variants and the scaling"),
        variants_section(record),
        comparisons_section(record),
        bits_section(record),
        scaling_section(record),
        benchmark_section(record),
        *constructions_sections(record),
        deviations_section(record, record.get("other_schedules", [])),
    ]
    meta = {"variant": record["variant"], "published values": PUBLISHED_NAME}
    return Report(TITLE, "", meta, sections)
