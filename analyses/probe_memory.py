"""Read a checkpoint's weights as associative memories and report each probe's recall.

    python analyses/probe_memory.py runs/birth/ckpt.pt                           # a second on CPU
    python analyses/probe_memory.py runs/task2 --n-samples 4096 --out reports/task2

Probes (see mechmem.analysis.probes): token copying through each head's OV circuit, previous-position keys
through each QK circuit, token keys written by each earlier head's OV, and each MLP against bigram statistics
(the task's own bigram table when it has one, else counted on --n-samples training sequences), over the token
sets a task names in `probe_tokens()` (the birth task: outputs, triggers, non-triggers). Writes
DIR/memory_probes.json ("probes": name, matrix, recall, chance) and DIR/memory_probes.png.
"""

from mechmem.cli import (
    ArgumentParser,
    add_analysis_args,
    load_for_analysis,
    print_table,
    run_script,
    skip,
    write_outputs,
)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    add_analysis_args(parser, n_samples=1024)
    args = parser.parse_args(argv)
    ckpt, out = load_for_analysis(args)  # checks every flag first; torch is imported from here on
    import torch

    from mechmem.analysis.heads import no_attention_reason
    from mechmem.analysis.probes import builtin_probes, empirical_bigram, plot_probes
    from mechmem.progress import working

    reason = no_attention_reason(ckpt.model)
    if reason:
        return skip(reason, out / "memory_probes.json", {"probes": []})
    model, task = ckpt.model, ckpt.task
    # Optional task protocol: `bigram` [d_vocab d_vocab_out] (the birth task keeps it on its sampler) and
    # `probe_tokens()` -> {"output_tokens", "trigger_tokens", "non_trigger_tokens"}.
    bigram = getattr(task, "bigram", None)
    if bigram is None:
        bigram = getattr(getattr(task, "sampler", None), "bigram", None)
    source = "task"
    if not isinstance(bigram, torch.Tensor):
        batch = task.train_batch(args.n_samples, generator=torch.Generator().manual_seed(args.seed))
        bigram = empirical_bigram(batch.tokens, batch.targets, model.cfg.d_vocab, model.cfg.d_vocab_out)
        source = f"counted on {args.n_samples} training sequences"
    sets = task.probe_tokens() if hasattr(task, "probe_tokens") else {}
    with working(f"probing the weights of {model.cfg.n_layers} layers as associative memories"):
        result = builtin_probes(
            model,
            bigram=bigram.float(),
            tokens=sets.get("output_tokens"),
            key_tokens=sets.get("trigger_tokens"),
            ffn_tokens=sets.get("non_trigger_tokens"),
            first_positions=(64,),
        )
    result.info.update({"bigram_source": source, "task": ckpt.task_name})

    rows = [(p.name, p.recall, p.chance, p.extra.get("kl", "")) for p in result.probes]
    print_table(rows, ["probe", "recall", "chance", "kl"])
    for line in result.info.get("skipped", []):
        print(f"skipped: {line}")
    write_outputs(out, {"memory_probes.json": result.to_dict(), "memory_probes.png": plot_probes(result)})
    print(f"wrote {out / 'memory_probes.json'} and {out / 'memory_probes.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
