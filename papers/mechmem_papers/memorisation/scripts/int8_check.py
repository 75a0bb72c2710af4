"""Round the constructions' weights to int8 at our capacities and measure what they still recall.

    # CPU: minutes at d = 16, about an hour with d = 32
    python -m mechmem_papers.memorisation.scripts.int8_check --ds 16 32

For each mode (`--modes`), size (`--ds`) and criterion, reads the fact count our capacity search found from
constructions_capacity_full.json in --data, rebuilds the weights as the search did (the learned modes train
again with the same seeds and recipe) and writes the accuracy before and after rounding every weight tensor
to 8-bit integers (`constructions.int8`) to constructions_int8_full.json in --data. Resumable: the file is
rewritten after every row and a row already in it is not computed again. The memorisation page reads it
(`python analyses/reproduce.py memorisation`).
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import json
import shlex
import sys
from pathlib import Path

from mechmem import cli
from mechmem.cli import ArgumentParser, run_script, write_json
from mechmem.errors import MechmemError
from mechmem_papers.memorisation.options import INT8_MODES

CRITERIA = ("1", "0.9")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds", type=cli.int_range(4), nargs="+", default=[16, 32], help="sizes d >= 4")
    parser.add_argument("--modes", nargs="+", default=list(INT8_MODES), choices=INT8_MODES, help="modes")
    parser.add_argument("--data", type=Path, default=Path("docs/reproductions/data"), help="data folder")
    parser.add_argument("--threads", type=cli.thread_count, default=1, help="torch CPU threads, >= 1")
    args = parser.parse_args(argv)
    capacity_file, out = (
        args.data / "constructions_capacity_full.json",
        args.data / "constructions_int8_full.json",
    )
    if not capacity_file.is_file():
        raise MechmemError(f"{capacity_file} not found: run reproduce_constructions first")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem_papers.memorisation.constructions.evaluators import SweepGrid
    from mechmem_papers.memorisation.constructions.int8 import int8_row
    from mechmem_papers.memorisation.constructions.reproduce import load_capacities

    torch.set_num_threads(args.threads)
    results = load_capacities(capacity_file)["results"]
    command = "python -m mechmem_papers.memorisation.scripts.int8_check " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )
    done = json.loads(out.read_text()) if out.exists() else {"runs": [], "rows": []}
    have = {(r["mode"], r["d"], r["criterion"], r["n"]) for r in done["rows"]}
    for r in results:
        if r.name not in args.modes or r.d not in args.ds:
            continue
        for crit in CRITERIA:
            if (r.name, r.d, crit, r[crit]) in have or crit not in r.searches or r[crit] not in r.scores:
                continue
            row = int8_row(r.name, r.d, crit, r[crit], SweepGrid())
            # a row of an earlier capacity (the search was rerun) gives way to the new one
            key = (r.name, r.d, crit)
            done["rows"] = [x for x in done["rows"] if (x["mode"], x["d"], x["criterion"]) != key] + [row]
            done["runs"] = done["runs"] if command in done["runs"] else [*done["runs"], command]
            write_json(out, done)
            before, after = row["accuracy"], row["accuracy_int8"]
            print(f"{r.name} d={r.d} {crit}: {row['n']} facts, accuracy {before:.4f} -> {after:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
