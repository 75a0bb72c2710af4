"""The 54-variant capacity table and the d-scaling sweep; resumable (finished cells are skipped).

    # one repeat of all 54, CPU
    python -m mechmem_papers.memorisation.scripts.sweep_facts table --max-epochs 150 --patience 50
    # variants whose name matches
    python -m mechmem_papers.memorisation.scripts.sweep_facts table --only 2emb --max-epochs 2000
    # d=16, 32
    python -m mechmem_papers.memorisation.scripts.sweep_facts scaling --variant reduced --max-epochs 150 \
        --patience 50
    # the GPU job (each cell's fact counts trained in one stack)
    python -m mechmem_papers.memorisation.scripts.sweep_facts scaling --ds 16 32 64 128 --gpu-sizes \
        --device cuda --all-at-once
    # a second worker on a cell another process is searching: only its All search, sharing the trials file
    python -m mechmem_papers.memorisation.scripts.sweep_facts scaling --ds 32 --criteria all
    # the trainings in progress: how far each has got, and which worker runs it
    python -m mechmem_papers.memorisation.scripts.sweep_facts status
    # tables + fits from the JSONL
    python -m mechmem_papers.memorisation.scripts.sweep_facts report --max-epochs 150 --patience 50
    # cells as Ray tasks (docs/distributed.md)
    python -m mechmem_papers.memorisation.scripts.sweep_facts table --executor ray --address auto

Records append to docs/reproductions/data/facts_{table,scaling}.jsonl (change with --data), and each finished
training of a cell to facts_trials.jsonl beside it (--trials), so a cell stopped mid-search resumes after its
last finished training. `report` prints
the records of the given schedule (mean +- sd over repeats) and the fits S = a d^2/ln d and S = b d^k, and
writes facts_scaling_fits.json; the page is `python analyses/reproduce.py memorisation`.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import argparse
from pathlib import Path

from mechmem import cli
from mechmem.errors import MechmemError
from mechmem_papers.executor import check_executor
from mechmem_papers.memorisation.options import SCALING_VARIANTS, add_schedule_args

DATA = Path("docs/reproductions/data")
HEADERS = ["variant", "repeats", "any", "most", "all", "s/cell"]


def main(argv: list[str] | None = None) -> int:
    """Run the table or scaling sweep, or report on its records."""
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["table", "scaling", "report", "status"], help="what to run")
    p.add_argument(
        "--repeats", type=cli.positive_int, default=1, help="repeats, >= 1 (fresh seeds each); published 4"
    )
    add_schedule_args(p)
    p.add_argument("--only", default=None, help="table: run only variants whose name contains this")
    p.add_argument("--ds", type=cli.int_range(4), nargs="+", default=[16, 32], help="scaling: sizes d >= 4")
    p.add_argument("--gpu-sizes", action="store_true", help="scaling: allow d >= 64 (a GPU job)")
    p.add_argument("--variant", choices=sorted(SCALING_VARIANTS), default="full", help="scaling: which model")
    p.add_argument("--data", type=Path, default=None, help="JSONL file (default data/facts_<mode>.jsonl)")
    p.add_argument(
        "--shard", default="0/1", help="K/N: run only cells with index %% N == K (parallel workers)"
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (resolved where each cell runs)")
    p.add_argument("--facts-device", default="cpu", help="device of the facts' permutation (published: cuda)")
    p.add_argument("--executor", default="local", help="local (this process) or ray (one Ray task per cell)")
    p.add_argument(
        "--address", default=None, help="ray: cluster to join (auto or host:port); default a local one"
    )
    p.add_argument(
        "--gpus-per-cell",
        type=cli.positive_float,
        default=1.0,
        help="ray + cuda: GPU share per cell (0.25: 4 per GPU)",
    )
    p.add_argument("--threads", type=cli.thread_count, default=1, help="torch CPU threads, >= 1")
    p.add_argument(
        "--trials",
        type=Path,
        default=None,
        help="JSONL of finished trainings, read and appended, so an interrupted cell resumes mid-search "
        "(default data/facts_trials.jsonl; 'none': do not record them)",
    )
    p.add_argument(
        "--snapshot-every",
        type=cli.positive_float,
        default=300.0,
        help="with trials: seconds between saves of a training in progress (beside the trials file, in "
        "<trials>.snapshots/), so a cell stopped mid-training resumes from its last save",
    )
    p.add_argument(
        "--all-at-once",
        action="store_true",
        help="train every fact count a cell's search could try in one stack (for a GPU; the same search)",
    )
    p.add_argument(
        "--criteria",
        nargs="+",
        choices=["any", "most", "all"],
        default=None,
        help="a helper worker: run only these searches of each cell, beside a worker searching the whole "
        "cell with the same trials file; its trainings go there and it writes no cell record",
    )
    p.add_argument(
        "--speculate",
        action="store_true",
        help="with another worker on the same cells: while it trains the count a search needs, train the "
        "count the search likely asks next (from that training's snapshot) instead of waiting",
    )
    args = p.parse_args(argv)
    try:
        shard, n_shards = (int(x) for x in args.shard.split("/"))
    except ValueError:
        raise MechmemError(f"--shard must look like K/N, got {args.shard!r}") from None
    if not 0 <= shard < n_shards:
        raise MechmemError(f"--shard K/N needs 0 <= K < N, got {args.shard!r}")
    if args.mode == "scaling" and max(args.ds) >= 64 and not args.gpu_sizes:
        raise MechmemError("d >= 64 is a GPU job: add --gpu-sizes (and --device cuda)")
    check_executor(args.executor, args.address)
    if args.criteria and (
        args.mode in ("report", "status") or str(args.trials) == "none" or args.executor != "local"
    ):
        raise MechmemError("--criteria runs a helper worker: table or scaling mode, a trials file, local")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem_papers.memorisation import sweep
    from mechmem_papers.memorisation.batched import Schedule

    torch.set_num_threads(args.threads)
    where = {k: getattr(args, k) for k in ("device", "executor", "address", "gpus_per_cell", "all_at_once")}
    data = args.data or DATA / f"facts_{args.mode}.jsonl"
    trials = args.trials or data.parent / "facts_trials.jsonl"
    where["trials"] = None if str(args.trials) == "none" else trials
    where["snapshot_every"] = args.snapshot_every
    where["speculate"] = args.speculate
    schedule = Schedule(max_epochs=args.max_epochs, patience=args.patience, target_acc=args.acc)
    if args.mode == "status":
        print_status(trials)
    elif args.criteria:
        cells = (
            sweep.table_cells(args.only, args.repeats, schedule, facts_device=args.facts_device)
            if args.mode == "table"
            else sweep.scaling_cells(args.variant, args.ds, args.repeats, schedule, args.facts_device)
        )
        found = sweep.help_cells(
            cells[shard::n_shards], data, tuple(args.criteria), trials, device=args.device,
            snapshot_every=args.snapshot_every, speculate=args.speculate,
        )  # fmt: skip
        for key, record in found.items():
            print(key, {c: record[c] for c in args.criteria})
    elif args.mode == "table":
        cells = sweep.table_cells(args.only, args.repeats, schedule, facts_device=args.facts_device)
        sweep.run_sweep(cells[shard::n_shards], data, **where)
    elif args.mode == "scaling":
        cells = sweep.scaling_cells(args.variant, args.ds, args.repeats, schedule, args.facts_device)
        sweep.run_sweep(cells[shard::n_shards], data, reuse=[data.parent / "facts_table.jsonl"], **where)
    else:
        print(f"schedule: {args.max_epochs} epochs/phase, patience {args.patience}, acc >= {args.acc}")
        for name in ("facts_table.jsonl", "facts_scaling.jsonl"):
            records = [r for r in sweep.load_records(DATA / name) if r["schedule"] == schedule.to_dict()]
            cli.print_table(sweep.table_rows(records), HEADERS) if records else print(f"{name}: no records")
        scaling = [
            r for r in sweep.load_records(DATA / "facts_scaling.jsonl") if r["schedule"] == schedule.to_dict()
        ]
        fits = sweep.scaling_fits(scaling)
        for name, fit in fits.items():
            print(f"{name}: S = {fit.a:.3f} d^2/ln d;  S = {fit.b:.3f} d^{fit.k:.2f}")
        if fits:
            cli.write_json(DATA / "facts_scaling_fits.json", {c: f.to_dict() for c, f in fits.items()})
    return 0


def print_status(trials: Path) -> None:
    """The trainings in progress beside `trials`: one row each."""
    import time

    from mechmem_papers.memorisation.trials import snapshot_dir, trainings_in_progress

    found = trainings_in_progress(trials)
    if not found:
        print(f"no training in progress in {snapshot_dir(trials)}")
        return
    rows = []
    for b in found:
        cell, _, n = b.key.rpartition("|n=")
        where = f"phase {b.phase}, epoch {b.epoch:,}" if b.training else "-"
        best = f"{b.best:,} of {n}" if b.training else "-"
        saved = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(b.saved))
        rows.append(
            [cell, n, f"{b.stored} of {b.inits}", b.training, where, best, round(b.seconds), saved, b.worker]
        )
    headers = ["cell", "n", "stored", "training", "where", "best stored", "s so far", "saved", "worker"]
    cli.print_table(rows, headers)


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
