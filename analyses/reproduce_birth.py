"""Reproduce Bietti et al. (2023), "Birth of a Transformer": run experiments (a)-(d) and write the report.

    python analyses/reproduce_birth.py --quick

`--quick` uses CPU sizes (d=64, T=128, batch 32; about 20 minutes on 2 busy cores); without it the sizes of the `quick` preset
(d=128, T=128, batch 64); `--scale paper` the paper's (GPU). Runs go to `--runs` (finished runs are reused),
the report to `docs/reproductions/birth.md` with figures in `docs/reproductions/figures/birth_*.png`.
"""

import argparse
import sys
import time
from pathlib import Path

import torch

from mechmem.birth import report
from mechmem.birth.experiments import SCALES, experiment_runs, final, run_experiment
from mechmem.checkpoint import load_checkpoint
from mechmem.cli import print_table, run_script, save_figure
from mechmem.errors import MechmemError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CPU-sized runs (same as --scale quick)")
    parser.add_argument("--scale", choices=sorted(SCALES), default="default", help="run sizes (default: default)")
    parser.add_argument("--only", nargs="*", default=None, help="experiments to run: freezing ffn data depth")
    parser.add_argument("--runs", default="runs/birth_repro", help="directory for the runs (reused when finished)")
    parser.add_argument("--doc", default="docs/reproductions/birth.md", help="markdown report to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scale = SCALES["quick" if args.quick else args.scale]
    runs = [r for r in experiment_runs(scale) if args.only is None or r.group in args.only]
    if not runs:
        raise MechmemError(f"--only {args.only}: no such experiment (freezing, ffn, data, depth)")
    out, doc = Path(args.runs) / scale_name(args), Path(args.doc)
    start, histories = time.perf_counter(), {}
    for i, run in enumerate(runs, 1):
        print(f"[{i}/{len(runs)}] {run.name}: {run.label}", flush=True)
        histories[run.name] = run_experiment(run, out, seed=args.seed)
    wall = time.perf_counter() - start
    figs = {}
    fig_dir = doc.parent / "figures"
    labels = {r.name: r.label for r in runs}

    def add(key: str, caption: str, fig: object) -> None:
        save_figure(fig, fig_dir / key)
        figs[key] = caption

    if "freeze_none" in histories:
        add("birth_training.png", "Simplified model, all trained jointly: accuracy and memory probes",
            report.plot_training(histories["freeze_none"], "K=5 fixed triggers, head-only loss"))
        ckpt = load_checkpoint(out / "freeze_none" / "ckpt.pt")
        add("birth_attention.png", "Attention maps of the trained simplified model (layer 0: previous token; "
            "layer 1: induction)", report.plot_attention(ckpt.model, ckpt.task, seed=args.seed))
        freezing = {r.name: histories[r.name] for r in runs if r.group == "freezing"}
        add("birth_freezing.png", f"(a) Freezing until step {scale.freeze_step} (paper Fig. 3)",
            report.plot_freezing(freezing, labels, scale.freeze_step))
    if "ffn_joint" in histories:
        add("birth_ffn.png", "(b) Joint training with W_F (paper Fig. 4)", report.plot_ffn(histories["ffn_joint"]))
    for group, caption in (("data", "(c) Data: held-out in-context accuracy"),
                           ("depth", "(d) Full model, 1 vs 2 layers: held-out in-context accuracy")):
        rows = [(r.label, final(histories[r.name], "eval_icl_acc")) for r in runs if r.group == group]
        if group == "data" and rows and "freeze_none" in histories:
            rows.insert(0, ("K=5, fixed (joint run of (a))", final(histories["freeze_none"], "eval_icl_acc")))
        if rows:
            add(f"birth_{group}.png", caption, report.plot_final_bars(rows, "held-out in-context accuracy"))
    command = "python analyses/reproduce_birth.py " + " ".join(argv if argv is not None else sys.argv[1:])
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(report.markdown(runs, histories, scale, command=command.strip(), figures=figs, wall_s=wall))
    rows = [[c[:70], o, "yes" if ok else "no"] for c, o, ok in report.statements(histories, scale)]
    print_table(rows, ["paper", "ours", "holds"])
    print(f"wrote {doc} ({wall / 60:.1f} min of training)")
    return 0


def scale_name(args: argparse.Namespace) -> str:
    return "quick" if args.quick else args.scale


if __name__ == "__main__":
    raise SystemExit(run_script(main))
