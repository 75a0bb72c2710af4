"""Activation patching sweeps between the clean and corrupted inputs of a checkpoint's task.

    mechmem patch runs/t2/ckpt.pt --n-samples 128                     # about a second on CPU
    mechmem patch runs/t2 --sweeps resid_pre attn_head_out_by_pos --direction noising
    mechmem patch runs/t2 --method attribution        # first-order estimate, one backward per run

Denoising patches clean activations into the corrupted run, noising corrupted into clean; the metric is the
task's logit difference at the answer position. `--method attribution` estimates every cell from gradients
(AtP*), checked against exact patching on a sample of cells. Pairs are drawn in rounds until every cell is
decided (docs/decisions.md; the report's rule). Writes DIR/patching.json and one DIR/patching_<sweep>.png per
sweep.
"""

import argparse
from typing import Any

from mechmem import cli
from mechmem.analysis.options import PATCH_BUDGET
from mechmem.cli.args import PATCH_DIRECTIONS, PATCH_METHODS, PATCH_SWEEPS


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=PATCH_BUDGET)
    p.add_argument("--sweeps", nargs="+", choices=PATCH_SWEEPS, help="sweeps to run (default: all there are)")
    p.add_argument(
        "--direction",
        choices=PATCH_DIRECTIONS,
        default="denoising",
        help="denoising: clean into corrupted; noising: corrupted into clean",
    )
    p.add_argument("--method", choices=PATCH_METHODS, default="exact", help="exact, or attribution (AtP*)")
    cli.add_memory_flag(p)
    return p


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run the patching sweeps on the task's pairs; print the tables; return patching.json and heatmaps."""
    import torch

    from mechmem.analysis.distribution import own_data_fit
    from mechmem.analysis.heads import no_attention_reason
    from mechmem.analysis.patching import patch_checkpoint, patching_lines, plot_patching
    from mechmem.analysis.patching.decided import decision_lines
    from mechmem.analysis.patching.tables import pair_positions
    from mechmem.errors import NotApplicable
    from mechmem.progress import working

    empty = {"task": ckpt.task_name, "sweeps": {}}
    if reason := no_attention_reason(ckpt.model):
        return cli.skipped(reason, "patching.json", empty)
    try:
        with working(f"patching sweeps ({args.method}, up to {args.n_samples} pairs)"):
            decided, record = patch_checkpoint(
                ckpt,
                args.sweeps,
                n=args.n_samples,
                seed=args.seed,
                method=args.method,
                direction=args.direction,
                memory_mb=args.memory_mb,
            )
    except NotApplicable as exc:  # the task has no clean/corrupted pairs
        return cli.skipped(str(exc), "patching.json", empty)
    results, positions = decided.results, pair_positions(ckpt.task, seed=args.seed)
    for line in patching_lines(
        results,
        task=ckpt.task_name,
        method=args.method,
        direction=args.direction,
        n=decided.n,
        positions=positions,
    ):
        print(line)
    for line in decision_lines(decided):
        print(line)
    fit = own_data_fit(
        ckpt.model, ckpt.task, "pair", args.n_samples, generator=torch.Generator().manual_seed(args.seed)
    )
    record["prompt_fit"] = fit.to_dict()
    print(fit.message)
    figures = {
        f"patching_{name}.png": plot_patching(res, positions=positions) for name, res in results.items()
    }
    return {"patching.json": record, **figures}


main = cli.analysis_main(parser, outputs)
