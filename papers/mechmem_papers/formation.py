"""The formation findings on the reproduction pages: a "Formation" section built from the committed
formation data alone (docs/record/data/2026-12-07-formation.json, written by `benchmarks/formation.py`; the
rules are in docs/record/2026-12-07-formation.md, the papers' words in the pages' prose files).

Birth: with the previous-token head's output zeroed while training, does an induction head form (F1); in which
order do the memory probes reach their level (F2); Singh et al.'s (2024) clamp of the previous-token attention
and a knock-out until a step, against the phase change of the control (F5). Permutation: does a recall or
elimination head form with the other head zeroed (F3); does a recall head form on Task 1 data (F4).

Every judgement applies the rule the record states before its runs to the numbers read here; nothing in this
module is a result.
"""

import json
from pathlib import Path
from typing import Any

from mechmem.analysis.roles import RoleThresholds
from mechmem.report.document import Section, Table

FORMATION_DATA = (
    Path(__file__).resolve().parents[2] / "docs" / "record" / "data" / "2026-12-07-formation.json"
)
"""The committed formation data (absent from an installed copy of the papers: the section then says so)."""
RECORD_LINK = "../record/2026-12-07-formation.md"
FIGURE_LINK = "../figures/formation_f5.png"
"""Links from a page in docs/reproductions/ to the record and to its F5 figure."""
SEEDS = ("0", "1", "2")
F5_KINDS = ("birth-ctl", "birth-pt", "birth-ko150")
F5_LABELS = {
    "birth-ctl": "control",
    "birth-pt": "perfect previous-token pattern, whole run (their clamp)",
    "birth-ko150": "L0H0 zeroed until step {until}",
}
PROBES = {"wo2_recall": "W_O^2", "wk2_recall": "W_K^2", "wk1_recall": "W_K^1"}


def attach_formation(record: dict[str, Any], path: Path = FORMATION_DATA) -> dict[str, Any]:
    """`record` with "formation" (the data file's path in the repository and its content) when the file is
    there; else `record` as it is. Read when a page is built, never written into its record."""
    if not Path(path).exists():
        return record
    return {
        **record,
        "formation": {"file": f"docs/record/data/{Path(path).name}", **json.loads(path.read_text())},
    }


def _missing(record: dict[str, Any]) -> Section | None:
    if "formation" in record:
        return None
    section = Section("formation", "Formation: watching the circuit form")
    section.skipped = f"the formation data ({FORMATION_DATA.name}) is not beside this page"
    return section


def _roles(run: dict[str, Any]) -> str:
    return ", ".join(f"{h} {r['role']}" for h, r in run["heads"].items())


def _step(event: dict[str, Any] | None) -> str:
    if not event or not event.get("reached"):
        return "not reached"
    low, high = event["interval"]
    return f"{event['step']:.0f} [{low}, {high}]"


def _shift(run: dict[str, Any], control: dict[str, Any]) -> str:
    """run - control phase change step, with the bounds its two bracketing intervals allow."""
    if not (run["reached"] and control["reached"]):
        return "n/a"
    (a0, a1), (c0, c1) = run["interval"], control["interval"]
    return f"{run['step'] - control['step']:+.0f} [{a0 - c1:+d}, {a1 - c0:+d}]"


def knockout_until(f5: dict[str, Any]) -> int | None:
    """The knock-out's `intervene_until` (its run's train config), None if absent."""
    return f5.get("birth-ko150-0", {}).get("intervene_until")


def f5_verdicts(f5: dict[str, Any], until: int) -> dict[str, dict[str, str]]:
    """F5's rule per seed: the clamp "earlier" when its phase change interval ends at or before the start of
    the control's; the knock-out "delays" when its interval starts at or after the control's end ("delays past
    T" when at or after T), "prevents" when never reached."""
    out = {}
    for s in SEEDS:
        ctl, pt, ko = (f5[f"{k}-{s}"]["acc_event"] for k in F5_KINDS)
        if not ctl["reached"]:
            out[s] = {"clamp": "no control phase change", "knockout": "no control phase change"}
            continue
        c0, c1 = ctl["interval"]
        if not pt["reached"]:
            clamp = "prevents"
        else:
            clamp = "earlier" if pt["interval"][1] <= c0 else ("later" if pt["interval"][0] >= c1 else "same")
        if not ko["reached"]:
            knock = "prevents"
        elif ko["interval"][0] >= c1:
            knock = "delays past T" if ko["interval"][0] >= until else "delays"
        else:
            knock = "not delayed"
        out[s] = {"clamp": clamp, "knockout": knock}
    return out


def memory_order(order: dict[str, Any]) -> str:
    """F2's rule: "as the paper says" when W_O^2 <= W_K^2 <= W_K^1 with one strict (not reached = never),
    "tied" when all three are reached within one save interval, else "other order"."""
    inf = float("inf")
    steps = [order["events"][k] if order["events"][k] is not None else inf for k in PROBES]
    save = order["steps"][1] - order["steps"][0]
    if inf not in steps and max(steps) - min(steps) <= save:
        return "tied"
    if steps[0] <= steps[1] <= steps[2] and steps[0] < steps[2]:
        return "as the paper says"
    return "other order"


def birth_section(record: dict[str, Any]) -> Section:
    """F1, F2 and F5 on the Birth page."""
    if missing := _missing(record):
        return missing
    data = record["formation"]
    runs, f5 = data["runs"], data.get("f5", {})
    s = Section("formation", "Formation: watching the circuit form")
    s.lines.append(
        f"From `{data['file']}` (`{data['command']}`; rules and runs in "
        f"[the formation record]({RECORD_LINK})). Preset `demo` (2 layers x 1 head, 400 steps), seeds 0-2; "
        "roles from the role step on the final checkpoint; scores with the corrected lower end of their 95% "
        "interval."
    )
    formed = {
        k: sum(runs[f"{k}-{s}"]["heads"]["L1H0"]["role"] == "induction" for s in SEEDS)
        for k in ("birth-ctl", "birth-iv")
    }
    s.lines.append(
        "**F1, previous-token head zeroed for the whole run (`L0H0=zero`):** an induction head (L1H0) forms "
        f"in {formed['birth-ctl']} of {len(SEEDS)} control runs and in {formed['birth-iv']} of {len(SEEDS)} "
        "zeroed runs (first table)."
    )
    rows = []
    for seed in SEEDS:
        ctl, iv = runs[f"birth-ctl-{seed}"], runs[f"birth-iv-{seed}"]
        ev = [r["heads"]["L1H0"]["evidence"] for r in (ctl, iv)]
        last = {r["curve"]: r for r in data["compare"][seed]["last"]}
        loss = last["circuit.restricted_loss"]
        rows.append([
            seed, _roles(ctl), _roles(iv),
            " / ".join(f"{e['induction']:.3f} (lower {e['induction_lower']:.3f})" for e in ev),
            " / ".join(f"{r['metrics']['eval_icl_acc']:.3f}" for r in (ctl, iv)),
            f"{loss['difference']:+.2f} [{loss['lower']:+.2f}, {loss['upper']:+.2f}]",
        ])  # fmt: skip
    headers = ["seed", "control: roles", "zeroed: roles", "L1H0 induction, control / zeroed",
               "ICL acc, control / zeroed", "restricted loss, zeroed - control, end [95%]"]  # fmt: skip
    s.tables.append(Table(headers, rows, caption=data["compare"]["0"]["interval"]))
    verdicts = {seed: memory_order(data["order"][seed]) for seed in SEEDS}
    paper = sum(v == "as the paper says" for v in verdicts.values())
    s.lines.append(
        "**F2, memory order (control runs):** W_O^2 <= W_K^2 <= W_K^1 as the paper's account has it in "
        f"{paper} of {len(SEEDS)} seeds. Second table: the step at which each probe reaches the dynamics' "
        f"level (saves every {data['order']['0']['steps'][1] - data['order']['0']['steps'][0]} steps)."
    )
    rows = []
    for seed in SEEDS:
        o = data["order"][seed]
        cells = [
            f"{o['events'][k]:.0f}"
            if o["events"][k] is not None
            else f"not reached (ends at {o['curves'][k][-1]:.2f})"
            for k in PROBES
        ]
        rows.append([seed, *cells, verdicts[seed]])
    s.tables.append(Table(["seed", *PROBES.values(), "order"], rows))
    if f5:
        until = knockout_until(f5)
        v = f5_verdicts(f5, until)
        earlier = sum(x["clamp"] == "earlier" for x in v.values())
        delayed = sum(x["knockout"].startswith("delays") for x in v.values())
        s.lines.append(
            "**F5, Singh et al. 2024's clamp:** with layer 0's attention clamped to the perfect "
            "previous-token pattern for the whole run, the phase change comes earlier than the control's "
            f"in {earlier} of {len(SEEDS)} seeds; with the layer-0 head zeroed until step {until}, it is "
            f"delayed in {delayed} of {len(SEEDS)}. Phase change: the step where the trainer's own ICL "
            "accuracy (under the clamp while it is on) reaches 0.5, [the pair of evaluations that brackets "
            "it]; the loss's steepest fall beside it (third table). "
            f"Figure (drawn from the data by `benchmarks/formation.py --figure-only`): ![F5]({FIGURE_LINK})"
        )
        rows = []
        for seed in SEEDS:
            of_seed = [f5[f"{k}-{seed}"] for k in F5_KINDS]
            cells = [f"{_step(r['acc_event'])}; fall {_step(r['loss_event'])}" for r in of_seed]
            ctl, pt, ko = (r["acc_event"] for r in of_seed)
            verdict = v[seed]
            rows.append([seed, *cells, f"{_shift(pt, ctl)}: {verdict['clamp']}",
                         f"{_shift(ko, ctl)}: {verdict['knockout']}"])  # fmt: skip
        labels = [F5_LABELS[k].format(until=until) for k in F5_KINDS]
        headers = ["seed", *labels, "clamp - control [bounds]: rule", "knock-out - control [bounds]: rule"]
        s.tables.append(Table(headers, rows))
    return s


def permutation_section(record: dict[str, Any]) -> Section:
    """F3 and F4 on the permutation pages."""
    if missing := _missing(record):
        return missing
    data = record["formation"]
    runs = data["runs"]
    s = Section("formation", "Formation: does the recall head need the data, or the other head?")
    s.lines.append(
        f"From `{data['file']}` (`{data['command']}`; rules and runs in "
        f"[the formation record]({RECORD_LINK})). Roles from the role step on the final checkpoint, read "
        "without the intervention; scores are the role step's recall and elimination scores (units of "
        "p(answer))."
    )
    rows, kept = [], {"recall": 0, "elimination": 0}
    for seed in SEEDS:
        cells = [seed]
        for kind, wanted in (("t2-ctl", None), ("t2-noelim", "recall"), ("t2-norecall", "elimination")):
            run = runs[f"{kind}-{seed}"]
            heads = run["heads"]
            text = "; ".join(
                f"{h} {r['role']} (recall {r['evidence']['recall_score']:.2f}, "
                f"elim. {r['evidence']['elimination_score']:.2f})"
                for h, r in heads.items()
            )
            if wanted:
                zeroed = run["trained_under"][0].split("=")[0]
                (other,) = [h for h in heads if h != zeroed]
                kept[wanted] += heads[other]["role"] == wanted
                text += f"; {zeroed} zeroed"
            cells.append(f"{text}; acc {run['metrics']['test_final_acc']:.3f}")
        rows.append(cells)
    s.lines.append(
        "**F3, Task 2 with one head zeroed for the whole run:** with the elimination head zeroed, the "
        f"remaining head is named recall in {kept['recall']} of {len(SEEDS)} seeds; with the recall head "
        f"zeroed, the remaining head is named elimination in {kept['elimination']} of {len(SEEDS)} (first "
        "table)."
    )
    s.tables.append(Table(["seed", "control", "elimination head zeroed", "recall head zeroed"], rows))
    threshold = RoleThresholds().min_score
    rows, below = [], 0
    for seed in SEEDS:
        t1, t2 = data["recall"][f"t1-{seed}"], data["recall"][f"t2-{seed}"]
        recall_curves = [c for name, c in t1["curves"].items() if name.endswith("recall_score")]
        t1_max = max(v for c in recall_curves for v in c if v is not None)
        roles1 = {h: r["role"] for h, r in runs[f"t1-ctl-{seed}"]["heads"].items()}
        below += t1_max < threshold and "recall" not in roles1.values()
        head = next(h for h, r in runs[f"t2-ctl-{seed}"]["heads"].items() if r["role"] == "recall")
        curve = t2["curves"][f"{head}.recall_score"]
        rise = f"{head}: {curve[0]:.2f} at step {t2['steps'][0]} -> {curve[-1]:.2f} at {t2['steps'][-1]}"
        rows.append([seed, f"{t1_max:.3f}", ", ".join(f"{h} {r}" for h, r in roles1.items()), rise])
    s.lines.append(
        "**F4, Task 1 data (no repeats):** the recall score stays below the role threshold "
        f"({threshold:g}) at every checkpoint and no head is named recall in {below} of {len(SEEDS)} seeds; "
        "on Task 2 data each control's recall head's score rises over training (second table)."
    )
    headers = ["seed", "Task 1: highest recall score over checkpoints", "Task 1: final roles",
               "Task 2 control: recall head's score, first -> last save"]  # fmt: skip
    s.tables.append(Table(headers, rows))
    return s


def plot_f5(f5: dict[str, Any]) -> Any:
    """F5 side by side: ICL loss and accuracy over training (the trainer's evaluation), one colour per
    condition, one line per seed, dots where the accuracy reaches 0.5; dotted: the knock-out's end."""
    import math

    from mechmem.plotting import plt

    until = knockout_until(f5)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    colors = {"birth-ctl": "black", "birth-pt": "tab:orange", "birth-ko150": "tab:red"}
    for kind in F5_KINDS:
        for i, seed in enumerate(SEEDS):
            run = f5[f"{kind}-{seed}"]
            label = F5_LABELS[kind].format(until=until) if i == 0 else None
            for ax, key in zip(axes, ("loss", "acc")):
                ax.plot(run["steps"], run[key], color=colors[kind], lw=1.5, alpha=0.85, label=label)
            if run["acc_event"]["reached"]:
                axes[1].plot([run["acc_event"]["step"]], [0.5], "o", color=colors[kind], ms=4)
    for ax in axes:
        if until is not None:
            ax.axvline(until, color="tab:red", ls=":", lw=1)
        ax.set_xlabel("training step")
    axes[0].axhline(math.log(2), color="grey", ls="--", lw=1)
    axes[0].set_ylabel("ICL loss (trainer's evaluation)")
    axes[1].axhline(0.5, color="grey", ls="--", lw=1)
    axes[1].set_ylabel("ICL accuracy (dots: reaches 0.5)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Birth demo, seeds 0-2: layer 0 clamped while training")
    fig.tight_layout()
    return fig
