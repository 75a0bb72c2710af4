"""Read a checkpoint's weights as associative memories and report each probe's recall.

    mechmem probe runs/birth/ckpt.pt                           # a second on CPU
    mechmem probe runs/task2 --n-samples 4096 --out reports/task2

Probes (mechmem.analysis.probes): OV token copying, QK previous-position and token keys, and each MLP against
bigram statistics. Writes DIR/memory_probes.json and DIR/memory_probes.png.
"""

import argparse
from typing import Any

from mechmem import cli


def parser(prog: str | None = None) -> cli.ArgumentParser:
    return cli.analysis_parser(prog, __doc__, n_samples=1024)


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Run every built-in memory probe; print their recalls; return memory_probes.{json,png}."""
    import torch

    from mechmem.analysis.heads import no_attention_reason
    from mechmem.analysis.probes import BigramSample, builtin_probes, plot_probes
    from mechmem.analysis.stats import format_interval
    from mechmem.progress import working

    if reason := no_attention_reason(ckpt.model):
        return cli.skipped(reason, "memory_probes.json", {"probes": []})
    model, task = ckpt.model, ckpt.task
    # Optional task protocol: `bigram` [d_vocab d_vocab_out] (the birth task keeps it on its sampler) and
    # `probe_tokens()` -> {"output_tokens", "trigger_tokens", "non_trigger_tokens"}.
    bigram = getattr(task, "bigram", None)
    if bigram is None:
        bigram = getattr(getattr(task, "sampler", None), "bigram", None)
    source = "task"
    if not isinstance(bigram, torch.Tensor):
        batch = task.train_batch(args.n_samples, generator=torch.Generator().manual_seed(args.seed))
        bigram = BigramSample(batch.tokens, batch.targets)  # counted there; the MLP probes get intervals
        source = f"counted on {args.n_samples} training sequences"
    else:
        bigram = bigram.float()
    sets = task.probe_tokens() if hasattr(task, "probe_tokens") else {}
    with working(f"probing the weights of {model.cfg.n_layers} layers as associative memories"):
        result = builtin_probes(
            model,
            bigram=bigram,
            tokens=sets.get("output_tokens"),
            key_tokens=sets.get("trigger_tokens"),
            ffn_tokens=sets.get("non_trigger_tokens"),
            first_positions=(64,),
        )
    result.info.update({"bigram_source": source, "task": ckpt.task_name})
    rows = [
        (p.name, p.recall, format_interval(*p.intervals["recall"]) if p.intervals else "exact")
        + (p.chance, p.extra.get("kl", ""))
        for p in result.probes
    ]
    cli.print_table(rows, ["probe", "recall", "95% interval", "chance", "kl"])
    for line in result.info.get("skipped", []):
        print(f"skipped: {line}")
    return {"memory_probes.json": result.to_dict(), "memory_probes.png": plot_probes(result)}


main = cli.analysis_main(parser, outputs)
