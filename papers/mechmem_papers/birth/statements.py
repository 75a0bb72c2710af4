"""The paper's statements judged on our runs, each by a rule (most fixed before the runs they judge).

The statements, their published values, rule texts and rule parameters live in a committed data file
(the package's `published.json`); this module holds one function per rule, keyed like the file.
A rule reads metric histories (lists of `metrics.jsonl` records, as stored in the run record) and returns the
numbers it compared, the outcome as shown on the page, and whether the statement holds. A rule whose runs are
missing from the record returns None: that statement is "not run". Rules rewritten after the first quick runs
keep their first versions (`FIRST_RULES`), evaluated too, so the page shows both outcomes.

The Section 3 accuracies (2 layers with fixed or random triggers, 1 layer) were first judged on the scale
ladder (`mechmem_papers.birth.scale`, rules in `birth_rules.json`: a statement held when some rung met its
band). `judge_as_written` judges the sentence as written instead ("over" as a strict bar, "around ... for one
layer" as one claim over both trigger types), each level on the fresh-sequence accuracy of the largest rung
run, with the measured spread as the margin and only where the curve has settled; the page shows the earlier
rules' and readings' outcomes beside it.
"""

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechmem_papers.birth.experiments import at_step, expand_history, final, first_step, late_rise

History = list[dict[str, Any]]


@dataclass(frozen=True)
class Context:
    """What the rules need besides the histories."""

    histories: dict[str, History]
    """Run name -> metric history."""
    freeze_step: int
    """Step until which the freezing runs hold their matrices."""
    n_tokens: int
    """Vocabulary size N (chance level of the W_O^2 probe is 1/N)."""
    shifted: dict[str, float]
    """Held-out accuracy on the other output distribution: "uniform_on_bigram", "bigram_on_uniform"."""
    ladder: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Statement key -> its climb of the scale ladder (`mechmem_papers.birth.scale.summarise`)."""

    def has(self, *names: str) -> bool:
        return all(name in self.histories for name in names)

    def acc(self, name: str) -> float:
        return final(self.histories[name], "eval_icl_acc")


Outcome = tuple[dict[str, Any], str, bool]
Rule = Callable[[Context, dict[str, Any]], Outcome | None]


def _two_layer(name: str) -> Rule:
    def rule(c: Context, p: dict[str, Any]) -> Outcome | None:
        if not c.has(name):
            return None
        v = c.acc(name)
        return {"acc": v}, f"{v:.3f}", v > p["threshold"]

    return rule


def one_layer(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("depth_1l_fixed", "depth_1l_random", "depth_2l_fixed", "depth_2l_random"):
        return None
    a, b = c.acc("depth_1l_fixed"), c.acc("depth_1l_random")
    two = min(c.acc("depth_2l_fixed"), c.acc("depth_2l_random"))
    return (
        {"fixed": a, "random": b, "two_layer_min": two},
        f"fixed {a:.3f}, random {b:.3f}",
        max(a, b) < two - p["margin"],
    )


def _ladder(key: str) -> Rule:
    def rule(c: Context, p: dict[str, Any]) -> Outcome | None:
        entry = c.ladder.get(key)
        if not entry or entry["outcome"] is None:
            return None
        o, z = entry["outcome"], entry["outcome"]["sizes"]
        shown = (
            f"{o['value']:.3f} at {o['rung']} (d={z['d_model']}, T={z['seq_len']}, batch {z['batch_size']}, "
            f"{z['steps']} steps)"
            + ("" if entry["status"] == "met" else f"; gap {o['gap']:.3f} ({entry['status']})")
        )
        return {"rung": o["rung"], "value": o["value"], "gap": o["gap"]}, shown, entry["status"] == "met"

    return rule


def wo2_alone(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("freeze_wk1_wk2", "freeze_none"):
        return None
    fs, h = c.freeze_step, c.histories
    v, joint = at_step(h["freeze_wk1_wk2"], "wo2_recall", fs), at_step(h["freeze_none"], "wo2_recall", fs)
    holds = v >= p["fraction"] * joint and v >= p["chance_multiple"] / c.n_tokens
    return {"alone": v, "joint": joint}, f"{v:.3f} vs {joint:.3f}", holds


def wo2_alone_first(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("freeze_wk1_wk2"):
        return None
    v = at_step(c.histories["freeze_wk1_wk2"], "wo2_recall", c.freeze_step)
    return {"alone": v}, f"{v:.3f}", v >= p["threshold"]


def kq_wait_for_wo2(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("freeze_wo2", "freeze_none"):
        return None
    fs, h = c.freeze_step, c.histories
    a, b = at_step(h["freeze_wo2"], "icl_acc", fs), at_step(h["freeze_none"], "icl_acc", fs)
    return {"wo2_frozen": a, "joint": b}, f"{a:.3f} vs {b:.3f}", a < p["fraction"] * b


def _frozen_pair(first_key: str, second_key: str) -> Rule:
    def rule(c: Context, p: dict[str, Any]) -> Outcome | None:
        if not c.has("freeze_wk1", "freeze_wk2"):
            return None
        fs, h = c.freeze_step, c.histories
        a, b = at_step(h["freeze_wk1"], first_key, fs), at_step(h["freeze_wk2"], second_key, fs)
        return {"wk1_frozen": a, "wk2_frozen": b}, f"{a:.3f} vs {b:.3f}", a > b

    return rule


def wk1_early_first(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("freeze_none"):
        return None
    early = first_step(c.histories["freeze_none"], "wk1_recall_64", p["threshold"])
    late = first_step(c.histories["freeze_none"], "wk1_recall", p["threshold"])
    return (
        {"first_64": early, "all": late},
        f"{early} vs {late}",
        early is not None and (late is None or early < late),
    )


def fewer_triggers_slower(c: Context, p: dict[str, Any]) -> Outcome | None:
    runs = {"K=1": "data_k1_fixed", "K=3": "data_k3_fixed", "K=5": "freeze_none"}
    if not c.has(*runs.values()):
        return None
    steps = {k: first_step(c.histories[name], "eval_icl_acc", p["threshold"]) for k, name in runs.items()}
    order = [math.inf if v is None else v for v in steps.values()]
    shown = ", ".join(f"{k}: {v}" for k, v in steps.items())
    return steps, shown, order[0] >= order[1] >= order[2]


def random_slower(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("data_k5_random", "freeze_none"):
        return None
    rand, fix = (
        first_step(c.histories[n], "eval_icl_acc", p["threshold"]) for n in ("data_k5_random", "freeze_none")
    )
    return (
        {"random": rand, "fixed": fix},
        f"random {rand} vs fixed {fix}",
        fix is not None and (rand is None or rand > fix),
    )


def bigram_ood(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not (c.shifted and c.has("freeze_none", "data_k5_bigram")):
        return None
    bb, bu = c.acc("data_k5_bigram"), c.shifted["bigram_on_uniform"]
    uu, ub = c.acc("freeze_none"), c.shifted["uniform_on_bigram"]
    shown = f"bigram-trained {bb:.3f} -> {bu:.3f}; uniform-trained {uu:.3f} -> {ub:.3f}"
    values = {"bigram_trained": bb, "bigram_on_uniform": bu, "uniform_trained": uu, "uniform_on_bigram": ub}
    return values, shown, bu < bb - p["margin"] and ub > uu - p["margin"]


def global_before_induction(c: Context, p: dict[str, Any]) -> Outcome | None:
    if not c.has("ffn_joint"):
        return None
    hist = c.histories["ffn_joint"]
    g0, g1 = at_step(hist, "global_loss", 0), final(hist, "global_loss")
    t_global = first_step(hist, "global_loss", g1 + p["remaining"] * (g0 - g1), below=True)
    t_icl = first_step(hist, "icl_acc", p["reach"] * final(hist, "icl_acc"))
    holds = t_global is not None and t_icl is not None and t_global < t_icl
    return {"global_step": t_global, "icl_step": t_icl}, f"{t_global} vs {t_icl}", holds


LADDER_KEYS = ("two_layer_fixed", "two_layer_random", "one_layer_random", "one_layer_fixed")
"""Statements judged on the scale ladder."""
RULES: dict[str, Rule] = {
    **{key: _ladder(key) for key in LADDER_KEYS},
    "wo2_alone": wo2_alone,
    "kq_wait_for_wo2": kq_wait_for_wo2,
    "wk2_before_wk1": _frozen_pair("wk2_recall", "wk1_recall_64"),
    "wk1_early_first": wk1_early_first,
    "fewer_triggers_slower": fewer_triggers_slower,
    "random_slower": random_slower,
    "bigram_ood": bigram_ood,
    "global_before_induction": global_before_induction,
}
"""The current rule of every statement in the data file."""
FIRST_RULES: dict[str, Rule] = {
    "wo2_alone": wo2_alone_first,
    "wk2_before_wk1": _frozen_pair("icl_acc", "icl_acc"),
    "two_layer_fixed": _two_layer("depth_2l_fixed"),
    "two_layer_random": _two_layer("depth_2l_random"),
    "one_layer_random": one_layer,
    "one_layer_fixed": one_layer,
}
"""The first rule of the statements whose rule was rewritten after the first quick runs (for the ladder
statements: the rules judged on the quick suite's depth runs, replaced by the ladder's rules)."""


PUBLISHED = Path(__file__).with_name("published.json")
"""The published-values file, read relative to this package."""


def load_published(path: str | Path = PUBLISHED) -> dict[str, Any]:
    """The published-values file; every statement in it must have a rule here (and the reverse)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    keys = [s["key"] for s in data["statements"]]
    if sorted(keys) != sorted(RULES) or any(k not in keys for k in FIRST_RULES):
        raise ValueError(f"{path}: statements {sorted(keys)} do not match the rules {sorted(RULES)}")
    return data


def _judge(rule: Rule, context: Context, params: dict[str, Any]) -> dict[str, Any]:
    result = rule(context, params)
    if result is None:
        return {"values": None, "outcome": None, "holds": None}
    values, outcome, holds = result
    return {"values": values, "outcome": outcome, "holds": bool(holds)}


def judge(published: dict[str, Any], context: Context) -> list[dict[str, Any]]:
    """Every statement of `published` with its rule (text filled in with its parameters) and our outcome.

    Returns dicts with the file's fields plus "rule" (formatted), "values", "outcome" (as shown; None when the
    runs it needs are not in the record), "holds" (bool or None) and, for rewritten rules, "first" (the same
    for the first rule).
    """
    out = []
    for statement in published["statements"]:
        key, params = statement["key"], statement["params"]
        shown = {**params, "text": context.ladder[key]["text"]} if key in context.ladder else params
        rule_text = statement["rule"].format_map({"text": "(no ladder in this record)", **shown})
        row = {**statement, "rule": rule_text, **_judge(RULES[key], context, params)}
        if "first_rule" in statement:
            first = statement["first_rule"]
            row["first_rule"] = {
                **first,
                "rule": first["rule"].format(**first["params"]),
                **_judge(FIRST_RULES[key], context, first["params"]),
            }
        out.append(row)
    return out


def record_context(record: dict[str, Any], ladder: dict[str, dict[str, Any]]) -> Context:
    """The `Context` of a run record (histories, freeze step, N, shifted outputs) with a ladder summary."""
    histories = {name: expand_history(e["history"]) for name, e in record["runs"].items()}
    return Context(histories, record["scale"]["freeze_step"], record["n_tokens"], record["shifted"], ladder)


# -- Section 3 as written: the two-layer bars and the one-layer level, each claim once
# ----------------------------------------------------------------------------------------------------------
WITHIN_SPREAD = "within spread"
"""The verdict of a value closer to its claim's decision boundary than the measurement spread."""
NOT_SETTLED = "not settled"
"""The verdict of a cell whose curve still moved by more than the margin when it stopped: no plateau yet."""


def plateau(curve: list[float | None], k: int) -> float:
    """Mean of the last `k` logged values of a curve (missing points skipped): the level a run settled at."""
    values = [v for v in curve if v is not None][-k:]
    if not values:
        raise ValueError("the curve has no values")
    return sum(values) / len(values)


def level_verdict(claim: dict[str, Any], value: float, margin: float) -> str:
    """ "holds", "fails" or `WITHIN_SPREAD` for one value of a level claim, `margin` from each boundary.

    "above" claims (over t): holds above t + margin, fails below t - margin. "around" claims (target +-
    tolerance): holds within tolerance - margin of the target, fails beyond tolerance + margin.
    """
    if claim["kind"] == "above":
        distance = value - claim["threshold"]
    elif claim["kind"] == "around":
        distance = claim["tolerance"] - abs(value - claim["target"])
    else:
        raise ValueError(f"unknown claim kind {claim['kind']!r}")
    return "holds" if distance > margin else "fails" if distance < -margin else WITHIN_SPREAD


def settled_verdict(claim: dict[str, Any], verdict: str, rise: float | None, margin: float) -> str:
    """`verdict` of a level claim, or `NOT_SETTLED` when the curve still moved by more than `margin` over its
    last quarter (`late_rise`) and that movement could change the verdict.

    A rising curve already above an "above" claim's bar by more than the margin only moves further above it,
    so that pass stands; every other verdict on a curve without a plateau waits for one.
    """
    if rise is None or abs(rise) <= margin:
        return verdict
    if claim["kind"] == "above" and verdict == "holds" and rise > 0:
        return verdict
    return NOT_SETTLED


def _combined(verdicts: list[str]) -> str:
    if "fails" in verdicts:
        return "fails"
    if NOT_SETTLED in verdicts:
        return NOT_SETTLED
    return "holds" if all(v == "holds" for v in verdicts) else WITHIN_SPREAD


def judge_as_written(
    section3: dict[str, Any],
    rungs: list[dict[str, Any]],
    cell: Callable[[str, dict[str, Any]], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """Each Section 3 claim (`section3_as_written` of the published file) judged on the ladder's plateaus.

    `rungs` are the ladder's rungs in order; `cell(rung name, model)` is that cell's seed-0 record or None.

    A cell is judged at the largest rung it ran (seed 0), on its final in-context accuracy over fresh
    sequences (the metric the ladder's rules state), and only if its held-out curve has settled there
    (`settled_verdict`: a curve that still rises through a band does not pass by reaching it); a claim over
    several cells holds if every cell holds and fails if any fails. The curve's `plateau` (the same held-out
    sequences at every point) is judged beside it, the reading the page used first. Returns dicts with the
    claim's fields plus "cells" (rung, sizes, value, curve plateau, late rise, verdict, "plateau_only" the
    verdict without the settled check, and "curve_verdict"), "verdict", "verdict_plateau_only" and
    "verdict_curve" (None when a cell has no ladder record).
    """
    k, margin = section3["plateau_k"], section3["margin"]
    out = []
    for claim in section3["claims"]:
        cells = []
        for model in claim["cells"]:
            ran = [r for r in rungs if cell(r["name"], model) is not None]
            if not ran:
                cells.append(None)
                continue
            rung = ran[-1]
            rec = cell(rung["name"], model)
            curve = rec["curve"]["eval_icl_acc"]
            value, on_curve, rise = rec["final"]["icl_acc"], plateau(curve, k), late_rise(curve)
            first = level_verdict(claim, value, margin)
            cells.append({
                "model": model, "rung": rung["name"], "value": value, "curve_plateau": on_curve,
                "sizes": {key: rung[key] for key in ("d_model", "seq_len", "batch_size", "steps")},
                "late_rise": rise, "plateau_only": first,
                "verdict": settled_verdict(claim, first, rise, margin),
                "curve_verdict": settled_verdict(claim, level_verdict(claim, on_curve, margin), rise, margin),
            })  # fmt: skip
        done = [c for c in cells if c is not None]
        complete = done and len(done) == len(cells)

        keys = ("verdict", "plateau_only", "curve_verdict")
        v = {key: _combined([c[key] for c in done]) if complete else None for key in keys}
        out.append({
            **claim, "cells": done, "verdict": v["verdict"], "verdict_plateau_only": v["plateau_only"],
            "verdict_curve": v["curve_verdict"],
        })  # fmt: skip
    return out
