"""The scale ladder of the Section 3 accuracies: the smallest configuration that reproduces each one.

Bietti et al. (2023, Section 3) report the in-context accuracy of a full ("vanilla") transformer: over 99%
with 2 layers and fixed triggers, about 95% with random triggers, around 55% with one layer. The paper's sizes
(d=128, T=256, batch 512) are far beyond a 2-core CPU, so each statement climbs a ladder of configurations,
cheapest first, and stops at the first rung whose run meets the statement's rule. The rules, the metric and
the rungs live in a committed data file (`docs/reproductions/data/birth_rules.json`), committed before any
run; the runs go to `docs/reproductions/data/birth_scale.jsonl`, one line per cell ({"key": ..., "record":
...}), and resume from it.

A cell is one training run: `train_cell(**kwargs)` returns a JSON record with the configuration, seed,
wall-clock time, the final in-context accuracy on fresh sequences (the metric of the rules) and subsampled
metric curves. `run_ladder` climbs; `summarise` turns the rules and the records into what the page shows.

    python -m mechmem_papers.birth.scripts.scale --statements two_layer_fixed,one_layer_random --max-rung R2
"""

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mechmem.models.parts import model_device
from mechmem.models.transformer import build_transformer
from mechmem.tasks import build_task
from mechmem.tasks.birth.models import full_config
from mechmem.tasks.birth.task import N_TOKENS, BirthConfig
from mechmem.training import TrainConfig, train
from mechmem_papers.birth.experiments import late_rise
from mechmem_papers.birth.statements import judge, load_published, record_context
from mechmem_papers.executor import Cell, load_records, run_cells, software

DATA = Path("docs/reproductions/data")
RULES_FILE = DATA / "birth_rules.json"
RECORDS_FILE = DATA / "birth_scale.jsonl"
CURVE_KEYS = ("icl_acc", "eval_icl_acc", "eval_first_acc", "eval_global_loss")


def load_rules(path: str | Path = RULES_FILE) -> dict[str, Any]:
    """The committed rules-and-ladder file."""
    return json.loads(Path(path).read_text())


@torch.no_grad()
def final_accuracy(model: torch.nn.Module, task: Any, n: int, seed: int, chunk: int = 128) -> dict[str, Any]:
    """The rules' metric: `BirthTask.batch_metrics` over `n` fresh sequences (generator seed 1000 + seed).

    With the number of in-context positions it averages over.
    """
    batch = task.eval_batch(n, generator=torch.Generator().manual_seed(1000 + seed))
    device = model_device(model)
    logits = torch.cat([model(batch.tokens[i : i + chunk].to(device)).cpu() for i in range(0, n, chunk)])
    out = task.batch_metrics(logits, batch)
    out["n_icl_positions"] = int((batch.info["counter"] >= 2).sum())
    out["n_sequences"] = n
    return out


def train_cell(
    *,
    n_layers: int,
    fixed_triggers: bool,
    d_model: int,
    seq_len: int,
    batch_size: int,
    steps: int,
    seed: int = 0,
    lr: float = 0.2,
    curve_points: int = 40,
    curve_sequences: int = 128,
    final_sequences: int = 1024,
    device: str = "cpu",
) -> dict[str, Any]:
    """Train one full transformer on K=5 triggered bigrams and return its JSON record (`device`: where it
    trains; the data are drawn on the CPU either way, so a seed gives the same batches everywhere)."""
    config = {k: v for k, v in locals().items() if k != "device"}
    model_cfg = full_config(d_vocab=N_TOKENS, n_ctx=seq_len, n_layers=n_layers, d_model=d_model)
    task = build_task(
        "birth", BirthConfig(seq_len=seq_len, fixed_triggers=fixed_triggers, head_only_loss=False)
    )
    train_cfg = TrainConfig(
        steps=steps, batch_size=batch_size, lr=lr, optimizer="sgd", momentum=0.9, weight_decay=1e-4,
        eval_every=max(1, steps // curve_points), eval_samples=curve_sequences, seed=seed,
    )  # fmt: skip
    load = os.getloadavg()[0]
    start = time.perf_counter()
    model = build_transformer(model_cfg, generator=torch.Generator().manual_seed(seed))
    result = train(model, task, train_cfg, model_config=model_cfg, progress=False, device=device)
    measured = final_accuracy(result.model, task, final_sequences, seed)
    curve = {k: [_round(rec.get(k)) for rec in result.history] for k in ("step", *CURVE_KEYS)}
    return {
        "config": config,
        "final": {k: _round(v) for k, v in measured.items()},
        "wall_s": round(time.perf_counter() - start, 1),
        "machine": f"{os.cpu_count()} CPU cores, {torch.get_num_threads()} torch thread(s), "
        f"load average {load:.1f} at start"
        + (f", trained on {torch.cuda.get_device_name(device)}" if device.startswith("cuda") else ""),
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "software": software(),
        "curve": curve,
    }


def _round(value: Any, digits: int = 5) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, digits)
    return value


def cell_key(rung: str, model: dict[str, Any], seed: int = 0) -> str:
    """E.g. "R1/2l_fixed" (seed 0, the seed the rules judge) or "R1/2l_fixed/seed1" (the seed check)."""
    key = f"{rung}/{model['n_layers']}l_{'fixed' if model['fixed_triggers'] else 'random'}"
    return key if seed == 0 else f"{key}/seed{seed}"


def make_cell(
    rules: dict[str, Any], rung: dict[str, Any], model: dict[str, Any], seed: int = 0, device: str = "cpu"
) -> Cell:
    """The cell of `model` (a statement's {"n_layers", "fixed_triggers"}) at `rung`, trained on `device`."""
    ladder = rules["ladder"]
    sizes = {k: rung[k] for k in ("d_model", "seq_len", "batch_size", "steps")}
    kwargs = {**model, **sizes, "seed": seed, "curve_points": ladder["curve_points"],
              "curve_sequences": ladder["curve_sequences"],
              "final_sequences": rules["metric"]["final_sequences"], "device": device}  # fmt: skip
    return Cell(cell_key(rung["name"], model, seed), train_cell, kwargs)


def run_rung(
    rules: dict[str, Any],
    records: Path,
    rung_name: str,
    *,
    statements: list[str] | None = None,
    device: str = "cpu",
    log: Callable[[str], None] = print,
    executor: str = "local",
    address: str | None = None,
) -> dict[str, float]:
    """Every statement (or those in `statements`) at one rung, whatever the climb decided (a level claim is
    judged at the paper's sizes too); statement -> its in-context accuracy."""
    rung = next(r for r in rules["ladder"]["rungs"] if r["name"] == rung_name)
    chosen = [s for s in rules["statements"] if statements is None or s["key"] in statements]
    cells = {s["key"]: make_cell(rules, rung, s["model"], device=device) for s in chosen}
    log(f"{rung_name}: {', '.join(c.key for c in cells.values())}")
    done = run_cells(list(cells.values()), records, executor=executor, address=address)
    values = {key: done[cell.key]["final"]["icl_acc"] for key, cell in cells.items()}
    for key, value in values.items():
        log(f"  {key}: {value:.4f}")
    return values


def verdict(rule: dict[str, Any], value: float) -> str:
    """The verdict of `rule` on `value`: "met", "below", or "above".

    "above": a "within" rule's value over the band.
    """
    if rule["kind"] == "at_least":
        return "met" if value >= rule["threshold"] else "below"
    gap = value - rule["target"]
    return "met" if abs(gap) <= rule["tolerance"] + 1e-12 else "below" if gap < 0 else "above"


def read_records(path: str | Path) -> dict[str, dict[str, Any]]:
    """key -> record of the ladder's records file (none if it does not exist)."""
    return load_records(Path(path))


def run_ladder(
    rules: dict[str, Any],
    records: Path,
    *,
    statements: list[str] | None = None,
    max_rung: str | None = None,
    log: Callable[[str], None] = print,
    executor: str = "local",
    address: str | None = None,
) -> dict[str, str]:
    """Climb the ladder for `statements` (default: all) up to `max_rung`; statement -> its last verdict.

    A rung's cells run through `run_cells` (`executor="ray"`: one Ray task each, on `address` or a local
    instance).
    """
    chosen = [s for s in rules["statements"] if statements is None or s["key"] in statements]
    status = {s["key"]: "not run" for s in chosen}
    for rung in rules["ladder"]["rungs"]:
        open_ = [s for s in chosen if status[s["key"]] in ("not run", "below")]
        cells = {cell_key(rung["name"], s["model"]): make_cell(rules, rung, s["model"]) for s in open_}
        if not cells:
            break
        log(f"{rung['name']}: {', '.join(cells)}")
        done = run_cells(list(cells.values()), records, executor=executor, address=address)
        for s in open_:
            value = done[cell_key(rung["name"], s["model"])]["final"]["icl_acc"]
            status[s["key"]] = verdict(s["rule"], value)
            log(f"  {s['key']}: {value:.4f} -> {status[s['key']]}")
        if rung["name"] == max_rung:
            break
    return status


def run_seed_check(
    rules: dict[str, Any],
    check: dict[str, Any],
    records: Path,
    *,
    log: Callable[[str], None] = print,
    executor: str = "local",
    address: str | None = None,
) -> None:
    """Run `check["seeds"]` at each statement's deciding rung (where its seed-0 climb stopped), statements in
    `check["order"]`; reported beside seed 0 by `summarise`, never judged."""
    for key in check["order"]:
        entry = summarise(rules, read_records(records))[key]
        if entry["outcome"] is None or entry["status"] == "below":
            log(f"{key}: climb not settled, no seed check")
            continue
        rung = next(r for r in rules["ladder"]["rungs"] if r["name"] == entry["outcome"]["rung"])
        model = next(s["model"] for s in rules["statements"] if s["key"] == key)
        cells = [make_cell(rules, rung, model, seed) for seed in check["seeds"]]
        done = run_cells(cells, records, executor=executor, address=address)
        log(
            f"{key} at {rung['name']}: "
            + ", ".join(f"{k} {r['final']['icl_acc']:.4f}" for k, r in done.items())
        )


def gap(rule: dict[str, Any], value: float) -> float:
    """Distance from `value` to the nearest value that meets `rule` (0 when met)."""
    if rule["kind"] == "at_least":
        return max(0.0, rule["threshold"] - value)
    return max(0.0, abs(value - rule["target"]) - rule["tolerance"])


def summarise(rules: dict[str, Any], records: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each statement's climb read from the cell records.

    The rungs it ran (stopping where the procedure stops), its outcome at the last of them and the rungs it
    did not reach.

    Returns statement key -> {"claim", "published", "text", "rule", "climb": [{"rung", "sizes", "value",
    "verdict", "gap", "n_icl_positions", "curve_end" (the last held-out curve value), "late_rise", "wall_s"}],
    "beyond": rows of the same form for rungs run after the climb stopped (never its outcome), "outcome": the
    last climb row (None when nothing ran) with "seeds" (seed -> accuracy of the seed check at that rung),
    "status": "met" / "below" / "above" / "not run", "not_reached": [rung names]}.
    """
    rungs, out = rules["ladder"]["rungs"], {}
    for s in rules["statements"]:
        climb = []
        for rung in rungs:
            record = records.get(cell_key(rung["name"], s["model"]))
            if record is None:
                break
            climb.append(_climb_row(s["rule"], rung, record))
            if climb[-1]["verdict"] != "below":
                break
        last = climb[-1] if climb else None
        if last is not None:
            prefix = cell_key(last["rung"], s["model"]) + "/seed"
            last["seeds"] = {
                k[len(prefix) :]: r["final"]["icl_acc"] for k, r in records.items() if k.startswith(prefix)
            }
        beyond = [
            _climb_row(s["rule"], rung, records[cell_key(rung["name"], s["model"])])
            for rung in rungs[len(climb) :]
            if cell_key(rung["name"], s["model"]) in records
        ]
        out[s["key"]] = {
            **{k: s[k] for k in ("claim", "published", "text", "rule")},
            "climb": climb,
            "beyond": beyond,
            "outcome": last,
            "status": last["verdict"] if last else "not run",
            "not_reached": [r["name"] for r in rungs[len(climb) :]] if status_below(last) else [],
        }
    return out


def _climb_row(rule: dict[str, Any], rung: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    value = record["final"]["icl_acc"]
    return {
        "rung": rung["name"],
        "sizes": {k: rung[k] for k in ("d_model", "seq_len", "batch_size", "steps")},
        "value": value, "verdict": verdict(rule, value), "gap": round(gap(rule, value), 5),
        "n_icl_positions": record["final"]["n_icl_positions"],
        "curve_end": record.get("curve", {}).get("eval_icl_acc", [None])[-1],
        "wall_s": record["wall_s"],
        "late_rise": late_rise(record.get("curve", {}).get("eval_icl_acc", [])),
    }  # fmt: skip


def status_below(row: dict[str, Any] | None) -> bool:
    """True when a climb ending in `row` (None: nothing ran) would go on to the next rung."""
    return row is None or row["verdict"] == "below"


def ladder_record(folder: str | Path = DATA) -> dict[str, Any] | None:
    """The rules and every cell record, for the run record (None when the rules file is absent)."""
    folder = Path(folder)
    if not (folder / RULES_FILE.name).exists():
        return None
    return {
        "rules": load_rules(folder / RULES_FILE.name),
        "records": read_records(folder / RECORDS_FILE.name),
    }


def attach_ladder(record: dict[str, Any], folder: str | Path = DATA) -> dict[str, Any]:
    """`record` with the ladder ("ladder": rules and cell records) and its statements judged again with it.

    The suite's own runs are not touched: the statements are re-judged from the histories in the record."""
    ladder = ladder_record(folder)
    summary = summarise(ladder["rules"], ladder["records"]) if ladder else {}
    published = load_published()
    return {**record, "ladder": ladder, "statements": judge(published, record_context(record, summary))}
