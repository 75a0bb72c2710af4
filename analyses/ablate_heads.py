"""Ablate every attention head (and every attention and
MLP layer) of a checkpoint and report the metric change.

    python analyses/ablate_heads.py runs/task2/ckpt.pt --n-samples 256            # a few seconds on CPU
    python analyses/ablate_heads.py runs/task2 --metric logit_diff --methods zero mean

Zero, mean and resample ablation of each head's output z; means and resampled sequences come from a second
draw of the task's evaluation data. Prints a layer x head table of deltas per method and writes
DIR/ablate_heads.json ("results": one record per ablation) and DIR/ablate_heads.png.
"""

from mechmem import cli
from mechmem.analysis.options import ABLATION_METHODS, ABLATION_METRICS


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_analysis_args(parser, n_samples=256)
    parser.add_argument(
        "--metric",
        default="loss",
        choices=ABLATION_METRICS,
        help="task loss or masked accuracy on eval data, or logit difference on the patching pair "
        "(default: loss)",
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list(ABLATION_METHODS),
        choices=ABLATION_METHODS,
        help="ablation methods (default: all)",
    )
    args = parser.parse_args(argv)
    ckpt, out = cli.load_for_analysis(args)  # checks every flag first; torch is imported from here on
    import torch

    from mechmem.analysis.ablation import ablate_heads, plot_ablation, task_metric
    from mechmem.analysis.heads import no_attention_reason
    from mechmem.progress import working

    reason = no_attention_reason(ckpt.model)
    if reason:
        return cli.skip(reason, out / "ablate_heads.json", {"results": []})
    gen = torch.Generator().manual_seed(args.seed)
    try:
        tokens, metric, description = task_metric(ckpt.task, args.metric, args.n_samples, generator=gen)
        reference, _, _ = task_metric(ckpt.task, args.metric, args.n_samples, generator=gen)
    except NotImplementedError as exc:
        return cli.skip(
            f"--metric {args.metric} does not apply: {exc}", out / "ablate_heads.json", {"results": []}
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
    result.info.update({"task": ckpt.task_name, "n_samples": args.n_samples, "seed": args.seed})

    print(f"{args.metric} baseline {result.baseline:.4f}; delta after ablation (layer x head):")
    for i, method in enumerate(result.methods):
        print(f"\n{method} ablation")
        cli.print_table(*result.delta_table(i))
    cli.write_outputs(out, {"ablate_heads.json": result.to_dict(), "ablate_heads.png": plot_ablation(result)})
    print(f"\nwrote {out / 'ablate_heads.json'} and {out / 'ablate_heads.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
