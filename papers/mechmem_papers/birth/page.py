"""The birth reproduction page: a `Report` built from the run record alone (the plugin's `page`).

Every number on the page is read from the record (`mechmem_papers.birth.run.run`), which copies the
published values and the authors'-code reference from their committed data files; the hand-written text (what
is reproduced, the deviations) lives in docs/reproductions/prose/birth.md, one block per section key used
here.
"""

import json
import re
from pathlib import Path
from statistics import stdev
from typing import Any

from mechmem.report.document import Report, Section, Table
from mechmem_papers import formation
from mechmem_papers.birth import figures
from mechmem_papers.birth.experiments import expand_history
from mechmem_papers.birth.scale import cell_key, summarise
from mechmem_papers.birth.statements import (
    LADDER_KEYS,
    NOT_SETTLED,
    WITHIN_SPREAD,
    judge_as_written,
    load_published,
)

TITLE = "Reproduction: Birth of a Transformer: A Memory Viewpoint (Bietti et al., 2023)"
RUN_METRICS = ("icl_acc", "eval_icl_acc", "wo2_recall", "wk2_recall", "wk1_recall", "wk1_recall_64", "wf_kl")
PRESET_ROWS = [
    ("in-context accuracy (train batch)", "icl_acc"),
    ("held-out in-context accuracy", "eval_icl_acc"),
    ("W_O^2 recall", "wo2_recall"),
    ("W_K^2 recall", "wk2_recall"),
    ("W_K^1 recall, all positions", "wk1_recall"),
    ("W_K^1 recall, first 64", "wk1_recall_64"),
]


def fmt(value: Any) -> str:
    """A record value as the page shows it: floats to 3 decimals, missing values as "-"."""
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _holds(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "no"


def section3_claims(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The Section 3 claims as written, judged on the record's ladder (`statements.judge_as_written`)."""
    ladder = record.get("ladder")
    section3 = load_published()["section3_as_written"]
    if not ladder:
        return [{**c, "cells": [], "verdict": None} for c in section3["claims"]]
    records = ladder["records"]
    return judge_as_written(
        section3, ladder["rules"]["ladder"]["rungs"], lambda rung, model: records.get(cell_key(rung, model))
    )


def _first_rules_text(record: dict[str, Any], keys: list[str]) -> tuple[str, str, str]:
    """(rules, outcomes, holds) of the statements a Section 3 claim replaces: the ladder's band rules and
    the first rules before them, as written then."""
    by_key = {s["key"]: s for s in record["statements"]}
    rules, outcomes, holds = [], [], []
    for key in keys:
        s = by_key.get(key)
        if s is None:
            continue
        entries = [(f"{s['published']}: {s['rule']}", s["outcome"], s["holds"])]
        if s.get("first_rule"):
            f = s["first_rule"]
            entries.append((f"first rule (commit {f['commit']}): {f['rule']}", f["outcome"], f["holds"]))
        for rule, outcome, flag in entries:
            rules.append(f"`{key}` {rule}")
            outcomes.append("not rerun in this record" if outcome is None else outcome)
            holds.append(_holds(flag))
    return "<br>".join(rules), "<br>".join(outcomes), "<br>".join(holds)


def _cell_text(c: dict[str, Any]) -> str:
    triggers = "fixed" if c["model"]["fixed_triggers"] else "random"
    return (
        f"{triggers} triggers: {c['value']:.3f} ({c['verdict']}; the curve's plateau"
        f" {c['curve_plateau']:.3f}, {c['curve_verdict']}; its last quarter minus the one before"
        f" {fmt(c['late_rise'])}) at {c['rung']} ({_sizes(c['sizes'])})"
    )


SPREAD_FILE = "birth_eval_spread.json"
"""The metric's spread check (`mechmem_papers.birth.scripts.eval_spread`), in the data folder."""


def attach_spread(record: dict[str, Any], data: Path) -> dict[str, Any]:
    """`record` with "eval_spread" (the file name and its readings) when the spread check's file is in `data`;
    the plugin's `references`, read when the page is built, never written into the record."""
    path = Path(data) / SPREAD_FILE
    if not path.exists():
        return record
    return {**record, "eval_spread": {"file": path.name, "readings": json.loads(path.read_text())}}


def attach_references(record: dict[str, Any], data: Path) -> dict[str, Any]:
    """The plugin's `references`: `attach_spread`, then the formation data (`formation.attach_formation`)."""
    return formation.attach_formation(attach_spread(record, data))


def spread_text(record: dict[str, Any]) -> str:
    """The spread check's readings of one model, computed from its file: the final batch, a larger fresh
    sample, and the range and sample sd of the other small batches."""
    attached = record.get("eval_spread")
    if not attached:
        return f"the spread check's file {SPREAD_FILE} is not beside this record"
    r = attached["readings"]
    final = next(k for k in r if k.startswith("final_batch_"))
    fresh = next(k for k in r if k.startswith("fresh_"))
    others = next(k for k in r if k.startswith("other_batches_"))
    size = {
        k: re.search(r"\d+", k).group() for k in (final, fresh, others)
    }  # sequences: the key's first number
    batches = list(r[others].values())
    return (
        f"its readings ({attached['file']}, {r['run']}): the final {size[final]}-sequence batch read"
        f" {r[final]:.3f} and a"
        f" {size[fresh]}-sequence fresh sample {r[fresh]:.3f} of the same model, and {len(batches)} other"
        f" {size[others]}-sequence batches spread over {min(batches):.2f} .. {max(batches):.2f} (sample sd"
        f" {stdev(batches):.3f})"
    )


def _section3_table(record: dict[str, Any]) -> Table:
    """The Section 3 claims as written: the paper's words, our plateau, the judgement, the rules before."""
    section3 = load_published()["section3_as_written"]
    rows = []
    for c in section3_claims(record):
        ours = "<br>".join(_cell_text(x) for x in c["cells"]) or "not rerun in this record"
        rows.append(
            [
                f'"{c["words"]}"',
                c["published"],
                ours,
                (
                    f"{c['verdict'] or '-'} (without the settled check: {c['verdict_plateau_only'] or '-'};"
                    f" on the curve's plateau: {c.get('verdict_curve') or '-'})"
                ),
                *_first_rules_text(record, c["first_rules"]),
            ]
        )
    caption = (
        f'Section 3 ({section3["source"]}): "{section3["quote"]}" Each claim is counted once and judged as'
        f" written on the {section3['plateau'].format(k=section3['plateau_k'])};"
        f" margin +-{section3['margin']}"
        f" ({section3['margin_source']}; {spread_text(record)}): a value closer than that to the claim's"
        " boundary is"
        f' "{WITHIN_SPREAD}", not a pass or a failure. {section3["settled"]} The judgement column gives in'
        f" brackets the verdict without that check ({section3['settled_since']}) and the verdict on the"
        f" curve's plateau ({section3['reading_since']}). The last three columns give the rules written first"
        " (the scale ladder's band, and the first rule on the quick suite's depth runs) with their outcomes."
    )
    headers = ["paper's words", "published", "ours per cell", "judgement", "rules written first"]
    return Table(headers + ["their outcome", "holds (then)"], rows, caption=caption)


def claim_counts(record: dict[str, Any]) -> dict[str, int]:
    """Each published claim once: the Section 3 claims as written plus every other statement."""
    verdicts = [c["verdict"] for c in section3_claims(record)]
    others = [s["holds"] for s in record["statements"] if s["key"] not in LADDER_KEYS]
    verdicts += [None if h is None else "holds" if h else "fails" for h in others]
    return {
        "claims": len(verdicts),
        "holds": verdicts.count("holds"),
        "within spread": verdicts.count(WITHIN_SPREAD),
        "not settled": verdicts.count(NOT_SETTLED),
        "fails": verdicts.count("fails"),
        "not run": verdicts.count(None),
    }


def counts_line(record: dict[str, Any]) -> str:
    n = claim_counts(record)
    return (
        f"Of the paper's {n['claims']} claims judged here (each counted once), {n['holds']} hold,"
        f" {n['within spread']} are within the measurement spread, {n['not settled']} have not settled,"
        f" {n['fails']} fail and {n['not run']} are not rerun in this record."
    )


def sizes_line(record: dict[str, Any]) -> str:
    """The largest sizes any run of the record used, against the paper's."""
    sc, section3 = record["scale"], load_published()["section3_as_written"]
    cells = {key: r["config"] for key, r in (record.get("ladder") or {}).get("records", {}).items()}
    configs = [sc, *cells.values()]
    d = sorted({c["d_model"] for c in configs})
    t = max([c["seq_len"] for c in configs] + [sc.get("depth_seq_len", 0)])
    b = max(c["batch_size"] for c in configs)
    paper = section3["paper_config"]
    done = [c for c in configs if all(c.get(key, 0) >= value for key, value in paper.items())]
    at_paper = [key for key, c in cells.items() if any(c is run for run in done)]
    sizes = f"d = {paper['d_model']}, T = {paper['seq_len']}, batch {paper['batch_size']}"
    which = f" (scale-ladder cells {', '.join(at_paper)}); the other runs are smaller" if at_paper else ""
    status = (
        f"{len(done)} run(s) of this record are at the paper's sizes{which}."
        if done
        else f"The runs at the paper's sizes ({sizes}) are not yet done: no run in this record reaches them,"
        " so every verdict on this page is at smaller sizes."
    )
    return (
        f"All runs at d = {', '.join(map(str, d))}, T <= {t}, batch <= {b}; the paper: {sizes}"
        f" ({section3['paper_sizes_source']}). {status}"
    )


def statements_section(record: dict[str, Any]) -> Section:
    """The paper's claims: Section 3 as written first, then every other statement, its rule and outcome."""
    rows, quotes = [], {s["key"]: s["quote"] for s in load_published()["statements"]}
    for s in record["statements"]:
        if s["key"] in LADDER_KEYS:
            continue
        ours = s["outcome"] if s["outcome"] is not None else "not rerun in this record"
        rows.append(
            [f'"{quotes.get(s["key"], "-")}"', s["claim"], s["published"], s["where"], s["rule"], ours]
            + [_holds(s["holds"])]
        )
        first = s.get("first_rule")
        if first:
            shown = first["outcome"] if first["outcome"] is not None else "not rerun in this record"
            label = f"(same statement, first rule, commit {first['commit']})"
            rows.append(["", label, "", "", first["rule"], shown, _holds(first["holds"])])
    lines = [counts_line(record), sizes_line(record)]
    late = [s["key"] for s in record["statements"] if "committed with the first results" in s["since"]]
    if late:
        lines.append(
            f"Not fixed before their runs: {', '.join(f'`{k}`' for k in late)} were committed together with"
            " their"
            " first results (their `since` says so), so their outcome is not a prediction made in advance."
        )
    headers = ["paper's words", "statement", "published", "where", "rule", "ours", "holds"]
    section = Section("statements", "The paper's statements side by side", lines=lines)
    section.tables += [_section3_table(record), Table(headers, rows)]
    section.findings = claim_counts(record)
    return section


def _sizes(z: dict[str, Any]) -> str:
    return f"d={z['d_model']}, T={z['seq_len']}, batch {z['batch_size']}, {z['steps']} steps"


def ladder_section(record: dict[str, Any]) -> Section:
    """The scale ladder: each Section 3 accuracy's climb, rung by rung, judged by its committed rule."""
    section = Section("ladder", "Section 3 accuracies on the scale ladder (the rule written first)")
    ladder = record.get("ladder")
    if not ladder:
        section.skipped = "the ladder is not in this record"
        return section
    rules, records = ladder["rules"], ladder["records"]
    summary = summarise(rules, records)
    section.lines = [
        (
            f"Metric: {rules['metric']['name']}, {rules['metric']['definition']} (final_sequences = "
            f"{rules['metric']['final_sequences']})."
        ),
        f"Model: {rules['model']}. Data: {rules['data']}. Training: {rules['training']}.",
        f"Procedure: {rules['ladder']['procedure']}",
    ]
    rows = []
    for s in summary.values():
        o = s["outcome"]
        if o is None:
            rows.append([s["claim"], s["published"], s["text"], "not run", "-", "-", "-", "-"])
            continue
        result = "met" if s["status"] == "met" else f"gap {o['gap']:.3f} ({s['status']})"
        seeds = ", ".join(f"seed {k}: {v:.3f}" for k, v in o["seeds"].items()) or "not run"
        rows.append([s["claim"], s["published"], s["text"], f"{o['value']:.3f}", result,
                     f"{o['rung']}: {_sizes(o['sizes'])}", f"{o['wall_s'] / 60:.1f} min", seeds])  # fmt: skip
    headers = ["statement", "published", "rule", "ours (seed 0)", "met / gap", "configuration", "wall-clock",
               "seed check (not judged)"]  # fmt: skip
    section.tables.append(Table(headers, rows))
    climb = [[key, c["rung"], _sizes(c["sizes"]), f"{c['value']:.4f}", str(c["n_icl_positions"]),
              fmt(c["curve_end"]), fmt(c["late_rise"]), c["verdict"], f"{c['wall_s'] / 60:.1f} min"]
             for key, s in summary.items() for c in s["climb"]]  # fmt: skip
    climb += [[key, c["rung"], _sizes(c["sizes"]), f"{c['value']:.4f}", str(c["n_icl_positions"]),
               fmt(c["curve_end"]), fmt(c["late_rise"]), f"{c['verdict']} (run after the climb stopped)",
               f"{c['wall_s'] / 60:.1f} min"]
              for key, s in summary.items() for c in s.get("beyond", [])]  # fmt: skip
    headers = ["statement", "rung", "sizes", "accuracy", "in-context positions", "curve's last point",
               "curve: last quarter minus the one before", "verdict", "wall-clock"]  # fmt: skip
    section.tables.append(Table(headers, climb))
    reached = {c["rung"] for s in summary.values() for c in s["climb"] + s.get("beyond", [])}
    section.tables.append(
        Table(["rung", "sizes", "why", "run"],
              [[r["name"], _sizes(r), r["why"], "yes" if r["name"] in reached else "no"]
               for r in rules["ladder"]["rungs"]])
    )  # fmt: skip
    total = sum(r["wall_s"] for r in records.values())
    section.findings = {key: s["status"] for key, s in summary.items()}
    section.lines.append(f"Wall-clock of all ladder runs: {total / 60:.1f} min ({len(records)} runs).")
    if records:
        curves = {key: rec["curve"] for key, rec in records.items()}
        section.add_figure("curves", figures.plot_ladder(curves))
    return section


def preset_section(record: dict[str, Any]) -> Section:
    """The `quick` preset run against the targets set before it was trained and the authors' code."""
    preset = record.get("preset")
    section = Section("preset", "The `quick` preset")
    if not preset:
        section.skipped = "the preset run is not in this record"
        return section
    st, authors = preset["settings"], record["authors_code"]
    needed = record["published"]["preset_targets"]["needed"]
    triggers = "fixed" if st["fixed_triggers"] else "random"
    section.lines = [
        (
            f"Settings: simplified model, d={st['d_model']}, T={st['seq_len']}, batch {st['batch_size']}, "
            f"{st['optimizer'].upper()} lr {st['lr']}, K={st['n_triggers']} {triggers} triggers, "
            f"{st['steps']} steps, frozen {', '.join(st['frozen'])}; ours are means of the last 3 logged"
            " batches."
        ),
        f"Authors' code: {authors['source']}",
        f"Targets: {record['published']['preset_targets']['source']}.",
    ]
    rows = [
        [label, fmt(preset["final"][key]), fmt(authors["results"].get(key)),
         f">= {needed[key]}" if key in needed else "-"]
        for label, key in PRESET_ROWS
    ]  # fmt: skip
    section.tables.append(Table(["metric", "ours", "authors' code", "needed"], rows))
    section.add_figure(
        "training", figures.plot_training(expand_history(preset["history"]), "the `quick` preset")
    )
    return section


def heads_section(record: dict[str, Any]) -> Section:
    """Head-detection scores of the preset run (`heads.detect_heads`, `heads.detect_heads_on_task`)."""
    preset = record.get("preset")
    section = Section("heads", "Head detection on the preset run")
    if not preset:
        section.skipped = "the preset run is not in this record"
        return section
    heads = preset["heads"]
    section.lines = [
        (
            f"Mean attention on each pattern's keys, on {heads['n_samples']} repeated random sequences / "
            f"{heads['n_samples']} task sequences at their answer queries (a trigger's later occurrences; "
            f"previous-token where an induction head reads), seed {heads['seed']}: the definitions of the "
            "report and `analyses/detect_heads.py` (`heads.detect_heads`, `heads.detect_heads_on_task`)."
        )
    ]
    rows = [
        [layer, f"{fmt(h['previous_token_random'])} / {fmt(h['previous_token_task'])}",
         f"{fmt(h['induction_random'])} / {fmt(h['induction_task'])}"]
        for layer, h in enumerate(heads["layers"])
    ]  # fmt: skip
    section.tables.append(Table(["layer", "previous-token", "induction"], rows))
    return section


def speed_section(record: dict[str, Any]) -> Section:
    """Data-generation speed: the vectorised sampler against the per-token reference loop."""
    sp = record.get("speed")
    section = Section("speed", "Data generation speed")
    if not sp:
        section.skipped = "not measured for this record"
        return section
    target = record["published"]["speed_target"]
    section.lines = [
        (
            f"T={sp['seq_len']}, K={sp['n_triggers']} {'fixed' if sp['fixed_triggers'] else 'random'}"
            " triggers, "
            f"batch {sp['batch']}, {sp['threads']} thread(s): vectorised sampler {sp['vectorised_per_s']:.0f}"
            " "
            f"sequences/s, per-token loop {sp['loop_per_s']:.0f} sequences/s, **{sp['ratio']:.0f}x** "
            f"(goal >= {target['ratio']}x: {target['source']})."
        )
    ]
    return section


def runs_section(record: dict[str, Any]) -> Section:
    """One row per run: final training-batch and held-out accuracy and the memory probes."""
    rows = []
    for entry in record["runs"].values():
        f = {k: fmt(entry["final"].get(k)) for k in RUN_METRICS}
        held = f["eval_icl_acc"]
        if entry["outputs"] == "ood":
            held += f" (OOD {fmt(entry['final'].get('eval_ood_icl_acc'))})"
        rows.append([entry["label"], entry["group"], f["icl_acc"], held, f["wo2_recall"], f["wk2_recall"],
                     f"{f['wk1_recall']} / {f['wk1_recall_64']}", f["wf_kl"]])  # fmt: skip
    headers = ["run", "experiment", "in-context acc (train batch)", "held-out", "W_O^2", "W_K^2",
               "W_K^1 all / 64", "W_F KL"]  # fmt: skip
    section = Section("runs", "Runs", tables=[Table(headers, rows)])
    if record["not_run"]:
        names = ", ".join(f"{r['label']} ({r['group']})" for r in record["not_run"])
        section.lines = [f"Not rerun in this record: {names}."]
    return section


def _figure_sections(record: dict[str, Any]) -> list[Section]:
    runs, fs = record["runs"], record["scale"]["freeze_step"]
    hist = {name: expand_history(e["history"]) for name, e in runs.items()}
    training = Section("training", "Simplified model, all trained jointly")
    if "freeze_none" in hist:
        training.add_figure(
            "curves", figures.plot_training(hist["freeze_none"], runs["freeze_none"]["label"])
        )
    if record.get("attention"):
        training.lines = [f"Attention maps of `{record['attention']['source']}` on one fresh sequence."]
        training.add_figure("attention", figures.plot_attention(record["attention"]))
    freezing = Section("freezing", f"(a) Freezing until step {fs} (paper Fig. 3)")
    frozen = {n: h for n, h in hist.items() if runs[n]["group"] == "freezing"}
    if frozen:
        labels = {n: runs[n]["label"] for n in frozen}
        freezing.add_figure("curves", figures.plot_freezing(frozen, labels, fs))
    ffn = Section("ffn", "(b) Joint training with W_F (paper Fig. 4)")
    if "ffn_joint" in hist:
        ffn.add_figure("curves", figures.plot_ffn(hist["ffn_joint"]))
    out = [training, freezing, ffn]
    for group, title in (("data", "(c) Data"), ("depth", "(d) Full model, 1 vs 2 layers")):
        bars = [(e["label"], e["final"]["eval_icl_acc"]) for e in runs.values() if e["group"] == group]
        if group == "data" and bars and "freeze_none" in runs:
            bars.insert(0, ("K=5, fixed (joint run of (a))", runs["freeze_none"]["final"]["eval_icl_acc"]))
        section = Section(group, title)
        if bars:
            section.add_figure("accuracy", figures.plot_final_bars(bars, "held-out in-context accuracy"))
        out.append(section)
    for section in out:
        if not section.figures:
            section.skipped = "its runs are not in this record"
    return out


def page(record: dict[str, Any]) -> Report:
    """The reproduction page of a run record."""
    sc, opt = record["scale"], record["optimizer"]
    meta = {
        "command": f"`{record['command']}`",
        "scale": (
            f"d={sc['d_model']}, T={sc['seq_len']}, batch {sc['batch_size']}, {opt['optimizer'].upper()} lr "
            f"{sc['lr']} (momentum {opt['momentum']}, weight decay {opt['weight_decay']}), {sc['steps']}"
            " steps "
            f"(simplified model) / {sc['full_steps']} (full model and W_F; T={sc['depth_seq_len']} for the"
            " full "
            f"model), freezing until step {sc['freeze_step']}; held-out metrics (`eval_*`) on"
            f" {sc['eval_samples']} "
            "sequences"
        ),
        "training time": f"{record['training_s'] / 60:.1f} min in all ({record['machine']})",
        "seed": record["seed"],
    }
    headline = f"{counts_line(record)} {sizes_line(record)}"
    sections = [statements_section(record), ladder_section(record), preset_section(record),
                heads_section(record), formation.birth_section(record), speed_section(record),
                Section("setup", "What is reproduced"),
                Section("deviations", "Deviations from the paper"), runs_section(record),
                *_figure_sections(record)]  # fmt: skip
    return Report(TITLE, headline, meta, sections)
