"""Activation patching sweeps between the clean and corrupted inputs of a checkpoint's task.

    python analyses/patch.py runs/t2/ckpt.pt --n-samples 128                     # about a second on CPU
    python analyses/patch.py runs/t2 --sweeps resid_pre attn_head_out_by_pos --direction noising
    python analyses/patch.py runs/t2 --method attribution        # first-order estimate, one backward per run

Denoising patches clean activations into the corrupted run, noising corrupted activations into the clean run;
the metric is the task's logit difference (clean answer minus corrupted answer) at the answer position.
`--method attribution` estimates every cell from gradients (AtP*; see docs/patching.md for its measured
agreement), checks each sweep against exact patching on a sample of cells and falls back to exact patching
where they disagree (one line per sweep says which). Prints a summary table (and the layer x position /
layer x head tables) and writes DIR/patching.json ("sweeps": {name: {"axes", "values", "method", "check"}})
and one heatmap DIR/patching_<sweep>.png per sweep.

Long because it prints, per sweep, the attribution's measured agreement with exact patching and what the
script did about it, beside the table.
"""

import torch

from mechmem import cli
from mechmem.analysis.heads import no_attention_reason
from mechmem.analysis.patching import DIRECTIONS, SWEEPS, plot_patching
from mechmem.analysis.patching_tables import (
    METHODS,
    attribution_notes,
    largest_effects,
    patching_record,
    run_method,
)
from mechmem.progress import working


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_analysis_args(parser, n_samples=256)
    parser.add_argument(
        "--sweeps", nargs="+", choices=list(SWEEPS), help="sweeps to run (default: all there are)"
    )
    parser.add_argument(
        "--direction",
        choices=DIRECTIONS,
        default="denoising",
        help="denoising: clean into corrupted; noising: corrupted into clean",
    )
    parser.add_argument(
        "--method", choices=METHODS, default="exact", help="exact patching or attribution (AtP*)"
    )
    parser.add_argument(
        "--memory-mb",
        type=cli.memory_mb,
        default=256.0,
        help="memory budget of one batched pass in MB, a finite number >= 1 (default 256)",
    )
    args = parser.parse_args(argv)
    ckpt, out = cli.load_for_analysis(args)
    reason = no_attention_reason(ckpt.model)
    if reason:
        return cli.skip(reason, out / "patching.json", {"task": ckpt.task_name, "sweeps": {}})
    try:
        pair = ckpt.task.patching_pair(args.n_samples, generator=torch.Generator().manual_seed(args.seed))
    except NotImplementedError as exc:
        return cli.skip(str(exc), out / "patching.json", {"task": ckpt.task_name, "sweeps": {}})
    with working(f"patching sweeps ({args.method}, {args.n_samples} pairs)"):
        results = run_method(
            ckpt.model,
            pair,
            args.sweeps,
            method=args.method,
            direction=args.direction,
            memory_mb=args.memory_mb,
        )
    first = next(iter(results.values()))
    print(
        f"{ckpt.task_name}: {first.metric} clean {first.clean:.4f}, corrupted {first.corrupted:.4f} "
        f"({args.direction}, {args.method}, {args.n_samples} pairs)"
    )
    for line in attribution_notes(results):
        print(line)
    cli.print_table(largest_effects(results), ["sweep", "axes", "largest effect at", "metric", "normalised"])
    for name, res in results.items():
        if res.values.ndim == 2 and res.values.shape[1] <= 16:
            print(f"\n{name} ({res.axes[0]} x {res.axes[1]})")
            rows = [[i, *row] for i, row in enumerate(res.values.tolist())]
            cli.print_table(rows, [res.axes[0], *(str(j) for j in range(res.values.shape[1]))])
    record = patching_record(
        results, task=ckpt.task_name, method=args.method, n_samples=args.n_samples, seed=args.seed
    )
    cli.write_json(out / "patching.json", record)
    for name, res in results.items():
        cli.save_figure(plot_patching(res), out / f"patching_{name}.png")
    print(f"\nwrote {out / 'patching.json'} and {len(results)} heatmaps patching_<sweep>.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
