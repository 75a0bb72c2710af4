"""Circuit verdicts of a birth checkpoint over prompt seeds, on the task's own pair and on the generic repeats
pair (the fallback it used before it had one), with the prompt fit of each and of head detection's probe.

    mechmem train birth --preset quick --out runs/birth_quick          # a few minutes on CPU
    python benchmarks/birth_pair.py runs/birth_quick/ckpt.pt --seeds 0 1 2 3 4 --n 64

For each seed: `discover_circuit` (mean ablation, the report's defaults) on `circuit_prompts(model, task, n,
seed)` (the birth pair) and on `circuit_pair(model, None, ...)` (the generic repeats pair), printing the
verdict, gap, faithfulness, completeness, the kept edges and the prompt fit (`prompt_fit`). Then the prompt
fit of the longest random probe of head detection (`repeats_fit`) and each head's induction score on random
repeats (`detect_heads`), for reference.
"""

import argparse

import torch

from mechmem.analysis.circuits.discovery import circuit_pair, circuit_prompts, discover_circuit
from mechmem.analysis.distribution import prompt_fit, repeats_fit
from mechmem.analysis.heads import detect_heads, probe_halves, repeated_random_tokens
from mechmem.checkpoint import load_checkpoint
from mechmem.tables import print_table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ckpt", help="a birth checkpoint (ckpt.pt)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="prompt seeds")
    p.add_argument("--n", type=int, default=64, help="prompts per circuit (the report's 64)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    ckpt = load_checkpoint(args.ckpt)
    model, task = ckpt.model, ckpt.task
    print(f"{args.ckpt}: {task.headline(ckpt.metrics)}")
    rows = []
    for seed in args.seeds:
        own = circuit_prompts(model, task, args.n, seed)
        generic = circuit_pair(model, None, args.n, generator=torch.Generator().manual_seed(seed))
        for name, (pair, source) in (("birth pair", own), ("generic pair", generic)):
            c = discover_circuit(model, pair, ablation="mean")
            reference = torch.Generator().manual_seed(seed + 1000)  # a draw other than the prompts'
            fit = prompt_fit(model, task, pair, generator=reference, source=source)
            lo, hi = c.intervals.get("faithfulness", (float("nan"), float("nan")))
            rows.append(
                [seed, name, c.verdict, c.gap, f"{c.faithfulness:.3f} [{lo:.3f}, {hi:.3f}]",
                 f"{c.completeness:.3f}", len(c.edge_names()), fit.prompt_loss, fit.task_loss,
                 fit.off_distribution]
            )  # fmt: skip
            print(f"seed {seed} {name}: {', '.join(c.edge_names())}")
    headers = ["seed", "pair", "confident", "gap", "faithfulness [CI]", "complete", "edges"]
    print_table(rows, [*headers, "prompt loss", "task loss", "off"], floatfmt=".3f")
    half = max(probe_halves(model.cfg.n_ctx, model.cfg.d_vocab))
    print(repeats_fit(model, task, half, 256, generator=torch.Generator().manual_seed(0)).message)
    tokens = repeated_random_tokens(256, half, model.cfg.d_vocab, generator=torch.Generator().manual_seed(0))
    scores = detect_heads(model, tokens).scores["induction"]
    print(f"induction score per [layer][head] on [r, r], |r| = {half}: {scores.tolist()}")


if __name__ == "__main__":
    main()
