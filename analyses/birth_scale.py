"""Climb the birth scale ladder: the smallest configuration that reproduces each Section 3 accuracy.

    python analyses/birth_scale.py --statements two_layer_fixed --max-rung R0     # CPU: a few minutes
    python analyses/birth_scale.py                                                # every statement, every rung

Rules, metric and rungs: docs/reproductions/data/birth_rules.json (committed before the runs). Each finished run
is appended to docs/reproductions/data/birth_scale.jsonl; runs already there are reused, so the command resumes.
`python analyses/reproduce.py birth --page-only` then shows the ladder on the birth page.
"""

from pathlib import Path

import torch

from mechmem.cli import ArgumentParser, positive_int, run_script
from mechmem.errors import MechmemError
from mechmem.papers.birth.scale import RECORDS_FILE, RULES_FILE, load_rules, run_ladder


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default=str(RULES_FILE), help="rules-and-ladder JSON file")
    parser.add_argument("--records", default=str(RECORDS_FILE), help="cells JSONL file (appended, resumed)")
    parser.add_argument("--statements", default=None, help="comma-separated statement keys (default: all)")
    parser.add_argument("--max-rung", default=None, help="highest rung to run, e.g. R2 (default: all)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    if not Path(args.rules).exists():
        raise MechmemError(f"no rules file at {args.rules}")
    rules = load_rules(args.rules)
    keys = [s["key"] for s in rules["statements"]]
    chosen = args.statements.split(",") if args.statements else None
    if chosen and set(chosen) - set(keys):
        raise MechmemError(f"unknown statement in {args.statements!r} (known: {', '.join(keys)})")
    rungs = [r["name"] for r in rules["ladder"]["rungs"]]
    if args.max_rung is not None and args.max_rung not in rungs:
        raise MechmemError(f"unknown rung {args.max_rung!r} (known: {', '.join(rungs)})")
    torch.set_num_threads(args.threads)
    status = run_ladder(rules, Path(args.records), statements=chosen, max_rung=args.max_rung,
                        log=lambda line: print(line, flush=True))  # fmt: skip
    for key, verdict in status.items():
        print(f"{key}: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
