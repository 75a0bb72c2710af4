"""Formation under interventions: the runs of docs/record/2026-12-07-formation.md, read back into one JSON.

The runs (CPU presets, seeds 0-2; RUNS is any folder):

    mechmem train birth --preset demo --seed S --save-every 25 --out RUNS/birth-ctl-S
    mechmem train birth --preset demo --seed S --save-every 25 --intervene L0H0=zero --out RUNS/birth-iv-S
    mechmem train permutation --preset task1-demo --seed S --save-every 500 --out RUNS/t1-ctl-S
    mechmem train permutation --preset task2-quick --seed S --save-every 2000 --out RUNS/t2-ctl-S
    mechmem train permutation --preset task2-quick --seed S --save-every 2000 --intervene LlHh=zero \
        --out RUNS/t2-noelim-S        # LlHh: the control's elimination head (t2-norecall-S: its recall head)

then `PYTHONPATH=src:papers python benchmarks/formation.py --runs RUNS \
    --out docs/record/data/2026-12-07-formation.json --figure docs/figures/formation_f5.png`
(about 7 minutes to read the runs back). That command trains F5's runs itself where RUNS lacks them (one
torch thread, 1.5-4 minutes each by the machine's load): Singh et al.'s Figure 5b clamp, layer 0's attention
pattern set to the perfect previous-token pattern for the whole run (RUNS/birth-pt-S; a function, so through
`train_preset`), and the knock-out (RUNS/birth-ko150-S), the same as

    mechmem train birth --preset demo --seed S --save-every 25 --intervene L0H0=zero --intervene-until 150 \
        --out RUNS/birth-ko150-S

`--figure-only` redraws the F5 figure from the json at --out without reading any run.
Roles are the role step's on each final checkpoint (seed 0), read without the intervention.
"""

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

import mechmem
from mechmem.analysis.dynamics import compare_dynamics
from mechmem.analysis.transitions import level, level_crossing, steepest, steepest_change
from mechmem.config import TrainIntervention
from mechmem.io import atomic_write, dumps
from mechmem.training.rundir import read_metrics
from mechmem_papers.formation import F5_KINDS, plot_f5

SEEDS = (0, 1, 2)
KNOCKOUT_UNTIL = 150
"""F5's knock-out window: L0H0 zeroed for the steps before this one."""


def perfect_previous_token(
    act: Float[Tensor, "batch head_index query_pos key_pos"], hook: Any
) -> Float[Tensor, "batch head_index query_pos key_pos"]:
    """Head 0's pattern set to attend from each query to the key before it (query 0 to itself), as
    Singh et al.'s `--opto_prev_token_heads` (opto.py) sets a head's; the other heads keep theirs."""
    n = act.shape[-1]
    target = torch.zeros(n, n, dtype=act.dtype, device=act.device)
    target[0, 0] = 1.0
    target[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    out = act.clone()
    out[:, 0] = target
    return out


def train_f5(runs: Path) -> None:
    """Train the F5 runs RUNS lacks (Birth demo, saves every 25, one torch thread)."""
    clamp = TrainIntervention.function("blocks.0.attn.hook_pattern", perfect_previous_token)
    plans = {
        "birth-pt": {"interventions": [clamp]},
        "birth-ko150": {"interventions": ["L0H0=zero"], "intervene_until": KNOCKOUT_UNTIL},
    }
    torch.set_num_threads(1)
    for s in SEEDS:
        for kind, plan in plans.items():
            out = runs / f"{kind}-{s}"
            if not (out / "ckpt.pt").exists():
                print("training", out.name, flush=True)
                mechmem.train_preset(
                    "birth",
                    "demo",
                    seed=s,
                    save_every=25,
                    out_dir=out,
                    overwrite=True,
                    progress=False,
                    **plan,
                )


def phase_change(run: Path) -> dict:
    """The trainer's own evaluation over training (under the run's interventions while they are on) and its
    phase change: ICL accuracy reaching 0.5 (level rule), the loss's steepest fall."""
    train = mechmem.load_checkpoint(run / "ckpt.pt").train
    rows = [r for r in read_metrics(run) if "eval_icl_acc" in r]
    steps = [r["step"] for r in rows]
    acc = [r["eval_icl_acc"] for r in rows]
    loss = [r["eval_loss"] for r in rows]
    return {
        "steps": steps,
        "acc": acc,
        "loss": loss,
        "acc_event": level_crossing(steps, acc, level(0.5), "eval_icl_acc").to_dict(),
        "loss_event": steepest_change(steps, loss, steepest("down"), "eval_loss").to_dict(),
        "trained_under": train.get("interventions", []),
        "intervene_until": train.get("intervene_until"),
    }


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
    parser.add_argument("--runs", type=Path, help="the runs' folder (not needed with --figure-only)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--figure", help="write the F5 figure here (png)")
    parser.add_argument("--figure-only", action="store_true", help="redraw --figure from --out's json")
    args = parser.parse_args()
    if args.figure_only:
        plot_f5(json.loads(Path(args.out).read_text())["f5"]).savefig(args.figure, dpi=100)
        return
    runs = args.runs
    train_f5(runs)
    out: dict = {
        "command": "python benchmarks/formation.py",
        "runs": {},
        "order": {},
        "compare": {},
        "recall": {},
        "f5": {},
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
    for kind in F5_KINDS:
        for s in SEEDS:
            out["f5"][f"{kind}-{s}"] = record = phase_change(runs / f"{kind}-{s}")
            print(kind, s, record["acc_event"]["step"], record["acc_event"]["interval"], flush=True)
    atomic_write(args.out, dumps(out, indent=1) + "\n")
    if args.figure:
        plot_f5(out["f5"]).savefig(args.figure, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
