"""Reproduce Bietti et al. (2023), "Birth of a Transformer": run experiments (a)-(d) and write the report.

    python analyses/reproduce_birth.py --quick

`--quick` uses CPU sizes (d=64, T=128, batch 32; about 20 minutes on 2 cores); without it the sizes of the
`quick` preset (d=128, T=128, batch 64); `--scale paper` the paper's (GPU). Runs go to `--runs` (finished runs are reused),
the report to `docs/reproductions/birth.md` with figures in `docs/reproductions/figures/birth_*.png`.
"""

import argparse
import json
import sys
from pathlib import Path

import torch

from mechmem.birth import plots, report
from mechmem.birth.corpus import load_stats
from mechmem.birth.data import TriggerSampler, generation_speed
from mechmem.birth.experiments import (
    SCALES,
    experiment_runs,
    read_history,
    run_experiment,
    shifted_accuracy,
    training_seconds,
)
from mechmem.cli import print_table, run_script
from mechmem.errors import MechmemError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CPU-sized runs (same as --scale quick)")
    parser.add_argument(
        "--scale", choices=sorted(SCALES), default="default", help="run sizes (default: default)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="experiments to run: freezing ffn data depth")
    parser.add_argument(
        "--runs", default="runs/birth_repro", help="directory for the runs (reused when finished)"
    )
    parser.add_argument("--doc", default="docs/reproductions/birth.md", help="markdown report to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of every run")
    parser.add_argument(
        "--preset-run",
        default=None,
        help="run directory of `analyses/train.py birth --preset quick` to report against the targets",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--skip-speed", action="store_true", help="do not measure data-generation speed")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    scale = SCALES["quick" if args.quick else args.scale]
    runs = [r for r in experiment_runs(scale) if args.only is None or r.group in args.only]
    if not runs:
        raise MechmemError(f"--only {args.only}: no such experiment (freezing, ffn, data, depth)")
    out, doc = Path(args.runs) / scale_name(args), Path(args.doc)
    histories = {}
    for i, run in enumerate(runs, 1):
        print(f"[{i}/{len(runs)}] {run.name}: {run.label}", flush=True)
        histories[run.name] = run_experiment(run, out, seed=args.seed)
    wall = training_seconds(runs, out)
    preset_ckpt = Path(args.preset_run) / "ckpt.pt" if args.preset_run else None
    figs = plots.make_figures(
        runs,
        histories,
        scale,
        run_dir=out,
        fig_dir=doc.parent / "figures",
        seed=args.seed,
        attention_ckpt=preset_ckpt,
    )
    command = "python analyses/reproduce_birth.py " + " ".join(argv if argv is not None else sys.argv[1:])
    preset = heads = None
    if args.preset_run:
        run = Path(args.preset_run)
        preset = (read_history(run), f"python analyses/train.py birth --preset quick --out {run}")
        if (run / "heads" / "detect_heads.json").exists():
            heads = (
                json.loads((run / "heads" / "detect_heads.json").read_text()),
                f"python analyses/detect_heads.py {run}/ckpt.pt --out {run}/heads --n-samples 64",
            )
    shifted = {}
    if (out / "freeze_none" / "ckpt.pt").exists() and (out / "data_k5_bigram" / "ckpt.pt").exists():
        shifted = {
            "uniform_on_bigram": shifted_accuracy(out / "freeze_none" / "ckpt.pt", "bigram", seed=args.seed),
            "bigram_on_uniform": shifted_accuracy(
                out / "data_k5_bigram" / "ckpt.pt", "uniform", seed=args.seed
            ),
        }
    speed = None
    if not args.skip_speed:
        speed = generation_speed(
            TriggerSampler(load_stats(), seq_len=256, n_triggers=5, fixed_triggers=False)
        )
    doc.write_text(
        report.markdown(
            runs,
            histories,
            scale,
            command=command.strip(),
            figures=figs,
            wall_s=wall,
            preset=preset,
            heads=heads,
            speed=speed,
            shifted=shifted,
        )
    )
    rows = [[c[:70], o, "yes" if ok else "no"] for c, o, ok in report.statements(histories, scale, shifted)]
    print_table(rows, ["paper", "ours", "holds"])
    print(f"wrote {doc} ({wall / 60:.1f} min of training)")
    return 0


def scale_name(args: argparse.Namespace) -> str:
    return "quick" if args.quick else args.scale


if __name__ == "__main__":
    raise SystemExit(run_script(main))
