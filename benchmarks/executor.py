"""Wall-clock of one small capacity sweep, in-process versus a local Ray instance, and whether the records
agree.

    python benchmarks/executor.py                # 8 cells of the d=4 table, 60 epochs per phase, patience 20
    python benchmarks/executor.py --cells 16 --num-cpus 2

Both sides run the same cells (the first --cells variants of the 54-variant table at width d) into fresh
records files. The Ray time includes starting the instance and its workers importing torch and mechmem, which
is what a short sweep pays; the per-cell line shows what
is left once that is paid. Needs `pip install -e '.[ray]'`.
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch

from mechmem.cli import print_table, run_script
from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.sweep import run_sweep, table_cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cells", type=int, default=8, help="cells (table variants, in order)")
    parser.add_argument("--d", type=int, default=4, help="table width (n_in = 2d)")
    parser.add_argument("--max-epochs", type=int, default=60, help="epochs per lr phase")
    parser.add_argument("--patience", type=int, default=20, help="epochs without improvement")
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray instance")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cells = table_cells(None, 1, Schedule(max_epochs=args.max_epochs, patience=args.patience), args.d)[
        : args.cells
    ]
    folder, times, records = Path(tempfile.mkdtemp()), {}, {}
    for name in ("local", "ray"):
        t0 = time.perf_counter()
        if name == "ray":
            import ray

            ray.init(
                address="local",
                num_cpus=args.num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",
            )
            times["ray start"] = time.perf_counter() - t0
        records[name] = run_sweep(cells, folder / f"{name}.jsonl", executor=name, progress=False)
        times[name] = time.perf_counter() - t0
        if name == "ray":  # warm workers: the same cells again, into a new file
            t1 = time.perf_counter()
            run_sweep(cells, folder / "ray_warm.jsonl", executor="ray", progress=False)
            times["ray, warm workers"] = time.perf_counter() - t1
            ray.shutdown()
    same = all(
        {k: v for k, v in records["local"][c.key].items() if k not in ("seconds", "finished")}
        == {k: v for k, v in records["ray"][c.key].items() if k not in ("seconds", "finished")}
        for c in cells
    )
    cell_s = sum(r["seconds"] for r in records["local"].values())
    print(
        f"{len(cells)} cells, d={args.d}, {args.max_epochs} epochs/phase, patience {args.patience}; "
        f"sum of local cell times {cell_s:.1f} s; records identical (timing fields aside): {same}"
    )
    print_table(
        [[k, f"{v:.1f}", f"{times['local'] / v:.2f}"] for k, v in times.items()], ["run", "s", "local / run"]
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
