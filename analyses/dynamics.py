"""Run analyses on every step checkpoint of a run,
in step order, and find when each part of the circuit forms.

    python analyses/train.py birth --preset quick --out runs/birth --save-every 50    # 30 checkpoints
    python analyses/dynamics.py runs/birth                                            # about 30 s on CPU
    python analyses/dynamics.py runs/task2 --quantities loss,heads,roles --level '*.induction=0.4'

Every checkpoint (RUN_DIR/checkpoints/step_N.pt) is measured on one evaluation draw, so the curves compare.
Quantities: loss, heads, probes (default), lens, ablation, patching, roles (see mechmem.analysis.dynamics).
Each curve's event is a stated level crossing (interpolated between saves) or its steepest change; the order
of events is printed, and beside it the same events read from the trainer's metrics.jsonl (same-named curves
and --match KEY=CURVE pairs). Writes OUT/dynamics.json (steps, curves, definitions, rules, events, cost) and
one OUT/dynamics_QUANTITY.png per quantity.

Long because its flags choose the quantities, levels and metric pairs, and it prints the order of events
beside the trainer's own.
"""

import mechmem.cli  # noqa: F401, I001  (first, so a Ctrl-C while torch imports is one line)

from pathlib import Path

from mechmem import cli
from mechmem.analysis import dynamics
from mechmem.analysis.transitions import event_order, format_order, parse_levels, parse_pairs
from mechmem.progress import working
from mechmem.tasks import load_task_module


def main(argv: list[str] | None = None) -> int:
    """Measure the chosen quantities over the step checkpoints and print the order of events.

    Long because its flags and the printed order of events are the script's whole work.
    """
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory holding checkpoints/step_N.pt")
    parser.add_argument("--out", default=None, help="output directory (default: RUN_DIR)")
    parser.add_argument(
        "--quantities",
        default="loss,heads,probes",
        help="comma-separated names, or all (default: loss,heads,probes)",
    )
    parser.add_argument(
        "--level", action="append", default=[], help="CURVE_GLOB=VALUE: the level an event needs"
    )
    parser.add_argument(
        "--match", action="append", default=[], help="KEY=CURVE: compare metrics.jsonl KEY's event"
    )
    parser.add_argument(
        "--n-samples",
        type=cli.positive_int,
        default=128,
        help="evaluation sequences, at least 2 (default 128; bounded by a memory estimate)",
    )
    parser.add_argument(
        "--seed", type=cli.seed_int, default=0, help="seed of the evaluation draw, in [0, 2**63) (default 0)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument(
        "--task-module", action="append", default=[], help="a Python file registering your tasks"
    )
    cli.add_nonfinite_flag(parser)
    args = parser.parse_args(argv)
    quantities, levels = dynamics.parse_quantities(args.quantities), parse_levels(args.level)
    matches = parse_pairs(args.match, "--match")
    out = cli.check_out_dir(args.out or args.run_dir)
    for module in args.task_module:
        load_task_module(module)
    files = dynamics.step_files(args.run_dir)
    for step, ckpt in dynamics.iter_models(files):  # one run (as --resume checks), finite weights
        cli.check_finite_weights(ckpt.model, allow=args.allow_nonfinite, what=f"step {step}")
    with working(f"measuring {', '.join(quantities)} on {len(files)} step checkpoints"):
        result = dynamics.run_dynamics(
            args.run_dir, quantities, n=args.n_samples, seed=args.seed, device=args.device
        )
    dynamics.set_levels(result, levels)

    events = event_order(result.events)
    rows = [(e.curve, e.rule.describe(), round(e.step), f"{e.interval[0]}-{e.interval[1]}") for e in events]
    cli.print_table(rows, ["curve", "event", "step", "between saves"])
    missed = [e.curve for e in result.events if not e.reached]
    print(
        f"order of events: {format_order(events)}" + (f"\nnot reached: {', '.join(missed)}" if missed else "")
    )
    print(
        f"{len(result.steps)} checkpoints, steps {result.steps[0]}..{result.steps[-1]}; seconds: "
        + ", ".join(f"{k} {v:.1f}" for k, v in result.cost_s.items())
    )
    if (Path(args.run_dir) / "metrics.jsonl").exists():
        agree = dynamics.metrics_agreement(result, args.run_dir, matches)
        result.info["metrics_agreement"] = agree
        cli.print_table(
            [
                [r[k] for k in ("metric", "curve", "from_metrics", "from_checkpoints", "within")]
                for r in agree
            ],
            ["metrics.jsonl", "curve", "step (metrics)", "step (checkpoints)", "within"],
        )
    figures = {f"dynamics_{q}.png": dynamics.plot_dynamics(result, q) for q, g in result.groups.items() if g}
    cli.write_outputs(cli.claim_out(out), {"dynamics.json": result.to_dict(), **figures})
    print(f"wrote {out / 'dynamics.json'} and dynamics_<quantity>.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
