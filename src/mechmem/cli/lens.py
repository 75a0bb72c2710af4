"""Logit lens before and after every sub-layer: the target's probability and rank at each residual stage.

    mechmem lens runs/task1/ckpt.pt --n-samples 256             # a second on CPU
    mechmem lens runs/task2 --data pair --out reports/task2     # the recall probe's answer

Decodes resid_pre.L, resid_mid.L and resid_post.L through the final norm and the unembedding, scoring the
masked targets of an eval batch (--data pair: the patching pair's correct answer). Writes DIR/logit_lens.json
and DIR/logit_lens.png.
"""

import argparse
from typing import Any

from mechmem import cli
from mechmem.errors import MechmemError


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=256)
    p.add_argument(
        "--data",
        default="eval",
        choices=["eval", "pair"],
        help="eval: the task's eval batch at its masked positions; pair: the clean prompts of its "
        "patching pair, scoring the correct answer at the answer position",
    )
    p.add_argument(
        "--top-k",
        type=cli.int_range(1),
        default=5,
        help="top tokens kept per stage and position, from 1 to the model's output vocabulary (default 5)",
    )
    return p


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Decode every residual stage; print the per-stage table; return logit_lens.{json,png}."""
    import torch

    from mechmem.analysis.distribution import prompt_fit
    from mechmem.analysis.frames import position_labels
    from mechmem.analysis.logit_lens import logit_lens, plot_logit_lens, unsupported_reason
    from mechmem.analysis.stats import format_interval
    from mechmem.progress import working

    if reason := unsupported_reason(ckpt.model):
        return cli.skipped(reason, "logit_lens.json", {"stages": {}})
    if args.top_k > ckpt.model.cfg.d_vocab_out:
        raise MechmemError(
            f"--top-k {args.top_k} is more than the model's {ckpt.model.cfg.d_vocab_out} tokens"
        )
    gen = torch.Generator().manual_seed(args.seed)
    if args.data == "pair":
        try:
            pair = ckpt.task.patching_pair(args.n_samples, generator=gen)
        except NotImplementedError as exc:
            return cli.skipped(f"--data pair does not apply: {exc}", "logit_lens.json", {"stages": {}})
        tokens, targets = pair.clean, pair.correct[:, None].expand_as(pair.clean)
        mask = torch.zeros(tokens.shape).scatter_(1, pair.answer_pos[:, None], 1.0)
        prompts, source = pair, f"the {ckpt.task_name} task's clean/corrupted pair"
    else:
        batch = ckpt.task.eval_batch(args.n_samples, generator=gen)
        tokens, targets, mask = batch.tokens, batch.targets, batch.loss_mask
        prompts, source = batch, f"the {ckpt.task_name} task's evaluation data"
    with working(f"logit lens over {ckpt.model.cfg.n_layers} layers on {len(tokens)} sequences"):
        result = logit_lens(ckpt.model, tokens, targets, mask, k=args.top_k)
    summary = result.summary()
    rows = [
        (s, v["target_prob"], format_interval(v["target_prob_lower"], v["target_prob_upper"], ".4f"))
        + (v["target_rank"], v["top1_acc"])
        for s, v in summary.items()
    ]
    cli.print_table(rows, ["stage", "target p", "95% interval", "mean rank", "top-1 acc"])
    print(f"95% intervals over {len(tokens)} sequences (bootstrap)")
    fit = prompt_fit(ckpt.model, ckpt.task, prompts, generator=gen, source=source)
    print(fit.message)
    payload = {
        **result.to_dict(),
        "task": ckpt.task_name,
        "n_samples": args.n_samples,
        "seed": args.seed,
        "data": args.data,
        "example_tokens": tokens[0].tolist(),
        "example_targets": targets[0].tolist(),
        "prompt_fit": fit.to_dict(),
    }
    positions = position_labels(tokens[0], ckpt.task.token_names())
    return {"logit_lens.json": payload, "logit_lens.png": plot_logit_lens(result, positions=positions)}


main = cli.analysis_main(parser, outputs)
