"""Ablate every attention head (and every attention and MLP layer) of a checkpoint; report the metric change.

    mechmem ablate runs/task2/ckpt.pt --n-samples 256            # a few seconds on CPU
    mechmem ablate runs/task2 --metric logit_diff --methods zero mean

Zero, mean and resample ablation of each head's output z; means and resampled sequences come from a second
draw of the task's evaluation data. Prints a layer x head table of deltas per method and writes
DIR/ablate_heads.json ("results": one record per ablation) and DIR/ablate_heads.png.
"""

import argparse
from typing import Any

from mechmem import cli
from mechmem.analysis.options import ABLATION_METHODS, ABLATION_METRICS
from mechmem.commands.common import run_analysis


def parser(prog: str | None = None) -> cli.ArgumentParser:
    """The flags of `mechmem ablate`."""
    p = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    cli.add_analysis_args(p, n_samples=256)
    p.add_argument(
        "--metric",
        default="loss",
        choices=ABLATION_METRICS,
        help="task loss or masked accuracy on eval data, or logit difference on the patching pair "
        "(default: loss)",
    )
    p.add_argument(
        "--methods",
        nargs="+",
        default=list(ABLATION_METHODS),
        choices=ABLATION_METHODS,
        help="ablation methods (default: all)",
    )
    return p


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Ablate every head and layer of `ckpt.model`; print the delta tables; return ablate_heads.{json,png}."""
    import torch

    from mechmem.analysis.ablation import ablate_heads, plot_ablation, task_metric
    from mechmem.analysis.distribution import own_data_fit
    from mechmem.analysis.heads import no_attention_reason
    from mechmem.progress import working

    reason = no_attention_reason(ckpt.model)
    if reason:
        return cli.skipped(reason, "ablate_heads.json", {"results": []})
    gen = torch.Generator().manual_seed(args.seed)
    try:
        tokens, metric, description = task_metric(ckpt.task, args.metric, args.n_samples, generator=gen)
        reference, _, _ = task_metric(ckpt.task, args.metric, args.n_samples, generator=gen)
    except NotImplementedError as exc:
        return cli.skipped(
            f"--metric {args.metric} does not apply: {exc}", "ablate_heads.json", {"results": []}
        )
    cfg = ckpt.model.cfg
    with working(f"ablating {cfg.n_layers * cfg.n_heads} heads x {len(args.methods)} methods"):
        result = ablate_heads(
            ckpt.model,
            tokens,
            metric,
            methods=tuple(args.methods),
            reference=reference,
            generator=gen,
            metric_name=f"{args.metric}: {description}",
        )
    data = "pair" if args.metric == "logit_diff" else "eval"
    fit = own_data_fit(
        ckpt.model, ckpt.task, data, args.n_samples, generator=torch.Generator().manual_seed(args.seed)
    )
    result.info.update({"task": ckpt.task_name, "n_samples": args.n_samples, "seed": args.seed})
    result.info["prompt_fit"] = fit.to_dict()
    print(fit.message)
    print(f"{args.metric} baseline {result.baseline:.4f}; delta after ablation (layer x head):")
    for i, method in enumerate(result.methods):
        print(f"\n{method} ablation")
        cli.print_table(*result.delta_table(i))
        intervals = result.interval_table(i)
        if intervals is not None:
            print(f"95% interval of each delta ({result.to_dict()['interval']})")
            cli.print_table(*intervals)
    return {"ablate_heads.json": result.to_dict(), "ablate_heads.png": plot_ablation(result)}


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """`mechmem ablate`: parse, load, ablate, write."""
    return run_analysis(parser(prog), outputs, argv)
