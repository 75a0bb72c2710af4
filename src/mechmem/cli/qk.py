"""Why each head attends: its attention score split into (query source, key source) contributions.

    mechmem qk runs/task2/ckpt.pt --n-samples 64                # every head, a few seconds on CPU
    mechmem qk tests/data/heldout/rotary.pt --head L1H2 --head L1H3 --out reports/qk

Sources are the direct components of the residual stream entering the head's layer (embed, pos, earlier
heads and MLPs, one bias source); the contributions sum to the model's pre-softmax score exactly, with each
position's norm scale frozen where a norm precedes attention (`mechmem.analysis.qk`). Sites: the task's role
probes, induction and previous-token sites. Each head's key-side and query-side rankings are compared with
exact path patching of its k and q edges on the task's patching pair (zero ablation). Writes
DIR/qk_attribution.json and DIR/qk_attribution.png.
"""

import argparse
import dataclasses
import re
from typing import Any

from mechmem import cli

TOP = 5
"""Pairs and marginal sources printed per head and site set."""


def head_name(text: str) -> str:
    """A head name "L<layer>H<head>", checked in form before torch is imported (against the model after
    loading)."""
    match = re.fullmatch(r"L(\d+)H(\d+)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} names no head: expected L<layer>H<head>, e.g. L0H1")
    return f"L{int(match[1])}H{int(match[2])}"


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=64)
    p.add_argument(
        "--head",
        action="append",
        type=head_name,
        metavar="LlHh",
        help="a head to explain, e.g. L1H1; repeatable (default: every head)",
    )
    return p


def interval(low: Any, high: Any) -> str:
    """[low, high] to three decimals."""
    from mechmem.analysis.stats import format_interval

    return format_interval(low, high, ".3f")


def print_entry(entry: Any) -> None:
    """One head on one site set: its top pairs, then its key-side and query-side marginals."""
    where = f" ({entry.note})" if entry.note else ""
    print(
        f"\n{entry.head} on {entry.sites}{where}: {len(entry.per_prompt)} prompts, {entry.n_pairs} pairs; "
        f"terms sum to the model's scores within {entry.max_error:.1e}"
    )
    pairs = [p for p in entry.top(TOP) if p.contribution != 0.0]  # exact zeros: sources the head cannot read
    rows = [[p.query_source, p.key_source, p.contribution, interval(p.lower, p.upper)] for p in pairs]
    cli.print_table(rows, ["query source", "key source", "contribution", "95% interval"], floatfmt=".3f")
    for side in ("key", "query"):
        mean, low, high = entry.interval(side)
        order = mean.abs().argsort(descending=True)[:TOP].tolist()
        shown = ", ".join(
            f"{entry.sources[i]} {float(mean[i]):.3f} {interval(low[i], high[i])}" for i in order
        )
        print(f"  {side} side: {shown}")


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Attribute every chosen head's scores; compare with patching; print the tables; return the files."""
    from mechmem.analysis import qk
    from mechmem.progress import working

    model, task = ckpt.model, ckpt.task
    if reason := qk.qk_unsupported(model):
        return cli.skipped(reason, "qk_attribution.json")
    heads = qk.parse_heads(model, args.head)
    with working(f"splitting the scores of {len(heads)} heads over {args.n_samples} prompts per site set"):
        result = qk.qk_attribution(model, task, heads=heads, n=args.n_samples, seed=args.seed)
    print(f"convention: {result.convention}" + (f"; {result.rotary}" if result.rotary else ""))
    print(f"intervals: {qk.INTERVAL}")
    for entry in result.entries:
        print_entry(entry)
    with working("path patching each head's q and k edges"):
        agreement = qk.qk_patching_agreement(model, task, heads, n=args.n_samples, seed=args.seed)
    if agreement:
        print(
            "\nagreement with exact path patching of the q / k edges (zero ablation), on "
            f"{agreement[0].prompts}:"
        )
        for a in agreement:
            print(f"  {a.message}")
    result = dataclasses.replace(result, agreement=tuple(agreement))
    payload = {**result.to_dict(), "task": ckpt.task_name, "n_samples": args.n_samples, "seed": args.seed}
    return {"qk_attribution.json": payload, "qk_attribution.png": qk.plot_qk_attribution(result)}


main = cli.analysis_main(parser, outputs)
