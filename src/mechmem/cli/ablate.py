"""Ablate every attention head (and every attention and MLP layer) of a checkpoint; report the metric change.

    mechmem ablate runs/task2/ckpt.pt --n-samples 256            # a few seconds on CPU
    mechmem ablate runs/task2 --metric logit_diff --methods zero mean

Zero, mean and resample ablation of each head's output z. Sequences are drawn in rounds (64, 128, ... up to
`--n-samples`) until every ablation is decided (docs/decisions.md, "Ablation"; the report's rule). Writes
DIR/ablate_heads.json ("results", "decision") and DIR/ablate_heads.png.
"""

import argparse
from typing import Any

from mechmem import cli
from mechmem.analysis.options import ABLATION_BUDGET, ABLATION_METRICS
from mechmem.cli.args import ABLATION_METHODS
from mechmem.errors import NotApplicable


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=ABLATION_BUDGET)
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


def ablate(ckpt: Any, args: argparse.Namespace) -> Any:
    """The ablations `args` ask for, decided over rounds of sequences; raises `NotApplicable` when the metric
    does not apply to the task."""
    from mechmem.analysis.ablation import decided_ablation
    from mechmem.analysis.stats import ABLATION_POLICY
    from mechmem.progress import working

    cfg = ckpt.model.cfg
    doing = f"ablating {cfg.n_layers * cfg.n_heads} heads x {len(args.methods)} methods"
    with working(doing + f", up to {args.n_samples} sequences"):
        try:
            result = decided_ablation(
                ckpt.model,
                ckpt.task,
                seed=args.seed,
                policy=ABLATION_POLICY.with_budget(args.n_samples),
                methods=tuple(args.methods),
                metric=args.metric,
            )
        except NotImplementedError as exc:
            raise NotApplicable(f"--metric {args.metric} does not apply: {exc}") from None
    result.metric_name = f"{args.metric}: {result.metric_name}"
    return result


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Ablate every head and layer of `ckpt.model`; print the delta tables; return ablate_heads.{json,png}."""
    import torch

    from mechmem.analysis.ablation import decision_line, plot_ablation
    from mechmem.analysis.distribution import own_data_fit
    from mechmem.analysis.heads import no_attention_reason

    if reason := no_attention_reason(ckpt.model):
        return cli.skipped(reason, "ablate_heads.json", {"results": []})
    try:
        result = ablate(ckpt, args)
    except NotApplicable as exc:
        return cli.skipped(str(exc), "ablate_heads.json", {"results": []})
    data = "pair" if args.metric == "logit_diff" else "eval"
    fit = own_data_fit(
        ckpt.model, ckpt.task, data, args.n_samples, generator=torch.Generator().manual_seed(args.seed)
    )
    n = result.info.get("n_sequences", args.n_samples)
    result.info.update({"task": ckpt.task_name, "n_samples": n, "budget": args.n_samples, "seed": args.seed})
    result.info["prompt_fit"] = fit.to_dict()
    print(fit.message)
    if result.decision is not None:
        print(decision_line(result))
    print(f"{args.metric} baseline {result.baseline:.4f}; delta after ablation (layer x head):")
    for i, method in enumerate(result.methods):
        print(f"\n{method} ablation")
        cli.print_table(*result.delta_table(i))
        intervals = result.interval_table(i)
        if intervals is not None:
            print(f"95% interval of each delta ({result.to_dict()['interval']})")
            cli.print_table(*intervals)
    return {"ablate_heads.json": result.to_dict(), "ablate_heads.png": plot_ablation(result)}


main = cli.analysis_main(parser, outputs)
