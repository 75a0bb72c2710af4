"""Formation under interventions: the runs of docs/record/2026-12-07-formation.md, read back into one JSON.

The runs (CPU presets, seeds 0-2; RUNS is any folder):

    mechmem train birth --preset demo --seed S --save-every 25 --out RUNS/birth-ctl-S
    mechmem train birth --preset demo --seed S --save-every 25 --intervene L0H0=zero --out RUNS/birth-iv-S
    mechmem train permutation --preset task1-demo --seed S --save-every 500 --out RUNS/t1-ctl-S
    mechmem train permutation --preset task2-quick --seed S --save-every 2000 --out RUNS/t2-ctl-S
    mechmem train permutation --preset task2-quick --seed S --save-every 2000 --intervene LlHh=zero \
        --out RUNS/t2-noelim-S        # LlHh: the control's elimination head (t2-norecall-S: its recall head)

then `PYTHONPATH=src python benchmarks/formation.py --runs RUNS \
    --out docs/record/data/2026-12-07-formation.json`
(about 5 minutes).
Roles are the role step's on each final checkpoint (seed 0), read without the intervention.
"""

import argparse
from pathlib import Path

import mechmem
from mechmem.analysis.dynamics import compare_dynamics
from mechmem.io import atomic_write, dumps

SEEDS = (0, 1, 2)


def run_record(run: Path) -> dict:
    """Roles (with each head's key evidence), the final metrics, and the interventions it trained under."""
    ckpt = mechmem.load_checkpoint(run / "ckpt.pt")
    roles = mechmem.head_roles(ckpt.model, ckpt.task, seed=0)
    heads = {}
    for h in roles.heads:
        keep = ("induction", "induction_lower", "previous_token", "previous_token_lower")
        evidence = {k: float(v) for k, v in h.evidence.items() if k in keep or k.endswith("_score")}
        heads[h.name] = {"role": h.role, "evidence": evidence}
    metrics = {k: v for k, v in ckpt.metrics.items() if isinstance(v, (int, float))}
    return {"heads": heads, "metrics": metrics, "trained_under": ckpt.train.get("interventions", [])}


def curves(result, names: list[str]) -> dict:
    """The named curves of a `Dynamics` with their steps and events."""
    events = {e.curve: e.step for e in result.events}
    return {
        "steps": result.steps,
        "curves": {c: result.curves[c] for c in names if c in result.curves},
        "events": {c: events.get(c) for c in names},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, type=Path)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs = args.runs
    out: dict = {
        "command": "python benchmarks/formation.py",
        "runs": {},
        "order": {},
        "compare": {},
        "recall": {},
    }
    names = [f"{kind}-{s}" for kind in ("birth-ctl", "birth-iv", "t1-ctl", "t2-ctl") for s in SEEDS]
    names += [f"{kind}-{s}" for kind in ("t2-noelim", "t2-norecall") for s in SEEDS]
    for name in names:
        out["runs"][name] = run_record(runs / name)
        print(name, {h: r["role"] for h, r in out["runs"][name]["heads"].items()}, flush=True)
    probes = ["wo2_recall", "wk2_recall", "wk1_recall", "wk1_recall_64"]
    for s in SEEDS:
        out["order"][s] = curves(mechmem.run_dynamics(runs / f"birth-ctl-{s}", ["probes"], n=128), probes)
        both = compare_dynamics(runs / f"birth-ctl-{s}", runs / f"birth-iv-{s}", ["loss", "circuit"], n=128)
        record = both.to_dict()
        out["compare"][s] = {k: record[k] for k in ("differences", "steps", "interval", "events", "circuit")}
        out["compare"][s]["last"] = [r for r in record["rows"] if r["step"] == record["steps"][-1]]
        for task in ("t1", "t2"):
            result = mechmem.run_dynamics(runs / f"{task}-ctl-{s}", ["roles"], n=128)
            scores = [c for c in result.curves if c.endswith("_score")]
            out["recall"][f"{task}-{s}"] = curves(result, scores)
    atomic_write(args.out, dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
