"""One call that runs the whole constructions reproduction and writes its report, data and figures."""

import json
import time
from pathlib import Path

import torch

from mechmem.papers.memorisation.constructions.capacity import EVALUATORS, SweepGrid, key_sizes, keyvalue_stack
from mechmem.papers.memorisation.constructions.experiments import (
    CapacityResult,
    check_appendix_a,
    measure_capacity,
    published_sweep,
    trained_weights,
)
from mechmem.papers.memorisation.constructions.published import published_stack_best
from mechmem.papers.memorisation.constructions.report import (
    appendix_table,
    capacity_figure,
    capacity_table,
    histogram_figure,
    ratio_table,
    sweep_figure,
    write_report,
)
from mechmem.papers.memorisation.constructions.report_text import markdown_sections
from mechmem.papers.memorisation.constructions.training import hidden_activations
from mechmem.papers.memorisation.data import generate_facts

QUICK_GRID = SweepGrid(
    n_inits=2,
    s_values=(1, 2, 3, 4, 5, 6),
    top_fractions=(0.0, 0.06, 0.12, 0.18, 0.24, 0.3, 0.36),
    hybrid_s_values=(2, 3, 4),
    hybrid_top_fractions=(0.1, 0.2, 0.3),
    retries=1,
    key_retries=2,
)


def _weights_row(E1, E2, U, inputs) -> dict[str, torch.Tensor]:
    return {
        "embedding": torch.cat([E1.flatten(), E2.flatten()]),
        "unembedding": U.flatten(),
        "activation": hidden_activations(E1[None], E2[None], inputs)[0],
    }


def histogram_rows(result: CapacityResult, d: int, grid: SweepGrid) -> dict[str, dict[str, torch.Tensor]]:
    """Weights and activations: hand-coded vs trained on the same facts vs trained at its own capacity."""
    rows = {}
    n_hand = result.get("published_hand", d, 0.9) or d
    inputs, labels = generate_facts(n_hand, 2 * d, d)
    E1, E2, U = published_stack_best(inputs, labels, d, grid)
    rows[f"published hand-coded, {n_hand} facts"] = _weights_row(E1, E2, U, inputs)
    E1, E2, U, acc = trained_weights(d, n_hand, grid)
    rows[f"trained, {n_hand} facts (acc {acc:.2f})"] = _weights_row(E1, E2, U, inputs)
    n_tr = result.get("trained", d, 0.9)
    if n_tr:
        inputs_tr, _ = generate_facts(n_tr, 2 * d, d)
        E1, E2, U, acc = trained_weights(d, n_tr, grid)
        rows[f"trained, {n_tr} facts (acc {acc:.2f})"] = _weights_row(E1, E2, U, inputs_tr)
    n_kv = result.get("keyvalue_hand", d, 0.9)
    if n_kv:
        inputs_kv, _ = generate_facts(n_kv, 2 * d, d)
        E1, E2, U = (t[0] for t in keyvalue_stack(n_kv, d, key_sizes(d, grid)[:1], 0))
        rows[f"our key-value table, {n_kv} facts"] = _weights_row(E1, E2, U, inputs_kv)
    return rows


def run_reproduction(
    report: Path,
    *,
    quick: bool,
    ds: tuple[int, ...],
    modes: tuple[str, ...],
    precision: int,
    reuse: bool,
    command: str,
    spot_d: int = 0,
    spot_ns: tuple[int, ...] = (),
    log=print,
) -> Path:
    """Run Appendix A, the S x top_fraction sweep, the capacity search and the histograms; write the report."""
    grid = QUICK_GRID if quick else SweepGrid()
    tag = "quick" if quick else "full"
    data_dir, fig_dir = report.parent / "data", report.parent / "figures"
    data_dir.mkdir(parents=True, exist_ok=True)
    fig_dir.mkdir(parents=True, exist_ok=True)
    cap_path = data_dir / f"constructions_capacity_{tag}.json"
    t0 = time.perf_counter()

    log("Appendix A ...")
    check = check_appendix_a()
    log("published S x top_fraction sweep ...")
    sweep_d = 16
    sweep = published_sweep(sweep_d, 64, grid)
    result = CapacityResult(list(ds), list(modes), {"facts": precision})
    if reuse and cap_path.exists():
        old = CapacityResult.from_dict(json.loads(cap_path.read_text()))
        result.capacity, result.evaluations, result.seconds = old.capacity, old.evaluations, old.seconds
        result.spot, result.runs = old.spot, old.runs
        result.ds = sorted(set(ds) | set(old.ds))
        result.modes = [m for m in EVALUATORS if m in set(modes) | set(old.modes)]
    result.runs.append(command)
    log("capacity search ...")
    for d in ds:
        for mode in modes:
            measure_capacity(result, mode, d, grid, precision=precision, log=log)
            cap_path.write_text(json.dumps(result.to_dict(), indent=1))
    for n in spot_ns:
        log(f"spot check: trained at d={spot_d}, {n} facts ...")
        acc = EVALUATORS["trained"](spot_d, grid)(n)
        result.spot.setdefault(str(spot_d), {})[str(n)] = acc
        cap_path.write_text(json.dumps(result.to_dict(), indent=1))
        log(f"  best accuracy {acc:.4f}")
    log("histograms ...")
    hist_d = 16 if 16 in result.ds else ds[0]
    rows = histogram_rows(result, hist_d, grid)

    figures = {
        "sweep": sweep_figure(sweep),
        "capacity": capacity_figure(result),
        "histograms": histogram_figure(rows),
    }
    names = {}
    for key, fig in figures.items():
        names[key] = f"figures/constructions_{key}_{tag}.png"
        fig.savefig(report.parent / names[key], dpi=110)
    (data_dir / f"constructions_misc_{tag}.json").write_text(
        json.dumps(
            {"appendix_a": check.to_dict(), "sweep": sweep.to_dict(), "grid": _grid_dict(grid)}, indent=1
        )
    )
    tables = {
        "appendix": appendix_table(check),
        "capacity": capacity_table(result),
        "ratios": ratio_table(
            result,
            [
                ("trained", "published_hand"),
                ("trained", "published_hybrid"),
                ("trained", "rand_emb"),
                ("trained", "keyvalue_hand"),
                ("trained", "keyvalue_hybrid"),
            ],
        ),
    }
    sections = markdown_sections(
        result,
        check,
        sweep,
        tables,
        names,
        grid,
        command=command,
        quick=quick,
        minutes=(time.perf_counter() - t0) / 60,
    )
    return write_report(report, sections)


def _grid_dict(grid: SweepGrid) -> dict:
    out = {k: v for k, v in vars(grid).items() if k != "train"}
    out["train"] = grid.train.to_dict()
    return out


__all__ = ["EVALUATORS", "QUICK_GRID", "histogram_rows", "run_reproduction"]
