"""The 54-variant capacity table and the d-scaling sweep; resumable (finished cells are skipped).

    python analyses/sweep_facts.py table --max-epochs 150 --patience 50       # one repeat of all 54, CPU
    python analyses/sweep_facts.py table --only 2emb --max-epochs 2000        # variants whose name matches
    python analyses/sweep_facts.py scaling --variant reduced --max-epochs 150 --patience 50  # d=16, 32
    python analyses/sweep_facts.py scaling --ds 16 32 64 128 --gpu-sizes --device cuda   # the GPU job
    python analyses/sweep_facts.py report --max-epochs 150 --patience 50       # tables + fits from the JSONL

Records append to docs/reproductions/data/facts_{table,scaling}.jsonl (change with --data). `report` reads the
records run with the given schedule flags and prints the table (mean +- sd over repeats) and the fits
S = a d^2/ln d and S = b d^k, writing docs/reproductions/figures/facts_scaling.png.
"""

import argparse
from pathlib import Path

import torch

from mechmem.cli import print_table, run_script, save_figure, write_json
from mechmem.errors import MechmemError
from mechmem.papers.memorisation.batched import Schedule
from mechmem.papers.memorisation.models import all_variants
from mechmem.papers.memorisation.sweep import (
    SCALING_VARIANTS,
    Cell,
    fit_scaling,
    load_records,
    plot_scaling,
    run_cells,
    scaled,
    table_rows,
)
from mechmem.training.trainer import resolve_device

DOCS = Path("docs/reproductions")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["table", "scaling", "report"], help="what to run")
    p.add_argument("--repeats", type=int, default=1, help="repeats (fresh init seeds each); published 4")
    p.add_argument(
        "--acc", type=float, choices=[1.0, 0.9], default=1.0, help="accuracy that counts as stored"
    )
    p.add_argument("--max-epochs", type=int, default=50_000, help="epoch cap per lr phase (published 50,000)")
    p.add_argument("--patience", type=int, default=5_000, help="epochs without improvement (published 5,000)")
    p.add_argument("--only", default=None, help="table: run only variants whose name contains this")
    p.add_argument("--ds", type=int, nargs="+", default=[16, 32], help="scaling: sizes d")
    p.add_argument("--gpu-sizes", action="store_true", help="scaling: allow d >= 64 (a GPU job)")
    p.add_argument("--variant", choices=sorted(SCALING_VARIANTS), default="full", help="scaling: which model")
    p.add_argument(
        "--data", default=None, help="JSONL file (default docs/reproductions/data/facts_<mode>.jsonl)"
    )
    p.add_argument(
        "--shard", default="0/1", help="K/N: run only cells with index %% N == K (parallel workers)"
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    schedule = Schedule(max_epochs=args.max_epochs, patience=args.patience, target_acc=args.acc)
    try:
        shard, n_shards = (int(x) for x in args.shard.split("/"))
    except ValueError:
        raise MechmemError(f"--shard must look like K/N, got {args.shard!r}") from None
    if args.mode == "table":
        variants = [v for v in all_variants() if args.only is None or args.only in v.name]
        if not variants:
            raise MechmemError(f"no variant name contains {args.only!r}")
        cells = [Cell(v, r, schedule) for r in range(args.repeats) for v in variants]
        run_cells(
            cells[shard::n_shards],
            args.data or DOCS / "data/facts_table.jsonl",
            device=resolve_device(args.device),
        )
    elif args.mode == "scaling":
        if max(args.ds) >= 64 and not args.gpu_sizes:
            raise MechmemError("d >= 64 is a GPU job: add --gpu-sizes (and --device cuda)")
        base = SCALING_VARIANTS[args.variant]
        cells = [
            Cell(scaled(base, d), r, schedule, precision=8 * (d // 16) ** 2 or 1)
            for r in range(args.repeats)
            for d in args.ds
        ]
        run_cells(
            cells[shard::n_shards],
            args.data or DOCS / "data/facts_scaling.jsonl",
            device=resolve_device(args.device),
        )
    else:

        def same_schedule(r: dict) -> bool:
            return r["schedule"] == schedule.to_dict()

        table = [r for r in load_records(args.data or DOCS / "data/facts_table.jsonl") if same_schedule(r)]
        print(f"schedule: {args.max_epochs} epochs/phase, patience {args.patience}, acc >= {args.acc}")
        print_table(table_rows(table), ["variant", "repeats", "any", "most", "all", "s/cell"])
        scaling = [r for r in load_records(DOCS / "data/facts_scaling.jsonl") if same_schedule(r)]
        if scaling:
            print_table(table_rows(scaling), ["variant", "repeats", "any", "most", "all", "s/cell"])
            fits, shown = {}, {}
            for variant in dict.fromkeys(r["variant"] for r in scaling):
                for crit in ("any", "most", "all"):
                    by_d: dict[int, list[int]] = {}
                    for r in scaling:
                        if r["variant"] == variant:
                            by_d.setdefault(r["d"], []).append(r[crit])
                    ds = sorted(by_d)
                    if len(ds) >= 2:
                        fits[f"{variant} {crit}"] = fit_scaling(ds, [sum(by_d[d]) / len(by_d[d]) for d in ds])
                        if crit == "any":
                            shown[f"{variant} any"] = fits[f"{variant} any"]
            for name, fit in fits.items():
                print(f"{name}: S = {fit.a:.3f} d^2/ln d;  S = {fit.b:.3f} d^{fit.k:.2f}")
            if fits:
                write_json(DOCS / "data/facts_scaling_fits.json", {c: f.to_dict() for c, f in fits.items()})
                save_figure(plot_scaling(shown), DOCS / "figures/facts_scaling.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
