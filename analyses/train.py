"""Train a tiny model on one of mechmem's tasks.

    python analyses/train.py permutation --preset task1-quick --out runs/task1     # time: --list permutation
    python analyses/train.py permutation --preset task2-quick --steps 2000 --seed 1
    python analyses/train.py --list                                                # every task and preset
    python analyses/train.py --list facts               # and each facts preset's time, measured here and now

Writes DIR/ckpt.pt (a self-describing checkpoint) and DIR/metrics.jsonl (one JSON line per evaluation), and
prints the final metrics. --save-every N also keeps DIR/checkpoints/step_N.pt for training-dynamics analyses;
--resume continues an interrupted run of the very same configuration (else it names the fields that differ);
a DIR that already holds a run is refused unless --overwrite (which deletes the old run's files first).

Long because it trains every task and preset, resumes, lists the presets with their measured time, and states
each numeric flag's range.
"""

import mechmem.cli  # noqa: F401, I001  (first, so a Ctrl-C while torch imports is one line)

import torch

from mechmem import cli
from mechmem.progress import format_seconds, working
from mechmem.tasks import get_task_class, load_task_module, task_names
from mechmem.training.run import train_preset

TIMED_STEPS = 20
"""Training steps timed per preset by `--list TASK`."""


def measured_seconds(task: str, preset: str, steps: int, device: str) -> float:
    """The preset's training time here and now: the trainer's own clock (model building excluded) over
    `TIMED_STEPS` steps with one tiny evaluation, scaled to `steps`."""
    run = train_preset(task, preset, steps=TIMED_STEPS, device=device, progress=False, eval_samples=8)
    return run.summary["wall_time_s"] / TIMED_STEPS * steps


def main(argv: list[str] | None = None) -> int:
    """List the presets, resume a run, or train one.

    Long because it dispatches listing, resuming and training, each a short branch.
    """
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task", nargs="?", help="task name (see --list)")
    parser.add_argument("--preset", default=None, help="preset name (see --list)")
    parser.add_argument("--out", default=None, help="run directory (default: runs/TASK-PRESET)")
    parser.add_argument(
        "--seed", type=cli.seed_int, default=None, help="seed for init, data and evaluation, in [0, 2**63)"
    )
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument("--steps", type=cli.nonnegative_int, help="override the preset's steps (>= 0)")
    parser.add_argument("--save-every", type=cli.nonnegative_int, help="keep a checkpoint every N >= 1 steps")
    parser.add_argument("--resume", action="store_true", help="continue the identical run in --out")
    parser.add_argument(
        "--overwrite", action="store_true", help="delete an old run in --out and start afresh"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--threads", type=cli.positive_int, help="CPU threads for torch, >= 1 (default: torch's choice)"
    )
    parser.add_argument(
        "--list", action="store_true", help="list tasks and presets (with TASK: time them here), then exit"
    )
    parser.add_argument(
        "--task-module", action="append", default=[], help="a Python file registering your tasks"
    )
    args = parser.parse_args(argv)
    for module in args.task_module:
        load_task_module(module)

    if args.list:  # with TASK, each preset's time comes from timing TIMED_STEPS of its steps here and now
        rows = []
        for name in [args.task] if args.task else task_names():
            for preset, spec in sorted(get_task_class(name).presets.items()):
                took = ""
                if args.task:
                    with working(f"timing {TIMED_STEPS} steps of {name} {preset}"):
                        took = format_seconds(measured_seconds(name, preset, spec.train.steps, args.device))
                rows.append((name, preset, spec.train.steps, took, spec.description))
        cli.print_table(rows, ["task", "preset", "steps", "time here", "description"])
        print(
            f"time here: {TIMED_STEPS} steps on the trainer's clock now, scaled to the preset's steps"
            if args.task
            else "--list TASK times the task's presets on this machine (descriptions: an idle CPU)"
        )
        return 0
    if not args.task or not args.preset:
        parser.error("TASK and --preset are required; --list shows them")
    if args.resume and args.overwrite:
        parser.error("--resume and --overwrite exclude each other")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out = str(cli.check_out_dir(args.out or f"runs/{args.task}-{args.preset}"))
    result = train_preset(
        args.task,
        args.preset,
        out_dir=out,
        seed=args.seed,
        steps=args.steps,
        save_every=args.save_every,
        device=args.device,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    rows = [(k, v) for k, v in result.summary.items() if isinstance(v, (int, float))]
    cli.print_table(rows, ["metric", "value"])
    print(f"wrote {result.checkpoint} and {out}/metrics.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
