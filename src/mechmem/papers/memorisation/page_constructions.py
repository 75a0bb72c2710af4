"""The constructions half of the memorisation page: Appendix A, the published construction, capacities.

Reads `record["constructions"]`: capacity results (`CapacityResult` dicts, criteria "1" and "0.9"), trained
spot checks, Appendix A, the S x top_fraction sweep, the grid and histogram counts
(`constructions.reproduce`).
"""

import math
from typing import Any

from mechmem.papers.memorisation.capacity import THRESHOLDS, CapacityResult
from mechmem.papers.memorisation.constructions.experiments import capacity_of, fit_ratio, mode_fit
from mechmem.papers.memorisation.figures import plot_capacity, plot_histograms, plot_sweep
from mechmem.report.document import Section, Table

LABELS = {
    "trained": "trained",
    "rand_emb": "rand-emb",
    "published_hand": "hand-coded (published)",
    "published_hybrid": "hybrid (published E)",
    "keyvalue_hand": "hand-coded (our key-value table)",
    "keyvalue_hybrid": "hybrid (our key-value E)",
}
CRIT = {"1": "acc=1", "0.9": "acc>=0.9"}


def _results(record: dict[str, Any]) -> list[CapacityResult]:
    return [CapacityResult.from_dict(r) for r in record["constructions"]["results"]]


def _modes(results: list[CapacityResult]) -> list[str]:
    return [m for m in LABELS if any(r.name == m for r in results)]


def _ds(results: list[CapacityResult]) -> list[int]:
    return sorted({r.d for r in results})


def _ratio(results: list[CapacityResult], mode: str, crit: str, fmt: str = ".1f") -> str:
    if not any(r.name == mode for r in results) or not any(r.name == "trained" for r in results):
        return "n/a"
    value = fit_ratio(results, "trained", mode, crit)
    return "n/a" if math.isnan(value) else f"{value:{fmt}}x"


def constructions_headline(record: dict[str, Any]) -> list[str]:
    """Ratios trained / construction of the fits a d^2 / ln d (published values and goals in brackets)."""
    results, pub, c = _results(record), record["published"], record["constructions"]
    goals = pub["challenge_goals"]["value"]
    r = lambda mode, crit: _ratio(results, mode, crit)
    kv = (
        fit_ratio(results, "trained", "keyvalue_hybrid", "0.9")
        if "keyvalue_hybrid" in _modes(results)
        else math.nan
    )
    lines = [
        (
            f"Constructions at d = {', '.join(map(str, _ds(results)))} (ratios of fits a d^2 / ln d over the"
            f" sizes both modes have): trained / published hand-coded at acc >= 0.9"
            f" {r('published_hand', '0.9')} [published {pub['ratio_hand_coded']['value']}x], at acc = 1"
            f" {r('published_hand', '1')}; trained / published hybrid {r('published_hybrid', '0.9')}"
            f" [published {pub['ratio_hybrid']['value']}x], at acc = 1 {r('published_hybrid', '1')}."
        ),
        (
            f"Trained / our hand-coded key-value table at acc >= 0.9: {r('keyvalue_hand', '0.9')} (goal:"
            f" within {goals['hand_coded']:g}x); at acc = 1 {r('keyvalue_hand', '1')}. Our key-value"
            f" embeddings with a trained unembedding: {r('keyvalue_hybrid', '0.9')} (hybrid goal within"
            f" {goals['hybrid']:g}x {'met' if kv <= goals['hybrid'] else 'not met'})."
        ),
    ]
    for d, by_n in c["spot"].items():
        kv_caps = {crit: capacity_of(results, "keyvalue_hand", int(d), crit) for crit in THRESHOLDS}
        checks = ", ".join(f"{acc:.3f} at {n} facts" for n, acc in by_n.items())
        lines.append(
            f"d = {d} (no full trained search): our table stores {kv_caps['1']} facts at acc = 1 and"
            f" {kv_caps['0.9']} at acc >= 0.9; trained spot checks reach {checks}."
        )
    a = c["appendix_a"]
    stored = all(x == 1.0 for x in a["acc_bias_neuron"] + a["acc_output_bias"])
    lines.append(
        f"Appendix A stores {'all' if stored else 'not all'} n_in^2 facts at 100% for n_in ="
        f" {', '.join(map(str, a['n_in']))}, with the bias neuron and with an output bias instead."
    )
    return lines


def _setup_lines(record: dict[str, Any]) -> list[str]:
    g, results = record["constructions"]["grid"], _results(record)
    precisions = sorted({r.info.get("precision") for r in results})
    return [
        (
            f"Training (trained, hybrid, rand-emb): Adam lr {g['train']['lr']:g}, full batch, at most"
            f" {g['train']['max_epochs']} epochs, patience {g['train']['patience']}; best accuracy reached"
            " counts."
        ),
        (
            f"Capacity: doubling from d, bisecting to {', '.join(map(str, precisions))} facts; best of"
            f" {g['n_inits']} initialisations or the best hyperparameter setting."
        ),
        (
            f"Published hand-coded: S in {g['s_values']} x top_fraction in {g['top_fractions'][0]:.2f} .."
            f" {g['top_fractions'][-1]:.2f} ({len(g['top_fractions'])} values), {g['retries']} tie-break"
            " draws."
        ),
        f"Published hybrid: S in {g['hybrid_s_values']} x top_fraction in {g['hybrid_top_fractions']}.",
        f"Ours: key sizes k = round(f (d - 1)), f in {g['key_fractions']}, {g['key_retries']} key draws.",
    ]


def _capacity_tables(results: list[CapacityResult]) -> list[Table]:
    ds, modes = _ds(results), _modes(results)
    cell = lambda m, d, c: "-" if capacity_of(results, m, d, c) is None else capacity_of(results, m, d, c)
    heads = [f"d={d} {CRIT[c]}" for d in ds for c in THRESHOLDS]
    rows = []
    for m in modes:
        f1, f9 = mode_fit(results, m, "1"), mode_fit(results, m, "0.9")
        rows.append(
            [
                LABELS[m],
                *(cell(m, d, c) for d in ds for c in THRESHOLDS),
                f1.a,
                f9.a,
                f9.k,
                _ratio(results, m, "0.9", ".2f"),
            ]
        )
    capacity = Table(
        [
            "mode",
            *heads,
            "a (acc=1)",
            "a (acc>=0.9)",
            "exponent (acc>=0.9)",
            "trained / mode (acc>=0.9, fit a)",
        ],
        rows,
        floatfmt=".2f",
    )
    ratio_rows = []
    for m in [m for m in modes if m != "trained"]:
        cells = []
        for d in ds:
            for c in THRESHOLDS:
                a, b = capacity_of(results, "trained", d, c), capacity_of(results, m, d, c)
                cells.append(f"{a / b:.2f}x" if a and b else "-")
        ratio_rows.append([f"trained / {LABELS[m]}", *cells])
    return [capacity, Table(["ratio", *heads], ratio_rows)]


def _capacity_section(record: dict[str, Any]) -> Section:
    """Capacity of every mode, ratios, spot checks, the figure, and the published exponents at acc >= 0.9."""
    c, results = record["constructions"], _results(record)
    capacity = Section(
        "construction_capacity", "Capacity: the four modes and our entry", tables=_capacity_tables(results)
    )
    if c["spot"]:
        spot = [[int(d), int(n), acc] for d, by_n in c["spot"].items() for n, acc in by_n.items()]
        capacity.tables.append(
            Table(
                ["d", "facts", "trained accuracy"],
                spot,
                floatfmt=".4f",
                caption=(
                    f"Spot checks where a full trained search was too slow (best of {c['grid']['n_inits']}"
                    " trained initialisations, same recipe):"
                ),
            )
        )
    points = {
        LABELS[m]: {
            crit: [
                (d, capacity_of(results, m, d, crit))
                for d in _ds(results)
                if capacity_of(results, m, d, crit)
            ]
            for crit in THRESHOLDS
        }
        for m in _modes(results)
    }
    fits = {LABELS[m]: {crit: mode_fit(results, m, crit) for crit in THRESHOLDS} for m in _modes(results)}
    capacity.add_figure("capacity", plot_capacity(points, fits))
    capacity.lines.append("Runs that contributed: " + "; ".join(f"`{cmd}`" for cmd in c["runs"]) + ".")
    ce = record["published"]["construction_exponents"]
    capacity.lines.append(
        f"Published fitted exponents at acc >= 0.9: hand-coded {ce['value']['hand_coded']}, trained"
        f' {ce["value"]["trained"]} ({ce["source"]}: "{ce["quote"]}"); ours are the exponent column above.'
    )
    return capacity


def constructions_sections(record: dict[str, Any]) -> list[Section]:
    """Setup, Appendix A, the published construction, capacities, our entry, histograms."""
    c = record["constructions"]
    a, sweep = c["appendix_a"], c["sweep"]
    appendix = Table(
        ["n_in", "facts", "acc, d_mlp = n_in + 1", "acc, d_mlp = n_in + output bias"],
        [[n, n * n, x, y] for n, x, y in zip(a["n_in"], a["acc_bias_neuron"], a["acc_output_bias"])],
    )
    best_acc, best_s, best_tf = max(  # the first best setting, in S then top_fraction order
        (
            (acc, s, tf)
            for s, row in zip(sweep["s_values"], sweep["accuracy"])
            for tf, acc in zip(sweep["top_fractions"], row)
        ),
        key=lambda t: t[0],
    )
    published = Section(
        "published_construction",
        "The published construction",
        lines=[
            (
                f"Sweep at d = {sweep['d']}, {sweep['n_facts']} facts (best of {c['grid']['retries']}"
                f" tie-breaks): best accuracy {best_acc:.3f} at S = {best_s}, top_fraction = {best_tf:.2f};"
                f" sqrt(d) = {math.sqrt(sweep['d']):.1f}"
                f" [published: {record['published']['best_s_law']['value']}]."
            )
        ],
    )
    published.add_figure("sweep", plot_sweep(sweep))
    capacity = _capacity_section(record)
    histograms = Section("histograms", "Weights and activations: constructed vs trained (their Figures 6-8)")
    if c.get("histograms"):
        histograms.lines.append(f"d = {c['histograms']['d']}; rows: {'; '.join(c['histograms']['rows'])}.")
        histograms.add_figure("histograms", plot_histograms(c["histograms"]["rows"]))
    return [
        Section("challenge_setup", "Constructions: setup", lines=_setup_lines(record)),
        Section("appendix_a", "Appendix A: all facts at d_mlp = n_in + 1", tables=[appendix]),
        published,
        capacity,
        Section("keyvalue", "Our entry: a random-key value table"),
        histograms,
    ]
