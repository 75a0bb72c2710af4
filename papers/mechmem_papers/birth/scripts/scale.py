"""Climb the birth scale ladder: the smallest configuration that reproduces each Section 3 accuracy.

    # CPU: a few minutes
    python -m mechmem_papers.birth.scripts.scale --statements two_layer_fixed --max-rung R0
    # every statement, every rung
    python -m mechmem_papers.birth.scripts.scale
    python -m mechmem_papers.birth.scripts.scale --seed-check docs/reproductions/data/birth_seed_check.json
    # every statement at the paper's sizes, on a GPU, whatever the climb decided
    python -m mechmem_papers.birth.scripts.scale --rung R4 --device cuda
    # a rung's cells as Ray tasks
    python -m mechmem_papers.birth.scripts.scale --executor ray --address auto

Rules, metric and rungs: docs/reproductions/data/birth_rules.json (committed before the runs). Each finished
run is appended to docs/reproductions/data/birth_scale.jsonl; runs already there are reused, so the command
resumes. With --record, the birth run record is then given the ladder and its statements are judged again from
the histories it holds (no suite run is retrained); `python analyses/reproduce.py birth --page-only` shows it:

    python -m mechmem_papers.birth.scripts.scale --no-run --record docs/reproductions/data/birth.json
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import functools
import json
from pathlib import Path

from mechmem.cli import ArgumentParser, input_file, positive_int, run_script, write_json
from mechmem.errors import MechmemError
from mechmem_papers.executor import check_executor

LOG = functools.partial(print, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Climb the ladder, run the seed check, or give a record the ladder."""
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rules",
        type=input_file,
        help="rules-and-ladder JSON file (default: docs/reproductions/data/birth_rules.json)",
    )
    parser.add_argument(
        "--records",
        help="cells JSONL file, appended and resumed (default: docs/reproductions/data/birth_scale.jsonl)",
    )
    parser.add_argument("--statements", default=None, help="comma-separated statement keys (default: all)")
    parser.add_argument("--max-rung", default=None, help="highest rung to run, e.g. R2 (default: all)")
    parser.add_argument(
        "--no-run", action="store_true", help="train nothing (with --record: refresh it only)"
    )
    parser.add_argument(
        "--seed-check", type=input_file, default=None, help="seed-check JSON: run it instead of climbing"
    )
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--rung", default=None, help="run every chosen statement at this rung, without climbing (e.g. R4)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where the cells train (default cpu)")
    parser.add_argument(
        "--executor", default="local", help="local (this process) or ray (one Ray task per cell)"
    )
    parser.add_argument("--address", default=None, help="ray: cluster to join (auto or host:port)")
    parser.add_argument(
        "--record", type=input_file, help="birth run record to give the ladder (rewritten in place)"
    )
    args = parser.parse_args(argv)
    check_executor(args.executor, args.address)
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem_papers.birth.scale import (
        RECORDS_FILE,
        RULES_FILE,
        attach_ladder,
        load_rules,
        run_ladder,
        run_rung,
        run_seed_check,
    )

    if not Path(args.rules or RULES_FILE).exists():
        raise MechmemError(f"no rules file at {args.rules or RULES_FILE}")
    rules = load_rules(args.rules or RULES_FILE)
    keys = [s["key"] for s in rules["statements"]]
    chosen = args.statements.split(",") if args.statements else None
    if chosen and set(chosen) - set(keys):
        raise MechmemError(f"unknown statement in {args.statements!r} (known: {', '.join(keys)})")
    rungs = [r["name"] for r in rules["ladder"]["rungs"]]
    for rung in (args.max_rung, args.rung):
        if rung is not None and rung not in rungs:
            raise MechmemError(f"unknown rung {rung!r} (known: {', '.join(rungs)})")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise MechmemError(f"unknown device {args.device!r} (use cpu or cuda)")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise MechmemError("--device cuda requested but no CUDA device is available")
    torch.set_num_threads(args.threads)
    records, where = Path(args.records or RECORDS_FILE), {"executor": args.executor, "address": args.address}
    if args.rung and not args.no_run:
        run_rung(rules, records, args.rung, statements=chosen, device=args.device, log=LOG, **where)
    elif args.seed_check and not args.no_run:
        run_seed_check(rules, json.loads(Path(args.seed_check).read_text()), records, log=LOG, **where)
    elif not args.no_run:
        status = run_ladder(rules, records, statements=chosen, max_rung=args.max_rung, log=LOG, **where)
        print("\n".join(f"{key}: {verdict}" for key, verdict in status.items()))
    if args.record:
        record = attach_ladder(json.loads(Path(args.record).read_text()), records.parent)
        write_json(args.record, record)
        print(f"wrote {args.record}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
