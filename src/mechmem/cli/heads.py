"""Score every head as previous-token, duplicate-token and induction head over several probe lengths.

    mechmem heads runs/task2/ckpt.pt --n-samples 128          # a second on CPU
    mechmem heads runs/birth --out reports/birth --lengths 4,16,64

Probes (docs/analyses.md): repeated random sequences [r, r] for every half-length |r| in 4, 8, 16, ... the
context allows (or `--half` / `--lengths`), plus the task's own data. Sequences are drawn in rounds until
every head's pattern is decided (the report's policy). These pattern labels are not the report's head roles.
Also prints the top Q-, K- and V-composition pairs of heads, read off the weights, against the score of
random matrices (`mechmem.analysis.composition`). Writes DIR/detect_heads.json, DIR/detect_heads.png,
DIR/detect_heads_task.png, DIR/attention.png, DIR/composition.json and DIR/composition.png.
"""

import argparse
from typing import Any

from mechmem import cli
from mechmem.analysis.options import HEAD_BUDGET


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=HEAD_BUDGET)
    p.add_argument("--half", type=cli.positive_int, help="probe only [r, r] with |r| = HALF")
    p.add_argument(
        "--lengths",
        type=cli.positive_int_list,
        help="comma-separated |r| >= 1 of the random probes, e.g. 4,8,16",
    )
    return p


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Score every head's attention patterns; print the curves and pattern labels; return the files."""
    import torch

    from mechmem.analysis import heads
    from mechmem.analysis.distribution import repeats_fit
    from mechmem.analysis.roles import classify_heads, measure_pattern_evidence
    from mechmem.models.parts import Head
    from mechmem.progress import working

    if reason := heads.no_attention_reason(ckpt.model):
        return cli.skipped(reason, "detect_heads.json", {"scores": {}})
    model, gen = ckpt.model, torch.Generator().manual_seed(args.seed)
    halves = heads.default_halves(model, ckpt.task)
    if args.half or args.lengths:
        halves = heads.chosen_halves(model.cfg.n_ctx, model.cfg.d_vocab, half=args.half, lengths=args.lengths)
    with working(f"probing head patterns at halves {sorted(halves)}, up to {args.n_samples} sequences each"):
        found = measure_pattern_evidence(model, ckpt.task, n=args.n_samples, generator=gen, halves=halves)
    cli.print_table(found.rows(), ["head", "pattern", *found.probes])
    labels = classify_heads(found.evidence)  # pattern evidence only: no task roles
    shown = ", ".join(f"{Head(h.layer, h.head)} {h.role}" for h in labels if h.role != "none")
    print(f"attention patterns: {shown or 'none'} (head roles: mechmem report)")
    print(f"sequences per probe: {found.probe_text()}")
    fit = repeats_fit(
        model, ckpt.task, max(halves), args.n_samples, generator=torch.Generator().manual_seed(args.seed)
    )
    print(fit.message)
    scores = {k: found.evidence[k] for k in found.curves}
    payload = {
        **heads.HeadScores(scores, data="best score over the probes").to_dict(),
        "lower": {k: found.evidence[f"{k}_lower"].tolist() for k in found.curves},
        **found.to_dict(),
        "patterns": {Head(h.layer, h.head).name: {"pattern": h.role, "notes": h.notes} for h in labels},
        "task": ckpt.task_name,
        "n_samples": args.n_samples,
        "n_sequences": found.n,
        "seed": args.seed,
        "prompt_fit": fit.to_dict(),
    }
    files: dict[str, Any] = {"detect_heads.json": payload}
    for index, figure in ((len(halves) - 1, "detect_heads.png"), (-1, "detect_heads_task.png")):
        curve = {k: c["score"][index] for k, c in found.curves.items()}
        result = heads.HeadScores(curve, data=found.probes[index])
        files[figure] = heads.plot_head_scores(result, title=result.data)
    example = ckpt.task.eval_batch(1, generator=gen).tokens
    files["attention.png"] = heads.plot_attention(heads.attention_patterns(model, example)[:, 0], example[0])
    return files | composition_outputs(model, args.seed)


def composition_outputs(model: Any, seed: int) -> dict[str, Any]:
    """Print the top composition pairs per mode against the random baseline; return composition.json/.png."""
    import torch

    from mechmem.analysis import composition

    if reason := composition.no_pairs_reason(model):
        print(f"composition: skipped ({reason})")
        return {"composition.json": {"skipped": reason}}
    found = composition.composition_scores(model, generator=torch.Generator().manual_seed(seed))
    print(f"composition scores (weights): random baseline {found.baseline.text()} (mean [95% range])")
    cli.print_table(found.top_rows(3), composition.TOP_HEADERS)
    return {"composition.json": found.to_dict(), "composition.png": composition.plot_composition(found)}


main = cli.analysis_main(parser, outputs)
