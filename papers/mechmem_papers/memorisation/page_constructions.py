"""The constructions half of the memorisation page: Appendix A, the published construction, capacities.

Reads `record["constructions"]`: capacity results (`CapacityResult` dicts, criteria "1" and "0.9"), trained
spot checks, Appendix A, the S x top_fraction sweep, the grid and histogram counts
(`constructions.reproduce`).
"""

import math
from typing import Any

from mechmem.report.document import Section, Table
from mechmem_papers.memorisation.bits import stored_bits
from mechmem_papers.memorisation.capacity import THRESHOLDS, CapacityResult
from mechmem_papers.memorisation.constructions.evaluators import authors_s_values
from mechmem_papers.memorisation.constructions.experiments import capacity_of, fit_ratio, mode_fit, shared_ds
from mechmem_papers.memorisation.figures import plot_capacity, plot_histograms, plot_sweep
from mechmem_papers.memorisation.fits import fit_scaling, log_power_exponent

LABELS = {
    "trained": "trained",
    "trained_authors": "trained (the authors' initialisations)",
    "rand_emb": "rand-emb",
    "published_hand": "hand-coded (published)",
    "published_hybrid": "hybrid (published E)",
    "published_hybrid_authors": "hybrid (published E, the authors' grid)",
    "keyvalue_hand": "hand-coded (our key-value table)",
    "keyvalue_hybrid": "hybrid (our key-value E)",
}
CRIT = {"1": "acc=1", "0.9": "acc>=0.9"}
AUTHORS_LOG = {m: m for m in ("trained", "published_hand", "published_hybrid")}
AUTHORS_LOG |= {"published_hybrid_authors": "published_hybrid", "trained_authors": "trained"}
"""Our mode -> the authors' capacity log it is set beside (published.json `construction_authors_any`)."""


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


def setup_of(record: dict[str, Any], mode: str) -> str:
    """How a mode's capacity was searched here, beside the authors' set-up where it differs (the
    initialisations, and the hybrid's grid of S x top_fraction)."""
    g, pub = record["constructions"]["grid"], record["published"]
    theirs = pub["construction_inits"]["value"]
    parts = []
    if mode in ("trained", "rand_emb"):
        parts.append(f"best of {g['n_inits']} inits (the authors: {theirs})")
    if mode == "trained_authors":
        parts.append(f"best of {g.get('authors_attempts')} inits, as the authors")
    if mode == "published_hand":
        parts.append(
            f"S in {g['s_values'][0]}..{g['s_values'][-1]} x top_fraction {g['top_fractions'][0]:.2f}.."
            f"{g['top_fractions'][-1]:.2f}, {g['retries']} tie-break draws"
        )
    if mode == "published_hybrid":
        parts.append(
            f"one U trained per setting, S in {g['hybrid_s_values']} x top_fraction in"
            f" {g['hybrid_top_fractions']} (the authors: {pub['construction_hybrid_grid']['value']})"
        )
    if mode == "published_hybrid_authors":
        parts.append(
            f"the authors' grid, {g.get('authors_attempts')} draws per setting, one U trained per draw"
        )
    if mode == "keyvalue_hand":
        parts.append(
            f"key fractions {g['key_fractions']}, {g['key_retries']} key draws (ours; no authors' set-up)"
        )
    if mode == "keyvalue_hybrid":
        parts.append(f"key fractions {g['key_fractions']}, one key draw, one U trained per key size (ours)")
    return "; ".join(parts)


def _span(ds: list[int]) -> str:
    return f"{ds[0]}..{ds[-1]}" if ds else "-"


def published_span(record: dict[str, Any]) -> str:
    """The model sizes of the published construction fits and ratios, e.g. "16..256" (published.json)."""
    low, high = record["published"]["construction_d_range"]["value"]
    return f"{low}..{high}"


def authors_ratio(record: dict[str, Any], mode: str, crit: str, ds: list[int]) -> float:
    """a(trained) / a(mode), fits a d^2 / ln d to the authors' own capacity logs over `ds` (nan if absent)."""
    logs = record["published"].get("construction_authors_any", {}).get("value", {})
    caps = {m: logs.get(AUTHORS_LOG.get(m, m), {}).get(crit, {}) for m in ("trained", mode)}
    if not ds or not all(all(str(d) in caps[m] for d in ds) for m in caps):
        return math.nan
    a = {m: fit_scaling(ds, [caps[m][str(d)] for d in ds]).a for m in caps}
    return a["trained"] / a[mode]


def _like_for_like(record: dict[str, Any], results: list[CapacityResult], mode: str, published: str) -> str:
    """Ours over the shared sizes beside the authors' logs over the same sizes and the published ratio."""
    ds, pub = shared_ds(results, "trained", mode), record["published"][published]
    parts = []
    for crit in ("0.9", "1"):
        theirs = authors_ratio(record, mode, crit, ds)
        parts.append(
            f"{CRIT[crit]} {_ratio(results, mode, crit)} [the authors' logs over the same d: "
            + ("n/a" if math.isnan(theirs) else f"{theirs:.2f}x")
            + "]"
        )
    return (
        f"trained / {LABELS[mode]} over d = {_span(ds)} ({setup_of(record, mode)}): {', '.join(parts)};"
        f" published {pub['value']}x is over d = {published_span(record)}"
    )


def _exponent_line(record: dict[str, Any], results: list[CapacityResult]) -> str:
    """Exponents of the authors' fit form c d^k / ln d (plain slope beside) against the published ones."""
    ce = record["published"]["construction_exponents"]["value"]
    parts = []
    for mode, key in (
        ("published_hand", "hand_coded"),
        ("trained", "trained"),
        ("published_hybrid", "hybrid"),
        ("published_hybrid_authors", "hybrid"),
    ):
        f = mode_fit(results, mode, "0.9")
        if len(f.d) < 2:
            continue
        parts.append(
            f"{LABELS[mode]} {log_power_exponent(f.d, f.capacity):.2f} (plain slope {f.k:.2f}; d ="
            f" {_span(f.d)}) [published {ce[key]}]"
        )
    return (
        "Exponent k of the authors' fit S = c d^k / ln d at acc >= 0.9: "
        + "; ".join(parts)
        + f". The published exponents are fits over d = {published_span(record)}."
    )


def constructions_headline(record: dict[str, Any]) -> list[str]:
    """Ratios trained / construction beside the authors' data over the same sizes; exponents; our entry."""
    results, pub, c = _results(record), record["published"], record["constructions"]
    goals = pub["challenge_goals"]["value"]
    r = lambda mode, crit: _ratio(results, mode, crit)
    kv = (
        fit_ratio(results, "trained", "keyvalue_hybrid", "0.9")
        if "keyvalue_hybrid" in _modes(results)
        else math.nan
    )
    inits = c["grid"]["n_inits"]
    lines = [
        (
            f"Constructions at d = {', '.join(map(str, _ds(results)))}, best of {inits} initialisations (the"
            f" authors: {pub['construction_inits']['value']}); ratios of fits a d^2 / ln d: "
            + "; ".join(
                _like_for_like(record, results, m, k)
                for m, k in (
                    ("published_hand", "ratio_hand_coded"),
                    ("published_hybrid", "ratio_hybrid"),
                    ("published_hybrid_authors", "ratio_hybrid"),
                )
                if m in _modes(results)
            )
            + "."
        ),
        _exponent_line(record, results),
        (
            f"Trained / our hand-coded key-value table at acc >= 0.9: {r('keyvalue_hand', '0.9')} (the"
            f" project's own goal, not the paper's: within {goals['hand_coded']:g}x); at acc = 1"
            f" {r('keyvalue_hand', '1')}. Our key-value embeddings with a trained unembedding:"
            f" {r('keyvalue_hybrid', '0.9')} (the project's own hybrid goal, within {goals['hybrid']:g}x:"
            f" {'met' if kv <= goals['hybrid'] else 'not met'})."
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
    g, results, pub = record["constructions"]["grid"], _results(record), record["published"]
    precisions = sorted({r.info.get("precision") for r in results})
    authors_grid = (
        f"Published hybrid on the authors' grid: S in {list(authors_s_values(16))} at d = 16,"
        f" {list(authors_s_values(32))} at d = 32 (their S_sweep_for) x the hand-coded top_fraction grid,"
        f" {g.get('authors_attempts')} draws per setting (their n_attempts); draw a > 0 permutes the"
        " label columns of the neuron-label code and re-draws the tie-breaks and U's initialisation, as"
        " their attempts do; draws stop once one stores every fact."
    )
    return [
        (
            f"Training (trained, hybrid, rand-emb): Adam lr {g['train']['lr']:g}, full batch, at most"
            f" {g['train']['max_epochs']} epochs, patience {g['train']['patience']}; best accuracy reached"
            " counts."
        ),
        (
            f"Capacity: doubling from d, bisecting to {', '.join(map(str, precisions))} facts; best of"
            f" {g['n_inits']} initialisations (the authors: {pub['construction_inits']['value']}) or the best"
            " hyperparameter setting."
        ),
        (
            f"Published hand-coded: S in {g['s_values']} x top_fraction in {g['top_fractions'][0]:.2f} .."
            f" {g['top_fractions'][-1]:.2f} ({len(g['top_fractions'])} values), {g['retries']} tie-break"
            " draws."
        ),
        (
            f"Published hybrid: S in {g['hybrid_s_values']} x top_fraction in {g['hybrid_top_fractions']}"
            f" (the authors: {pub['construction_hybrid_grid']['value']}; source:"
            f" {pub['construction_hybrid_grid']['source']})."
        ),
        f"Ours: key sizes k = round(f (d - 1)), f in {g['key_fractions']}, {g['key_retries']} key draws.",
    ] + ([authors_grid] if "published_hybrid_authors" in _modes(results) else [])


def _capacity_tables(record: dict[str, Any], results: list[CapacityResult]) -> list[Table]:
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
                *(("-" if math.isnan(x) else x) for x in (f9.k, log_power_exponent(f9.d, f9.capacity))),
                _ratio(results, m, "0.9", ".2f"),
                setup_of(record, m),
            ]
        )
    capacity = Table(
        [
            "mode",
            *heads,
            "a (acc=1)",
            "a (acc>=0.9)",
            "plain slope (acc>=0.9)",
            "k of c d^k / ln d (acc>=0.9)",
            "trained / mode (acc>=0.9, fit a)",
            "set-up (ours; the authors')",
        ],
        rows,
        floatfmt=".2f",
    )
    ratio_rows = []
    for m in [m for m in modes if not m.startswith("trained")]:
        cells = []
        for d in ds:
            for c in THRESHOLDS:
                a, b = capacity_of(results, "trained", d, c), capacity_of(results, m, d, c)
                cells.append(f"{a / b:.2f}x" if a and b else "-")
        ratio_rows.append([f"trained / {LABELS[m]}", *cells])
    return [capacity, Table(["ratio", *heads], ratio_rows), _beside_authors(record, results)]


def _beside_authors(record: dict[str, Any], results: list[CapacityResult]) -> Table:
    """Every capacity of ours that the authors logged too, beside their value (Any), within 10% or not."""
    logs = record["published"]["construction_authors_any"]["value"]
    rows = []
    for r in sorted(results, key=lambda r: (list(LABELS).index(r.name), r.d)):
        for crit in THRESHOLDS:
            theirs = logs.get(AUTHORS_LOG.get(r.name, ""), {}).get(crit, {}).get(str(r.d))
            ours = capacity_of(results, r.name, r.d, crit)
            if theirs and ours is not None:
                close = abs(ours - theirs) <= 0.1 * theirs
                rows.append([LABELS[r.name], r.d, CRIT[crit], ours, theirs, f"{ours / theirs:.2f}", close])
    agree = sum(row[-1] for row in rows)
    return Table(
        ["mode", "d", "criterion", "ours", "the authors' log", "ours / theirs", "within 10%"],
        [[*row[:-1], "yes" if row[-1] else "no"] for row in rows],
        caption=f"Ours beside the authors' own capacity logs (Any): {agree} of {len(rows)} within 10%.",
    )


def _capacity_section(record: dict[str, Any]) -> Section:
    """Capacity of every mode, ratios, spot checks, the figure, and the published exponents at acc >= 0.9."""
    c, results = record["constructions"], _results(record)
    capacity = Section(
        "construction_capacity",
        "Capacity: the four modes and our entry",
        tables=_capacity_tables(record, results),
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
    pub = record["published"]
    ce, form = pub["construction_exponents"], pub["construction_fit_form"]
    capacity.lines.append(
        f"Published fitted exponents at acc >= 0.9: hand-coded {ce['value']['hand_coded']}, trained"
        f' {ce["value"]["trained"]}, hybrid {ce["value"]["hybrid"]} ({ce["source"]}: "{ce["quote"]}");'
        f" their fit form: {form['value']} ({form['source']}: `{form['quote']}`). Ours in that form are the"
        ' column "k of c d^k / ln d"; the plain power-law slope is beside it.'
    )
    logs = pub["construction_authors_any"]
    capacity.lines.append(
        "The authors' own capacities (Any), against which the ratios are set over the same d:"
        f" {logs['source']}"
        f' ({logs["note"]}): "{logs["quote"]}".'
    )
    return capacity


def challenge_weights(d: int) -> int:
    """Weights of the challenge model at size d: E1, E2 (n_in x d) and U (d x n_out), n_in = 2d, n_out = d."""
    return 2 * (2 * d) * d + d * d


def _bits_section(record: dict[str, Any]) -> Section:
    """Each construction's capacity in bits (Fano's bound at the accuracy reached there) per weight and per
    trained weight: E1, E2 (n_in x d) and U (d x n_out), with n_in = 2d and n_out = d."""
    results = _results(record)
    rows = []
    for r in sorted(results, key=lambda r: (list(LABELS).index(r.name), r.d)):
        n_out, weights = r.d, challenge_weights(r.d)
        trained = weights if r.name.startswith("trained") else 0 if r.name.endswith("_hand") else r.d * n_out
        for crit, label in CRIT.items():
            if crit not in r.searches:
                continue
            n = r.searches[crit].best
            acc = float(r.scores[n]) if n in r.scores else None  # None: no fact count met the criterion
            bits = stored_bits(n, n_out, 1.0 if acc is None else acc)
            per_trained = f"{bits / trained:.2f}" if trained else "- (none trained)"
            rows.append(
                [LABELS[r.name], r.d, label, n, "-" if acc is None else f"{acc:.3f}", f"{bits:.0f}"]
                + [weights, f"{bits / weights:.2f}", trained, per_trained]
            )
    anchor = record["published"]["knowledge_capacity"]["value"]
    headers = ["mode", "d", "criterion", "facts", "accuracy there", "bits (lower bound)", "weights"]
    headers += ["bits / weight", "trained weights", "bits / trained weight"]
    line = (
        "Bits as for the variants (N log2 n_out at full recall; below it Fano's bound N (log2 K - H(a) -"
        f" (1 - a) log2(K - 1)) at the accuracy a reached), per weight of the model and per trained weight,"
        f" beside the anchor of {anchor:g} bits per parameter. A hand-coded model trains nothing: its bits"
        " per weight say how densely the construction packs the labels; a hybrid's embeddings are built from"
        " the facts, so they hold part of its bits and its bits per trained weight can pass the anchor."
    )
    section = Section(
        "construction_bits",
        "Constructions in bits per parameter",
        lines=[line],
        tables=[Table(headers, rows)],
    )
    if record["constructions"].get("int8"):
        section.tables.append(_int8_table(record))
        section.lines.append(_int8_line(record))
    return section


def _int8_line(record: dict[str, Any]) -> str:
    """Per mode, the row that keeps the smallest share of its bits after int8 rounding."""
    worst: dict[str, tuple[float, dict]] = {}
    for r in record["constructions"]["int8"]["rows"]:
        before = stored_bits(r["n"], r["d"], r["accuracy"])
        kept = stored_bits(r["n"], r["d"], r["accuracy_int8"]) / before if before else 1.0
        if r["mode"] not in worst or kept < worst[r["mode"]][0]:
            worst[r["mode"]] = (kept, r)
    parts = [
        f"{LABELS[m]} {kept:.1%} (d = {r['d']}, {CRIT[r['criterion']]})"
        for m, (kept, r) in sorted(worst.items(), key=lambda kv: list(LABELS).index(kv[0]))
    ]
    anchor = record["published"]["knowledge_capacity"]
    return (
        "After int8 rounding, the share of the bits kept, at worst over sizes and criteria: "
        + "; ".join(parts)
        + f". The anchor ({anchor['source']}): {anchor['value']:g} bits per parameter, kept after int8"
        " quantisation."
    )


def _int8_table(record: dict[str, Any]) -> Table:
    """Bits per weight before and after rounding every weight tensor to int8 (`constructions.int8`)."""
    int8 = record["constructions"]["int8"]
    rows = []
    order = lambda r: (list(LABELS).index(r["mode"]), r["d"], list(CRIT).index(r["criterion"]))
    for r in sorted(int8["rows"], key=order):
        weights = challenge_weights(r["d"])
        before, after = (stored_bits(r["n"], r["d"], r[k]) for k in ("accuracy", "accuracy_int8"))
        rows.append(
            [LABELS[r["mode"]], r["d"], CRIT[r["criterion"]], r["n"], f"{r['accuracy']:.3f}"]
            + [f"{r['accuracy_int8']:.3f}", f"{before / weights:.2f}", f"{after / weights:.2f}"]
        )
    searched = {(r.name, r.d): r.scores for r in _results(record)}
    differ = sorted(
        {
            LABELS[r["mode"]]
            for r in int8["rows"]
            if r["mode"].endswith("_hand")
            and abs(searched[(r["mode"], r["d"])][r["n"]] - r["accuracy"]) > 1e-6
        }
    )
    caption = (
        "After int8 rounding (one symmetric scale per weight tensor, max |w| -> 127): the weights rebuilt on"
        " this machine at our capacities as the search built them, judged on their final values. The accuracy"
        " before rounding can differ from the search's: the learned modes are judged on their final weights"
        " (the search counted the best accuracy reached during training)"
        + (
            f"; rebuilt here, {' and '.join(differ)} reach slightly different accuracies than their"
            " search recorded (its records keep no software versions, so the cause is not known)"
            if differ
            else "; the hand-coded constructions, rebuilt here, reach the accuracies their search recorded"
        )
        + ". Runs: "
        + "; ".join(f"`{cmd}`" for cmd in int8["runs"])
        + "."
    )
    headers = ["mode", "d", "criterion", "facts", "accuracy", "accuracy, int8", "bits / weight"]
    return Table([*headers, "bits / weight, int8"], rows, caption=caption)


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
        _bits_section(record),
        Section("keyvalue", "Our entry: a random-key value table"),
        histograms,
    ]
