"""The constructions reproduction as data.

Appendix A, the S x top_fraction sweep, capacities, weight histograms.

`run_constructions` writes `constructions_capacity_{tag}.json` (every capacity search as a `CapacityResult`,
trained spot checks, the commands that contributed) and `constructions_misc_{tag}.json` (Appendix A, the
sweep, the grid, histogram counts) into a data folder; the page is drawn from these files by
`memorisation.page`.

The capacity searches and spot checks are cells of `mechmem_papers.executor.run_cells` (in-process or Ray).
While they run, finished cells are kept in `constructions_cells_{tag}.jsonl` and each search's finished fact
counts in `constructions_evaluations_{tag}.jsonl`, so a killed run resumes after its last finished evaluation;
the cells file is removed once the capacity file is written, and the searches of this run leave the
evaluations file (a later run recomputes the modes it is asked for, as before; another run's search stopped
part-way keeps its evaluations there).
"""

import json
from pathlib import Path

import numpy as np
import torch

from mechmem.io import write_json
from mechmem.tasks.facts import generate_facts
from mechmem_papers.executor import Cell, check_executor, run_cells
from mechmem_papers.memorisation.capacity import CapacityResult
from mechmem_papers.memorisation.constructions.evaluators import (
    EVALUATORS,
    SweepGrid,
    key_sizes,
    keyvalue_stack,
)
from mechmem_papers.memorisation.constructions.experiments import (
    capacity_of,
    check_appendix_a,
    construction_capacity,
    forget,
    published_sweep,
    trained_weights,
)
from mechmem_papers.memorisation.constructions.published import published_stack_best
from mechmem_papers.memorisation.constructions.training import hidden_activations

QUICK_GRID = SweepGrid(
    n_inits=2,
    s_values=(1, 2, 3, 4, 5, 6),
    top_fractions=(0.0, 0.06, 0.12, 0.18, 0.24, 0.3, 0.36),
    hybrid_s_values=(2, 3, 4),
    hybrid_top_fractions=(0.1, 0.2, 0.3),
    authors_attempts=1,
    retries=1,
    key_retries=2,
)
HIST_BINS = 60


def _hist(values: torch.Tensor) -> dict:
    counts, edges = np.histogram(values.flatten().float().numpy(), bins=HIST_BINS)
    return {
        "counts": counts.tolist(),
        "edges": edges.tolist(),
        "zero_share": float((values == 0).float().mean()),
    }


def _weights_row(E1, E2, U, inputs) -> dict[str, dict]:
    return {
        "embedding": _hist(torch.cat([E1.flatten(), E2.flatten()])),
        "unembedding": _hist(U.flatten()),
        "activation": _hist(hidden_activations(E1[None], E2[None], inputs)[0]),
    }


def histogram_rows(results: list[CapacityResult], d: int, grid: SweepGrid) -> dict[str, dict[str, dict]]:
    """Histograms of weights and activations.

    Hand-coded vs trained on the same facts vs trained at capacity.
    """
    rows = {}
    n_hand = capacity_of(results, "published_hand", d, "0.9") or d
    inputs, labels = generate_facts(n_hand, 2 * d, d)
    rows[f"published hand-coded, {n_hand} facts"] = _weights_row(
        *published_stack_best(inputs, labels, d, grid), inputs
    )
    E1, E2, U, acc = trained_weights(d, n_hand, grid)
    rows[f"trained, {n_hand} facts (acc {acc:.2f})"] = _weights_row(E1, E2, U, inputs)
    n_tr = capacity_of(results, "trained", d, "0.9")
    if n_tr:
        inputs_tr, _ = generate_facts(n_tr, 2 * d, d)
        E1, E2, U, acc = trained_weights(d, n_tr, grid)
        rows[f"trained, {n_tr} facts (acc {acc:.2f})"] = _weights_row(E1, E2, U, inputs_tr)
    n_kv = capacity_of(results, "keyvalue_hand", d, "0.9")
    if n_kv:
        inputs_kv, _ = generate_facts(n_kv, 2 * d, d)
        E1, E2, U = (t[0] for t in keyvalue_stack(n_kv, d, key_sizes(d, grid)[:1], 0))
        rows[f"our key-value table, {n_kv} facts"] = _weights_row(E1, E2, U, inputs_kv)
    return rows


def grid_dict(grid: SweepGrid) -> dict:
    """The grid as JSON (the training recipe nested)."""
    out = {k: v for k, v in vars(grid).items() if k != "train"}
    return {**out, "train": grid.train.to_dict()}


def load_capacities(path: Path) -> dict:
    """A capacity file: {"results": [CapacityResult], "spot": {d: {n: acc}}, "runs": [command]}."""
    data = json.loads(path.read_text())
    return {**data, "results": [CapacityResult.from_dict(r) for r in data["results"]]}


def capacity_cell(mode: str, d: int, quick: bool, precision: int, evaluations: str) -> dict:
    """One mode's capacity at size d (a `CapacityResult` as a dict): a cell of `run_constructions`; every
    finished evaluation goes to the records file `evaluations` too, and is read back if the cell reruns."""
    grid = QUICK_GRID if quick else SweepGrid()
    cell = f"{mode}|d={d}|prec={precision}"
    return construction_capacity(
        mode, d, grid, precision=precision, evaluations=(Path(evaluations), cell)
    ).to_dict()


def spot_cell(d: int, n: int, quick: bool) -> dict:
    """The best trained accuracy on n facts at size d: a cell of `run_constructions`."""
    return {"acc": EVALUATORS["trained"](d, QUICK_GRID if quick else SweepGrid())(n)}


def _save(path: Path, data: dict) -> None:
    write_json(path, {**data, "results": [r.to_dict() for r in data["results"]]})


def run_constructions(
    data_dir: Path,
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
    executor: str = "local",
    address: str | None = None,
) -> dict[str, Path]:
    """Run Appendix A, the sweep, the capacity searches (`reuse`: keep earlier ones) and the histograms.

    `executor` and `address` choose where the capacity searches and spot checks run (`executor.run_cells`).
    """
    check_executor(executor, address)
    grid, tag = (QUICK_GRID, "quick") if quick else (SweepGrid(), "full")
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = {k: data_dir / f"constructions_{k}_{tag}.json" for k in ("capacity", "misc")}
    log("Appendix A, published S x top_fraction sweep ...")
    check, sweep = check_appendix_a(), published_sweep(16, 64, grid)
    data = load_capacities(paths["capacity"]) if reuse and paths["capacity"].exists() else {}
    data = {
        "results": data.get("results", []),
        "spot": data.get("spot", {}),
        "runs": data.get("runs", []) + [command],
    }
    evaluations = data_dir / f"constructions_evaluations_{tag}.jsonl"
    common = {"quick": quick, "precision": precision, "evaluations": str(evaluations)}
    cells = [
        Cell(f"{mode}|d={d}|prec={precision}", capacity_cell, {"mode": mode, "d": d, **common})
        for d in ds
        for mode in modes
    ]
    cells += [
        Cell(f"spot|d={spot_d}|n={n}", spot_cell, {"d": spot_d, "n": n, "quick": quick}) for n in spot_ns
    ]
    partial = data_dir / f"constructions_cells_{tag}.jsonl"
    records = run_cells(
        cells, partial, executor=executor, address=address, device="cpu", progress="constructions"
    )
    for cell in cells:
        kw, record = cell.kwargs, records[cell.key]
        if cell.fn is spot_cell:
            data["spot"].setdefault(str(kw["d"]), {})[str(kw["n"])] = record["acc"]
            log(f"spot check: trained at d={kw['d']}, {kw['n']} facts: best accuracy {record['acc']:.4f}")
            continue
        result = CapacityResult.from_dict(record)
        data["results"] = [r for r in data["results"] if (r.name, r.d) != (kw["mode"], kw["d"])] + [result]
        log(
            f"  {kw['mode']:17s} d={kw['d']:3d}  acc=1: {result['1']:5d}  acc>=0.9: {result['0.9']:5d}  "
            f"({result.seconds:.0f}s)"
        )
    _save(paths["capacity"], data)
    partial.unlink(missing_ok=True)
    forget(evaluations, {cell.key for cell in cells})
    log("histograms ...")
    hist_d = 16 if 16 in {r.d for r in data["results"]} else ds[0]
    misc = {
        "appendix_a": check.to_dict(),
        "sweep": sweep.to_dict(),
        "grid": grid_dict(grid),
        "histograms": {"d": hist_d, "rows": histogram_rows(data["results"], hist_d, grid)},
    }
    write_json(paths["misc"], misc)
    return paths
