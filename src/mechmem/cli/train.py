"""Train a tiny model on one of mechmem's tasks.

    mechmem train permutation --preset task1-quick --out runs/task1     # time: see --list
    mechmem train permutation --preset task2-quick --steps 2000 --seed 1
    mechmem train --list                           # every task and preset, with its measured time
    mechmem train --list facts                     # and each facts preset's time here and now
    mechmem train permutation --preset task2-quick --intervene L0H1=zero --intervene-until 500

--intervene SPEC sets an activation in every training forward pass (gradients flow through the rest) before
step --intervene-until (default: the whole run; evaluations at those steps too): L<l>H<h>=zero|mean (a head's
output, blocks.<l>.attn.hook_z), HOOK=zero|mean (any TransformerLens hook, e.g. blocks.0.hook_resid_post),
HOOK[i]=zero|mean (index i of its last axis, e.g. neuron i of blocks.0.mlp.hook_post). mean is the mean over
the training batch at each position, detached. The checkpoint's train config records them; --resume refuses
a run trained under others.

Writes DIR/ckpt.pt and DIR/metrics.jsonl (one JSON line per evaluation); --save-every N also keeps
DIR/checkpoints/step_N.pt. A DIR that already holds a run is refused unless --overwrite or --resume.
"""

from pathlib import Path

from mechmem import cli


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    parser = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("task", nargs="?", help="task name (see --list)")
    parser.add_argument("--preset", default=None, help="preset name (see --list)")
    parser.add_argument("--out", default=None, help="run directory (default: runs/TASK-PRESET)")
    parser.add_argument("--seed", type=cli.seed_int, default=None, help="seed, in [0, 2**63)")
    parser.add_argument(
        "--device", type=cli.device_name, default="cpu", help="auto, cpu or cuda (default: cpu)"
    )
    parser.add_argument(
        "--steps", type=cli.step_count, help=f"override the preset's steps, in [0, {cli.MAX_STEPS}]"
    )
    parser.add_argument(
        "--save-every",
        type=cli.int_range(1, cli.MAX_STEPS),
        metavar="N",
        help=f"keep a checkpoint every N steps, N in [1, {cli.MAX_STEPS}]",
    )
    parser.add_argument("--resume", action="store_true", help="continue the identical run in --out")
    parser.add_argument("--overwrite", action="store_true", help="delete an old run in --out first")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    cli.add_threads_flag(parser)
    parser.add_argument("--list", action="store_true", help="list tasks and presets with their measured time")
    parser.add_argument(
        "--intervene",
        action="append",
        default=[],
        metavar="SPEC",
        type=cli.intervention_spec,
        help="set an activation while training: L<l>H<h>=zero|mean, HOOK=zero|mean or HOOK[i]=zero|mean "
        "(repeatable; see above)",
    )
    parser.add_argument(
        "--intervene-until",
        type=cli.step_count,
        metavar="STEP",
        help="apply the --intervene specs to the steps before STEP only (default: the whole run)",
    )
    cli.add_task_module_arg(parser)
    args = parser.parse_args(argv)
    if not args.list and (not args.task or not args.preset):
        parser.error("TASK and --preset are required; --list shows them")
    if args.resume and args.overwrite:
        parser.error("--resume and --overwrite exclude each other")
    if args.intervene_until is not None and not args.intervene:
        parser.error("--intervene-until needs --intervene")
    from mechmem.training.timings import check_preset_name  # no torch: the committed index of presets

    if args.list and not args.task and not args.task_module:
        return list_presets()
    out = None
    if not args.list:
        out = str(cli.check_out_dir(args.out if args.out is not None else f"runs/{args.task}-{args.preset}"))
        if not args.task_module:
            check_preset_name(args.task, args.preset)
        if args.resume and not any((Path(out) / n).exists() for n in ("ckpt.pt", "resume.pt", "checkpoints")):
            raise cli.UsageError(f"--resume: no checkpoint with trainer state in {out} (nothing to resume)")
    # torch is imported from here on, after every check the flags alone decide; then the device, at once
    from mechmem.config import resolve_device

    resolve_device(args.device)
    from mechmem.tasks import load_task_module
    from mechmem.threads import use_threads
    from mechmem.training.run import train_preset

    for module in args.task_module:
        load_task_module(module)
    if args.list:
        return list_presets(args.task, args.device)
    use_threads(args.threads)
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
        interventions=args.intervene or None,
        **({} if args.intervene_until is None else {"intervene_until": args.intervene_until}),
    )
    rows = [(k, v) for k, v in result.summary.items() if isinstance(v, (int, float))]
    table = cli.format_table(rows, ["metric", "value"])
    if "interventions" in result.summary:
        table += f"\ntrained under interventions: {result.summary['interventions']}"
    print(table)
    write_train_log(Path(out), table)
    print(f"wrote {result.checkpoint}, {out}/metrics.jsonl and {out}/train.log")
    print(f"next: mechmem report {result.checkpoint}    (or mechmem analyse {result.checkpoint})")
    return 0


def list_presets(task: str | None = None, device: str = "cpu") -> int:
    """Print `mechmem train --list [TASK]`: every task's presets with their measured time (and, for TASK, its
    time here)."""
    from mechmem.training.timings import preset_rows

    rows, headers, note = preset_rows(task, device=device)
    cli.print_table(rows, headers)
    print(note)
    return 0


def write_train_log(run: Path, summary: str) -> None:
    """RUN/train.log: every evaluation of metrics.jsonl as one line of words, then the final summary."""
    from mechmem.io import atomic_write
    from mechmem.training.rundir import read_metrics

    def line(record: dict) -> str:
        values = [f"{k} {v:.4g}" for k, v in record.items() if k != "step" and isinstance(v, (int, float))]
        return f"step {record.get('step')}: " + ", ".join(values)

    lines = [line(record) for record in read_metrics(run) if isinstance(record, dict)]
    atomic_write(run / "train.log", "\n".join([*lines, "", "final", summary, ""]), root=run)
