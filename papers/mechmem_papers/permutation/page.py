"""The permutation-memory reproduction page.

The run record (`run_reproduction`) -> a `Report` of computed lines, tables and figures. Words that are not
computed live in docs/reproductions/prose/permutation.md, one block per section key (published, setup, bayes,
probe, roles, rescue, scale); the published values in published.json. The first table is always the
published-schedule result beside the published values: a record trained at another schedule (the default
variant's tuned one) is shown below it as a sensitivity check, and `attach_published_schedule` hands the page
the committed published-schedule record to put first.
"""

import json
from pathlib import Path
from statistics import mean
from typing import Any

from mechmem.analysis.stats import format_mean_sd, mean_sd
from mechmem.models.parts import Head
from mechmem.report.document import Report, Section, Table
from mechmem_papers import formation
from mechmem_papers.permutation import figures

TITLE = 'Reproduction: "Can a Tiny Transformer Learn to Remember?" (permutation memory)'
PUBLISHED_PATH = Path(__file__).with_name("published.json")
GROUPS = {"task1": "Task 1", "task2": "Task 2"}
PUBLISHED_SCHEDULE_VARIANT = "paper"
"""The variant that trains Task 1 and Task 2 at the published schedule; its record is
docs/reproductions/data/permutation-paper.json."""


def _values(published: dict[str, Any]) -> dict[str, Any]:
    """published.json's "values" without their sources: key -> number (or text)."""
    return {k: v["value"] for k, v in published.items()}


def load_published() -> dict[str, Any]:
    """The published values: {"paper": str, "values": {key: {"value", "quantity", "source"}}}."""
    return json.loads(PUBLISHED_PATH.read_text())


def format_ms(values: list[float], fmt: str = ".3f") -> str:
    """Mean ± sample sd of the values (a single value alone): `stats.format_mean_sd`."""
    return format_mean_sd(values, fmt)


def _mean_and_sd(values: list[float]) -> list[Any]:
    """[mean, sample sd ("-" for one value)] as table cells (`stats.mean_sd`)."""
    m, sd = mean_sd(values)
    return [m, "-" if sd is None else sd]


def final_acc(run: dict[str, Any], suffix: str) -> float:
    """Accuracy of the Bayes-table row whose step name ends with `suffix` (e.g. "5", "elimination")."""
    return next(r["acc"] for r in run["bayes"] if r["step"].endswith(suffix))


def at_published_schedule(record: dict[str, Any], published: dict[str, Any]) -> bool:
    """Whether Task 1 and Task 2 trained at the published schedule: constant lr, its value and epochs."""
    for key in ("task1", "task2"):
        t, task = record[key][0]["train"], record[key][0]["task"]
        epochs = t["steps"] * t["batch_size"] / task["epoch_size"]
        want = published[f"{key}_epochs"]
        if t["schedule"] != "constant" or t["lr"] != published["lr"] or round(epochs) != want:
            return False
    return True


def attach_published_schedule(record: dict[str, Any], data: Path) -> dict[str, Any]:
    """`record` with "published_schedule" (the file name and the record of the published-schedule variant in
    `data`) when `record` is trained at another schedule and that record is there and at the published one;
    else `record` as it is. The plugin's `references`: read when the page is built, never written into the
    record."""
    values = _values(load_published()["values"])
    path = Path(data) / f"permutation-{PUBLISHED_SCHEDULE_VARIANT}.json"
    if at_published_schedule(record, values) or not path.exists():
        return record
    other = json.loads(path.read_text())
    if not at_published_schedule(other, values):
        return record
    return {**record, "published_schedule": {"file": path.name, "record": other}}


ACCUMULATED_FILE = "permutation_accumulated.json"
"""The seed page's loop as printed, gradients never zeroed (scripts.accumulated_grads), data folder."""
TRAINED_SIDE_FILES = {
    "batch": "permutation_batch64.json",
    "batch_task1": "permutation_batch64_task1.json",
    "batch32_task1": "permutation_batch32_task1.json",
    "batch512_task1": "permutation_batch512_task1.json",
    "plain_task1": "permutation_plain_task1.json",
    "encoder_task1": "permutation_encoder_task1.json",
    "plain_task2": "permutation_plain_task2.json",
    "encoder_task2": "permutation_encoder_task2.json",
}
"""Side checks that train a published-schedule preset one unknown another way and measure what the page
publishes: another batch size (scripts.batch_check), the authors' class read as PyTorch modules
(scripts.model_check)."""
SIDE_FILES = {
    "accumulated": ACCUMULATED_FILE,
    **TRAINED_SIDE_FILES,
    "split_prior": "permutation_split_prior.json",
}
"""Side checks the page reads from the data folder: the loop as printed, `TRAINED_SIDE_FILES`, and the
training-mapping posterior over splits (scripts.split_prior)."""


def attach_references(record: dict[str, Any], data: Path) -> dict[str, Any]:
    """The plugin's `references`: `attach_published_schedule`, and each side check of `SIDE_FILES` found in
    `data` (its file name and content, under its key). Read when the page is built, never written into the
    record."""
    record = attach_published_schedule(record, data)
    for key, name in SIDE_FILES.items():
        path = Path(data) / name
        if path.exists():
            record = {**record, key: {"file": name, **json.loads(path.read_text())}}
    return formation.attach_formation(record)


def unsourced_line(record: dict[str, Any], published: dict[str, Any]) -> str | None:
    """The published numbers whose source says "no primary source", listed as such; None when every number
    has one. Numbers only: the V=10 / V=15 size guesses are not published values and are not shown."""
    unsourced = [
        v
        for v in published.values()
        if v["source"].startswith("no primary source") and isinstance(v["value"], int | float)
    ]
    if not unsourced:
        return None
    return (
        "Published values with no primary source the project holds (the values the project was given): "
        + "; ".join(f"{v['quantity']} {v['value']}" for v in unsourced)
        + "."
    )


def split_prior_line(record: dict[str, Any], published: dict[str, Any]) -> str | None:
    """Task 1's published steps 1 .. V-1 beside what a model can reach on some split. Accuracy: between the
    training-mapping posterior's (lowest over the splits of the side file) and the Bayes accuracy. MAE and max
    error: inside that posterior's range over the splits (the optimum of a model trained on the training
    mappings, on some split), with our published-schedule seeds' mean beside our split's optimum."""
    side = record.get("split_prior")
    if not side:
        return None
    bayes = {r["step"]: r["bayes_acc"] for r in record["task1"][0]["bayes"]}
    ours = {k: mean(v) for k, v in our_values(first_record(record)).items()}
    parts = []
    for k in range(1, side["vocab_size"]):
        cells = []
        for metric, name, label in (
            ("accuracy", "acc", "accuracy"),
            ("mae", "mae", "MAE"),
            ("max_err", "max_err", "max error"),
        ):
            column = [row[k - 1] for row in side[f"step_{metric}"]]
            low, high = min(column), max(column)
            pub = published[f"task1_step{k}_{name}"]["value"]
            top = bayes[str(k)] if name == "acc" else high
            inside = "inside" if low <= pub <= top else "outside"
            ours_here = "" if name == "acc" else f", ours {ours[f'task1_step{k}_{name}']:.3f}"
            bound = f", Bayes {top:.3f}" if name == "acc" else ""
            cells.append(
                f"{label}: our split's {column[0]:.3f}{ours_here}, over the splits {low:.3f} .."
                f" {high:.3f}{bound}; published {pub:g}, {inside} [{low:.3f}, {top:.3f}]"
            )
        parts.append(f"step {k}: " + "; ".join(cells))
    return (
        f"Task 1 at steps 1 to {side['vocab_size'] - 1} and the split (`{side['file']}`,"
        f" {side['split_seeds']} random splits; the posterior that knows the training mappings exactly, the"
        " optimum of a model trained on them, on every held-out sequence; a published accuracy inside"
        " [lowest over the splits, Bayes] is reached on some split by a model between that optimum and"
        " Bayes, a published MAE or max error inside the splits' range by a model at that optimum; ours:"
        " the published-schedule seeds' mean): " + " | ".join(parts) + "."
    )


def first_record(record: dict[str, Any]) -> dict[str, Any]:
    """The record of the page's first table: the attached published-schedule record, else `record`."""
    return record["published_schedule"]["record"] if "published_schedule" in record else record


def side_check_lines(record: dict[str, Any], published: dict[str, Any]) -> list[str]:
    """The checks of `TRAINED_SIDE_FILES` found beside the record (Task 2's batch 64 first), each beside the
    published values and the same seeds of the first table's record: which misses each explains (its mean
    within the tolerance where the record's is not) and which hits it loses."""
    sides = [record.get(key) for key in TRAINED_SIDE_FILES]
    return [_side_line(first_record(record), side, published) for side in sides if side and side["runs"]]


def _side_line(record: dict[str, Any], side: dict[str, Any], published: dict[str, Any]) -> str:
    group = side["preset"].split("-")[0]
    tol = published["seed_tolerance"]["value"]
    new = [run_values(r, group) for r in side["runs"]]
    seeds = {r["seed"] for r in side["runs"]}
    base = [run_values(r, group) for r in record[group] if r["seed"] in seeds]
    parts, within = [], {"new": 0, "base": 0, "explained": 0, "lost": 0}
    for key in new[0]:
        pub = published[key]["value"]
        at_new, at_base = mean(x[key] for x in new), mean(x[key] for x in base)
        within["new"] += abs(at_new - pub) <= tol
        within["base"] += abs(at_base - pub) <= tol
        within["explained"] += abs(at_new - pub) <= tol < abs(at_base - pub)
        within["lost"] += abs(at_base - pub) <= tol < abs(at_new - pub)
        parts.append(f"{published[key]['quantity']} {at_new:.4g} vs {at_base:.4g} [published {pub:g}]")
    batch = record[group][0]["train"]["batch_size"]
    if "model" in side:
        unknown, how = "the authors' model class", f"as {side['model']}, batch {side['batch_size']}"
        ours, theirs = "the PyTorch model", "TransformerLens's"
    else:
        unknown, how = "batch size", f"at batch {side['batch_size']}"
        ours, theirs = f"batch {side['batch_size']}", f"batch {batch}"
    n = len(parts)
    return (
        f"Side check, {unknown} (unknown; `{side['file']}`: {side['preset']} {how}, {side['steps']} steps,"
        f" seeds {', '.join(map(str, sorted(seeds)))}; beside the first table's same seeds at batch {batch};"
        f" means over those seeds): " + "; ".join(parts) + f". Within ±{tol:g}: {within['new']} of {n} with"
        f" {ours}, {within['base']} with {theirs}; {ours} brings {within['explained']} of {n} values within"
        f" ±{tol:g} that {theirs} misses, and moves {within['lost']} outside that {theirs} has."
    )


def accumulated_line(record: dict[str, Any], published: dict[str, Any]) -> str | None:
    """The accumulated-gradient check beside the published values and our published-schedule seeds."""
    acc = record.get("accumulated")
    if not acc or not acc["runs"]:
        return None
    runs = acc["runs"]

    def spread(key: str) -> str:
        values = [r[key] for r in runs]
        return f"{format_ms(values)} ({_span(values)})"

    return (
        "Sensitivity check, the seed page's loop as printed (no `optimizer.zero_grad()`, so Adam reads the"
        f" sum of every gradient so far; `{acc['file']}`, preset {acc['preset']}, {acc['steps']} steps,"
        f" {len(runs)} seed(s), mean ± sd (range)): Task 2 probe p(recall) {spread('p_recall')} [published"
        f" {published['task2_probe_recall_p']['value']:g}]; memorisation subgroup last-step accuracy"
        f" {spread('memorisation_acc')} [published {published['task2_memorisation_acc']['value']:g}], max err"
        f" against the Bayesian posterior {spread('memorisation_max_err')} [published"
        f" {published['task2_memorisation_max_err']['value']:g}]."
    )


def _schedule_name(train: dict[str, Any]) -> str:
    """ "constant", or the decay and its floor as a multiple of lr, e.g. "cosine to 0.1 x lr"."""
    if train["schedule"] == "constant":
        return "constant"
    return f"{train['schedule']} to {train['min_lr_ratio']:g} x lr"


def _published_schedule_text(values: dict[str, Any]) -> str:
    return (
        f"constant lr {values['lr']:g}, {values['task1_epochs']} / {values['task2_epochs']} epochs of"
        f" {values['epoch_size']} samples"
    )


def _sensitivity_text(record: dict[str, Any], values: dict[str, Any]) -> str:
    """What differs from the published schedule: lr (as a multiple of the published one), schedule, length."""
    t = record["task2"][0]["train"]
    epochs = " / ".join(
        f"{run[0]['train']['steps'] * run[0]['train']['batch_size'] / run[0]['task']['epoch_size']:g}"
        for run in (record["task1"], record["task2"])
    )
    return (
        f"lr {t['lr']:g} = {t['lr'] / values['lr']:g}x the published {values['lr']:g}, schedule"
        f" {_schedule_name(t)} instead of constant, {t['steps']} steps of {t['batch_size']} = {epochs} epochs"
        f" instead of {values['task1_epochs']} / {values['task2_epochs']}"
    )


def _results_text(record: dict[str, Any], published: dict[str, Any]) -> str:
    """How many published values our means match, then Task 2's probe p(recall) and memorisation max err and
    Task 1's probe p(elimination), of one record."""
    t1, t2 = record["task1"], record["task2"]
    ours = our_values(record)
    rows = published_rows(record, published)
    tol = published["seed_tolerance"]["value"]

    def probe(group: str, answer: str, runs: list[dict[str, Any]]) -> str:
        key = f"{group}_probe_{answer}_p"
        median = "median_p_recall" in runs[0]["probe"]
        means = format_ms([r["probe"][f"p_{answer}"] for r in runs])
        kind = f"median probe; mean over probes {means}" if median else "mean over probes"
        return (
            f"{format_ms(ours[key])} over {len(runs)} seed(s), {kind} (published {published[key]['value']:g},"
            f" one probe sequence)"
        )

    missed = [r[0] for r in rows if r[-2] == "no"]
    return (
        f"our mean over seeds is within ±{tol:g} of {len(rows) - len(missed)} of the {len(rows)}"
        f" published values compared (one seed within: {sum(r[-1] == 'yes' for r in rows)})."
        + (f" Missed: {'; '.join(missed)}." if missed else "")
        + f" Task 2 probe p(recall) {probe('task2', 'recall', t2)}; Task 2 memorisation subgroup max err"
        f" {format_ms(ours['task2_memorisation_max_err'])} (published"
        f" {published['task2_memorisation_max_err']['value']:g}); Task 1 probe p(elimination)"
        f" {probe('task1', 'elimination', t1)}."
    )


def headline_text(record: dict[str, Any], published: dict[str, Any]) -> str:
    """The headline: the published-schedule result first (this record's, or the attached published-schedule
    record's), then this record's tuned runs as a sensitivity check, then the larger-V presets.

    `published` is published.json's "values" (each value with its source)."""
    values = _values(published)
    attached = record.get("published_schedule")
    if at_published_schedule(record, values):
        text = (
            f"**Published schedule** ({_published_schedule_text(values)}): {_results_text(record, published)}"
        )
    elif attached:
        text = (
            f"**Published schedule** ({_published_schedule_text(values)}; record `{attached['file']}`):"
            f" {_results_text(attached['record'], published)} **Sensitivity check, this page's own runs**"
            f" ({_sensitivity_text(record, values)}): {_results_text(record, published)}"
        )
    else:
        text = (
            f"**Sensitivity variant, not the published schedule** ({_sensitivity_text(record, values)}; no"
            f" published-schedule record beside this one): {_results_text(record, published)}"
        )
    if record["scale"]:
        presets = ", ".join(f"`{p}`" for p in dict.fromkeys(run["preset"] for run in record["scale"]))
        text += f" Larger-V runs: presets {presets} (our sizes and schedules; the seed gives none)."
    return text


def build_page(record: dict[str, Any]) -> Report:
    """The page's computed content from a run record."""
    published = load_published()["values"]
    values = _values(published)
    sections = [
        _published(record, published),
        _setup(record, values),
        _bayes(record),
        _probe(record),
        _roles(record),
        _rescue(record),
        _scale(record),
        formation.permutation_section(record),
    ]
    headline = headline_text(record, published)
    cfg = record["config"]
    variant = cfg.get("variant", "full")
    name = "permutation" if variant == "full" else f"permutation-{variant}"
    kind = "paper" if variant == "paper" else "quick"
    scale = list(cfg.get("scale_presets", []))
    options = (
        "" if scale == [f"v10-{kind}", f"v15-{kind}"] else f" --set scale_presets={','.join(scale) or 'none'}"
    )
    meta = {
        "record": f"`docs/reproductions/data/{name}.json`",
        "rebuild": f"`python analyses/reproduce.py permutation --variant {variant}{options}` "
        "(add `--page-only` to redraw from the record)",
        "runs": f"`{cfg['runs']}/PRESET/seedN`, reused when complete",
    }
    if "published_schedule" in record:
        meta["published-schedule record (first table and headline)"] = (
            f"`docs/reproductions/data/{record['published_schedule']['file']}`"
        )
    return Report(TITLE, headline, meta, sections)


# -- set-up and published numbers
# ------------------------------------------------------------------------------
def _setup(record: dict[str, Any], published: dict[str, Any]) -> Section:
    """The set-up section: split, evaluation sizes and every hyperparameter beside the published one."""
    cfg = record["config"]
    s = Section("setup", "Set-up")
    share = record["task2"][0]["task"]["train_fraction"]
    s.lines.append(f"Train/test split of the permutations: {share:.0%} / {1 - share:.0%} of the mappings.")
    s.lines.append(
        f"Evaluation: {cfg['n_eval']} test sequences (test mappings only), analyses on "
        f"{cfg['n_analysis']}, evaluation seed {cfg['eval_seed']}: every model sees the same sequences."
    )
    epochs = {"task1": published["task1_epochs"], "task2": published["task2_epochs"]}
    rows = []
    for group, runs in (("task1", record["task1"]), ("task2", record["task2"]), ("scale", record["scale"])):
        for preset in dict.fromkeys(run["preset"] for run in runs):
            run = next(r for r in runs if r["preset"] == preset)
            m, t, task = run["model"], run["train"], run["task"]
            schedule = _schedule_name(t)
            rows.append(
                [
                    GROUPS.get(group, "larger V"),
                    f"`{preset}`",
                    ", ".join(str(r["seed"]) for r in runs if r["preset"] == preset),
                    task["vocab_size"],
                    task["repeat_ratio"],
                    m["d_model"],
                    m["n_heads"],
                    m["n_layers"],
                    m["d_mlp"],
                    t["steps"],
                    t["batch_size"],
                    t["steps"] * t["batch_size"] / task["epoch_size"],
                    f"{t['lr']:g}",
                    schedule,
                    epochs.get(group, "-"),
                ]
            )
    s.tables.append(
        Table(
            [
                "model",
                "preset",
                "seeds",
                "V",
                "repeat ratio",
                "d_model",
                "heads",
                "layers",
                "d_mlp",
                "steps",
                "batch",
                "epochs",
                "lr",
                "schedule",
                "published epochs",
            ],
            rows,
            caption=f"Models and training, from the run record (published lr {published['lr']:g}, "
            f"epochs of {published['epoch_size']} samples).",
            floatfmt=".1f",
        )
    )
    return s


def run_values(run: dict[str, Any], group: str) -> dict[str, float]:
    """One run's value of every published number of its model ("task1" or "task2"), by published.json key:
    the probes' median probe (the published ones are one probe sequence; the mean over probes in a record from
    before the median was kept), and the Bayes table's accuracy, MAE and max error per step (Task 1) or per
    last-step subgroup (Task 2)."""
    out = {
        f"{group}_probe_{a}_p": run["probe"].get(f"median_p_{a}", run["probe"][f"p_{a}"])
        for a in ("elimination", "recall")
    }
    rows = {r["step"]: r for r in run["bayes"]}
    v = max(int(step) for step in rows if step.isdigit())
    steps = {f"task1_step{k}": str(k) for k in range(1, v + 1)} if group == "task1" else {}
    steps |= {f"task2_{g}": f"{v} {g}" for g in ("elimination", "memorisation")} if group == "task2" else {}
    metrics = ("acc", "mae", "max_err")
    return out | {f"{key}_{m}": rows[step][m] for key, step in steps.items() for m in metrics}


def our_values(record: dict[str, Any]) -> dict[str, list[float]]:
    """Our value per seed of every published number the page compares, by its published.json key."""
    ours = {"elimination_floor": [record["floor"]]}
    for group in ("task1", "task2"):
        ours[f"{group}_plateau"] = [r["losses"]["train"] for r in record[group]]
        per_run = [run_values(r, group) for r in record[group]]
        ours |= {k: [values[k] for values in per_run] for k in per_run[0]}
    return ours


def published_rows(record: dict[str, Any], published: dict[str, Any]) -> list[list[Any]]:
    """Rows of the published-vs-ours table, one per published number the page compares (published.json's
    order): quantity, published value (every digit), its source, our mean, sd, our seeds' range, runs, whether
    our mean and whether one seed is within the tolerance."""
    ours = our_values(record)
    tol = published["seed_tolerance"]["value"]
    return [_row(entry["quantity"], entry, ours[k], tol) for k, entry in published.items() if k in ours]


def _span(values: list[float]) -> str:
    """The range of our seeds' values, "min .. max" to three decimals."""
    return f"{min(values):.3f} .. {max(values):.3f}"


def _row(name: str, entry: dict[str, Any], values: list[float], tolerance: float) -> list[Any]:
    """quantity, published, source, our mean, sd, our seeds' range, runs, and whether our mean and whether one
    of our seeds comes within `tolerance` of the published value (one run on the seed page)."""
    pub = entry["value"]
    mean_near = abs(mean(values) - pub) <= tolerance
    seed_near = min(abs(x - pub) for x in values) <= tolerance
    yes_no = ["yes" if near else "no" for near in (mean_near, seed_near)]
    return [name, f"{pub:g}", entry["source"], *_mean_and_sd(values), _span(values), len(values), *yes_no]


def comparison_tables(record: dict[str, Any], published: dict[str, Any]) -> list[Table]:
    """The published-schedule result beside the published values first; a record trained at another schedule
    below it as a sensitivity check (alone, labelled so, when no published-schedule record is attached)."""
    values = _values(published)
    tol = published["seed_tolerance"]["value"]
    headers = ["quantity", "published", "source", "ours (mean)", "sd", "our seeds", "runs"]
    headers += [f"mean within {tol:g}", f"a seed within {tol:g}"]
    if at_published_schedule(record, values):
        caption = f"**Published schedule** ({_published_schedule_text(values)}): mean and sd over seeds."
        return [Table(headers, published_rows(record, published), caption=caption)]
    tables = []
    attached = record.get("published_schedule")
    if attached:
        caption = (
            f"**Published schedule** ({_published_schedule_text(values)}; record `{attached['file']}`, the"
            f" page `{Path(attached['file']).stem}.md`): mean and sd over seeds."
        )
        tables.append(Table(headers, published_rows(attached["record"], published), caption=caption))
    caption = (
        "**Sensitivity check, not the published schedule**: this page's own runs"
        f" ({_sensitivity_text(record, values)}). Mean and sd over seeds; every section after this table"
        " shows these runs."
    )
    short = [row[:2] + row[3:] for row in published_rows(record, published)]
    tables.append(Table(headers[:2] + headers[3:], short, caption=caption))
    return tables


def _published(record: dict[str, Any], published: dict[str, Any]) -> Section:
    t1, t2 = record["task1"], record["task2"]
    s = Section("published", "Published vs ours")
    s.tables += comparison_tables(record, published)
    own = (
        ""
        if at_published_schedule(record, _values(published))
        else "This page's own runs (sensitivity check): "
    )
    s.lines.append(
        f"{own}Test-mapping loss: Task 1 {format_ms([r['losses']['test'] for r in t1])}, Task 2 "
        f"{format_ms([r['losses']['test'] for r in t2])}; Bayes-optimal loss on the same sequences: "
        f"{t1[0]['losses']['bayes_test']:.3f} (Task 1 data), {t2[0]['losses']['bayes_test']:.3f} "
        f"(Task 2 data); elimination floor {record['floor']:.4f}."
    )
    checks = (unsourced_line, accumulated_line, split_prior_line)
    s.lines += [line for line in (check(record, published) for check in checks) if line]
    s.lines += side_check_lines(record, published)
    plateaus = {"task1": published["task1_plateau"]["value"], "task2": published["task2_plateau"]["value"]}
    s.add_figure("losses", figures.plot_losses(record, plateaus))
    ours = our_values(first_record(record))
    points = [(_short(k), published[k]["value"], ours[k]) for k in published if k in ours]
    s.add_figure("agreement", figures.plot_agreement(points, published["seed_tolerance"]["value"]))
    return s


def _short(key: str) -> str:
    """A published.json key as a tick label: "task1_step2_max_err" -> "T1 step2 max err"."""
    return key.replace("task", "T").replace("_", " ")


# -- Bayes table and probe
# -------------------------------------------------------------------------------------
def _bayes_rows(runs: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for i, first in enumerate(runs[0]["bayes"]):
        col = {k: [run["bayes"][i][k] for run in runs] for k in first if k != "step"}
        rows.append(
            [
                first["step"],
                first["n"],
                format_ms(col["acc"]),
                first["bayes_acc"],
                format_ms(col["p_target"]),
                format_ms(col["mae"], ".4f"),
                format_ms(col["max_err"]),
                format_ms(col["loss"]),
                first["bayes_loss"],
            ]
        )
    return rows


def _max_err_lines(runs: list[dict[str, Any]]) -> list[str]:
    """How the memorisation subgroup's max err is made: one worst sequence, against the typical one."""
    rows = [
        r
        for run in runs
        for r in run["bayes"]
        if str(r["step"]).endswith("memorisation") and "seq_err_q" in r
    ]
    if not rows:
        return []
    q = [[r["seq_err_q"][i] for r in rows] for i in range(3)]
    return [
        (
            f"Task 2, memorisation subgroup ({rows[0]['n']} sequences per seed): `max err` is the largest"
            f" single entry over all of them, {format_ms([r['max_err'] for r in rows])};"
            f" each sequence's own largest entry has median {format_ms(q[0], '.4f')},"
            f" 90th percentile {format_ms(q[1], '.4f')} and 99th percentile {format_ms(q[2])}"
            " (mean ± sd over seeds)."
        )
    ]


def _bayes(record: dict[str, Any]) -> Section:
    s = Section("bayes", "1. Bayesian evaluation")
    headers = ["step", "n", "acc", "Bayes", "p(target)", "MAE", "max err", "loss", "Bayes loss"]
    for key, title in (
        ("task1", "Task 1 (test data without repeats)"),
        ("task2", "Task 2 (test data with repeats)"),
    ):
        s.tables.append(
            Table(headers, _bayes_rows(record[key]), caption=f"**{title}**, mean ± sd over seeds")
        )
    run = record["task2"][0]
    s.lines.append(
        f"Task 2 seed {run['seed']}, final answer: accuracy {final_acc(run, 'elimination'):.3f} "
        f"without a repeat and {final_acc(run, 'memorisation'):.3f} with one."
    )
    s.lines += _max_err_lines(record["task2"])
    s.add_figure("accuracy", figures.plot_bayes(record))
    return s


def _probe(record: dict[str, Any]) -> Section:
    s = Section("probe", "2. The probe")
    s.lines.append(f"{record['config']['n_eval']} probes per model.")
    keys = ["p_recall", "p_elimination", "median_p_recall", "median_p_elimination"]
    keys = [k for k in keys if k in record["task2"][0]["probe"]] + ["argmax_recall", "argmax_elimination"]
    rows = [[GROUPS[k], r["seed"], *(r["probe"][key] for key in keys)] for k in GROUPS for r in record[k]]
    headers = {"p_recall": "p(recall)", "p_elimination": "p(elimination)"}
    headers |= {f"median_{k}": f"median probe {v}" for k, v in headers.items()}
    headers |= {"argmax_recall": "argmax = recall", "argmax_elimination": "argmax = elimination"}
    s.tables.append(Table(["model", "seed", *(headers[k] for k in keys)], rows))
    s.add_figure("probe", figures.plot_probe(record))
    return s


# -- head roles
# --------------------------------------------------------------------------------------------------
EVIDENCE = ("transfer", "via_mlp", "attention", "damage")
"""Per-role evidence columns of the roles table, after each role's score and share."""


def roles_table(runs: list[dict[str, Any]], caption: str = "") -> Table:
    """One row per seed and head: label, each task role's score and share, then its raw evidence."""
    roles = runs[0]["roles"]["task_roles"]
    headers = ["seed", "head", "role"] + [f"{r} {k}" for r in roles for k in ("score", "share")]
    headers += [f"{r} {k.replace('_', ' ')}" for r in roles for k in EVIDENCE]
    rows = []
    for run in runs:
        for h in run["roles"]["heads"]:
            ev = h["evidence"]
            rows.append(
                [run["seed"], Head(h["layer"], h["head"]).name, f"**{h['role']}**"]
                + [ev.get(f"{r}_{k}", "-") for r in roles for k in ("score", "share")]
                + [ev.get(f"{r}_{k}", "-") for r in roles for k in EVIDENCE]
            )
    return Table(headers, rows, caption=caption)


def matching_x_attention(run: dict[str, Any]) -> tuple[list[list[float]], str]:
    """Last-x attention on the matching x per [layer][head], and what it measures.

    From `circuit_attention` (repeat sequences, mass on the matching x itself) when the record has it, else
    from the roles' recall_attention evidence (recall probes, mass on the matching x and its y).
    """
    if "circuit_attention" in run:
        return run["circuit_attention"]["match"], "circuit attention on the matching x"
    labels = run["roles"]["labels"]
    att = [[0.0] * len(layer) for layer in labels]
    for h in run["roles"]["heads"]:
        att[h["layer"]][h["head"]] = h["evidence"]["recall_attention"]
    return att, "recall_attention (matching x and its y)"


def hand_check(run: dict[str, Any]) -> list[Any]:
    """seed, the head whose last-x row puts the most mass on the matching x, that mass, the recall-labelled
    head(s), and whether the two agree."""
    att, source = matching_x_attention(run)
    cells = [(layer, head) for layer, row in enumerate(att) for head in range(len(row))]
    layer, head = max(cells, key=lambda cell: att[cell[0]][cell[1]])
    recall = [(h["layer"], h["head"]) for h in run["roles"]["heads"] if h["role"] == "recall"]
    names = ", ".join(Head(a, b).name for a, b in recall) or "none"
    return [
        run["seed"],
        Head(layer, head).name,
        att[layer][head],
        source,
        names,
        "yes" if recall == [(layer, head)] else "no",
    ]


def _roles(record: dict[str, Any]) -> Section:
    s = Section("roles", "3. Head roles, measured")
    groups = [(k, [r for r in record[k] if "roles" in r]) for k in GROUPS]
    groups = [(k, runs) for k, runs in groups if runs]
    if not groups:
        s.skipped = (
            "the record has no head-role measurements "
            "(run `analyses/reproduce.py permutation` to measure them)"
        )
        return s
    first = groups[0][1][0]["roles"]
    s.lines.append(
        f"Measured by `mechmem.analysis.roles.head_roles` on n={first['n']} sequences per probe, seed "
        f"{first['seed']}; mean-ablation reference: {first['reference']}."
    )
    s.tables.append(
        Table(
            ["threshold", "value"],
            [[k, v] for k, v in first["thresholds"].items()],
            caption="Thresholds (fixed before the runs; from the record)",
            floatfmt="g",
        )
    )
    if any(r["roles"]["thresholds"] != first["thresholds"] for _, runs in groups for r in runs):
        s.lines.append("The runs were classified with different thresholds; each run's are in the record.")
    for key, runs in groups:
        s.tables.append(roles_table(runs, f"**{GROUPS[key]}**: role and evidence per seed and head"))
        split = sum(
            sorted(lab for layer in r["roles"]["labels"] for lab in layer) == ["elimination", "recall"]
            for r in runs
        )
        s.lines.append(
            f"{GROUPS[key]}: exactly one recall and one elimination head on {split} of {len(runs)} "
            "seeds; labels per seed: "
            + "; ".join(f"seed {r['seed']}: {r['roles']['summary']}" for r in runs)
            + "."
        )
    runs = dict(groups).get("task2", [])
    if runs:
        checks = [hand_check(r) for r in runs]
        s.tables.append(
            Table(
                ["seed", "head most on matching x", "its attention", "measured as", "recall head", "agrees"],
                checks,
                caption="**Task 2 hand check, automated**",
            )
        )
        s.lines.append(
            f"Task 2: the head that sits on the matching x is the recall-labelled head on "
            f"{sum(c[-1] == 'yes' for c in checks)} of {len(checks)} seeds."
        )
    if any("attention_example" in r for r in runs):
        s.add_figure("attention", figures.plot_heads(record))
    return s


# -- FFN rescue and larger vocabularies
# ----------------------------------------------------------------------------
def _ablation(run: dict[str, Any], prefix: str, k: int) -> dict[str, Any]:
    return next(r for r in run["rescue"]["ablation"] if r["ablated"].startswith(prefix) and r["k"] == k)


def _neuron_row(run: dict[str, Any]) -> list[Any]:
    rk = run["rescue"]["ranking"]
    top, eff = rk["order"][0], rk["mean_effect"]
    positive = sum(max(e, 0.0) for e in eff)

    def pair(prefix: str, k: int) -> str:
        row = _ablation(run, prefix, k)
        return f"{row['recall_acc']:.3f} / {row['elimination_acc']:.3f}"

    return [
        run["seed"],
        top,
        eff[top],
        f"{max(eff[top], 0) / positive:.0%}" if positive else "-",
        run["rescue"]["ranking_elimination"]["mean_effect"][top],
        pair("none", 0),
        pair("top", 1),
        pair("top", 4),
        pair("random", 4),
    ]


def _rescue(record: dict[str, Any]) -> Section:
    s = Section("rescue", "4. The FFN rescue")
    runs = [r for r in record["task2"] if "rescue" in r]
    if not runs:
        s.skipped = "the record has no FFN-rescue measurements"
        return s
    lens = {
        stage: {k: [r["rescue"]["lens"][stage][k] for r in runs] for k in runs[0]["rescue"]["lens"][stage]}
        for stage in ("pre_ffn", "post_ffn")
    }
    s.tables.append(
        Table(
            ["stage", "recall acc", "recall p(correct)", "elimination acc", "elimination p(correct)"],
            [
                [stage.replace("_", "-")]
                + [format_ms(v[k]) for k in ("recall_acc", "recall_p", "elimination_acc", "elimination_p")]
                for stage, v in lens.items()
            ],
            caption="Logit lens at the last x, mean ± sd over seeds",
        )
    )
    s.tables.append(
        Table(
            [
                "seed",
                "top neuron",
                "its direct effect (recall)",
                "share of positive effect",
                "its direct effect (elimination)",
                "acc: none ablated",
                "top-1 ablated",
                "top-4 ablated",
                "4 random ablated",
            ],
            [_neuron_row(r) for r in runs],
            caption="Top recall neuron; accuracies are recall / elimination",
        )
    )

    def acc(prefix: str, k: int, group: str) -> str:
        return format_ms([_ablation(r, prefix, k)[group] for r in runs])

    s.lines.append(
        f"Right before the MLP: {format_ms(lens['pre_ffn']['recall_acc'])} of recall cases, "
        f"{format_ms(lens['pre_ffn']['elimination_acc'])} of elimination cases; after it: "
        f"{format_ms(lens['post_ffn']['recall_acc'])} and {format_ms(lens['post_ffn']['elimination_acc'])}."
    )
    s.lines.append(
        f"Recall / elimination accuracy with the top recall neuron zero-ablated: "
        f"{acc('top', 1, 'recall_acc')} / {acc('top', 1, 'elimination_acc')}; the top 4: "
        f"{acc('top', 4, 'recall_acc')} / {acc('top', 4, 'elimination_acc')}; 4 random neurons: "
        f"{acc('random', 4, 'recall_acc')} / {acc('random', 4, 'elimination_acc')}."
    )
    s.add_figure("neurons", figures.plot_rescue(record))
    return s


def _circuit_line(run: dict[str, Any]) -> str:
    ca, m = run["circuit_attention"], run["model"]
    prev = max(range(m["n_heads"]), key=lambda h: ca["previous_token"][0][h])
    last = m["n_layers"] - 1
    ind = max(range(m["n_heads"]), key=lambda h: ca["bound"][last][h])
    return (
        f"V={run['vocab_size']}: layer 0 head {prev} puts {ca['previous_token'][0][prev]:.2f} of each y's "
        f"attention on the x before it; at a repeated last x, layer {last} head {ind} puts "
        f"{ca['bound'][last][ind]:.2f} on the y after the matching x ({ca['match'][last][ind]:.2f} on the "
        f"matching x); layer {last} heads on that y: {', '.join(f'{b:.3f}' for b in ca['bound'][last])}, "
        f"on each other earlier y: {', '.join(f'{o:.3f}' for o in ca['other_y_each'][last])}."
    )


def _scale(record: dict[str, Any]) -> Section:
    from mechmem.tasks.permutation import elimination_floor

    s = Section("scale", "5. Larger vocabularies")
    rows = []
    for run in record["scale"]:
        m, v = run["model"], run["vocab_size"]
        rows.append(
            [
                f"`{run['preset']}`",
                v,
                f"d={m['d_model']}, {m['n_heads']} heads, {m['n_layers']} layers",
                run["history"][-1]["step"] if run["history"] else "-",
                run["losses"]["test"],
                run["losses"]["bayes_test"],
                elimination_floor(v),
                final_acc(run, "elimination"),
                final_acc(run, "memorisation"),
                mean(r["mae"] for r in run["bayes"][:v]),
                run["probe"]["p_recall"],
                run["probe"]["p_elimination"],
            ]
        )
        if run.get("circuit_attention") and m["n_layers"] > 1:
            s.lines.append(_circuit_line(run))
    s.tables.append(
        Table(
            [
                "preset",
                "V",
                "model",
                "steps",
                "test loss",
                "Bayes loss",
                "elim. floor",
                "final acc elim.",
                "final acc memo.",
                "mean MAE",
                "probe p(recall)",
                "probe p(elim.)",
            ],
            rows,
        )
    )
    if record["scale"]:
        presets = ", ".join(f"`{p}`" for p in dict.fromkeys(run["preset"] for run in record["scale"]))
        s.lines.insert(
            0,
            f"Built with the presets {presets}: sizes and schedules of our choosing. The seed text gives no"
            " model size or schedule for these experiments, so there is no published size to compare.",
        )
        s.add_figure("accuracy", figures.plot_scale(record))
    return s
