"""Score every attention head as previous-token, duplicate-token and induction head; draw attention heatmaps.

    python analyses/detect_heads.py runs/task2/ckpt.pt --n-samples 128          # a second on CPU
    python analyses/detect_heads.py runs/birth --out reports/birth

Scores (attention mass on the pattern's keys) are measured on repeated random sequences [r, r] drawn from the
checkpoint's own vocabulary ("scores") and on the task's evaluation data at its answer queries ("task_scores",
`mechmem.analysis.heads.detect_heads_on_task`, the same definition as the report's). Writes
DIR/detect_heads.json, DIR/detect_heads.png (score heatmaps) and DIR/attention.png (one task sequence).
"""

from mechmem import cli


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_analysis_args(parser, n_samples=256)
    args = parser.parse_args(argv)
    # Heavy imports after the arguments parse, so --help and usage errors answer at once.
    import torch

    from mechmem.analysis.heads import (
        attention_patterns,
        detect_heads,
        detect_heads_on_task,
        no_attention_reason,
        plot_attention,
        plot_head_scores,
        repeated_random_tokens,
    )

    ckpt, out = cli.load_for_analysis(args)
    reason = no_attention_reason(ckpt.model)
    if reason:
        print(f"skipped: {reason}")
        cli.write_json(out / "detect_heads.json", {"skipped": reason, "scores": {}})
        return 0
    model, gen = ckpt.model, torch.Generator().manual_seed(args.seed)
    half = min(model.cfg.n_ctx // 2, model.cfg.d_vocab)
    repeated = repeated_random_tokens(args.n_samples, half, model.cfg.d_vocab, generator=gen)
    random_scores = detect_heads(model, repeated, data=f"repeated random sequences, 2 x {half} tokens")
    batch = ckpt.task.eval_batch(args.n_samples, generator=gen)
    task_scores = detect_heads_on_task(model, batch.tokens, batch.loss_mask > 0)

    names = list(random_scores.scores)
    rows = [
        (
            layer,
            head,
            *(float(random_scores.scores[n][layer, head]) for n in names),
            *(float(task_scores.scores[n][layer, head]) for n in names),
        )
        for layer in range(model.cfg.n_layers)
        for head in range(model.cfg.n_heads)
    ]
    cli.print_table(rows, ["layer", "head", *(f"{n} (rep)" for n in names), *(f"{n} (task)" for n in names)])
    payload = {
        **random_scores.to_dict(),
        "task_scores": task_scores.to_dict()["scores"],
        "task_data": task_scores.data,
        "task": ckpt.task_name,
        "n_samples": args.n_samples,
        "seed": args.seed,
    }
    cli.write_json(out / "detect_heads.json", payload)
    cli.save_figure(plot_head_scores(random_scores, title=random_scores.data), out / "detect_heads.png")
    cli.save_figure(plot_head_scores(task_scores, title=task_scores.data), out / "detect_heads_task.png")
    example = batch.tokens[:1]
    cli.save_figure(
        plot_attention(attention_patterns(model, example)[:, 0], example[0]), out / "attention.png"
    )
    print(f"wrote {out / 'detect_heads.json'}, detect_heads.png, detect_heads_task.png and attention.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
