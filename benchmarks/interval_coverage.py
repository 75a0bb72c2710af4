"""Coverage of the patching intervals on a planted truth, by number of prompts: the table of
docs/record/2026-12-02-intervals.md.

    python benchmarks/interval_coverage.py                      # about a minute on CPU
    python benchmarks/interval_coverage.py --prompts 30 100 --repeats 500 --noise 3

The planted induction model's patching values are known exactly (every prompt gives the same: the induction
head's output restores the clean logit difference, the other heads change nothing). Gaussian noise of mean 0
is added per prompt to every run (clean, corrupted, each patched cell); each repeat draws fresh noise and
computes the intervals (`mechmem.analysis.patching.sweep_intervals`, the function `Patcher.sweep` calls).
Prints, per number of prompts, the fraction of (repeat, cell) pairs whose 95% interval covers the truth for
the value, the effect (value - corrupted) and the normalised effect.
"""

import argparse

import torch

from mechmem.analysis.patching import Patcher, sweep_intervals
from mechmem.analysis.planted import planted_induction_model
from mechmem.tasks import build_task


def coverage(n: int, repeats: int, noise: float, seed: int) -> dict[str, float]:
    """Fraction of covered (repeat, cell) pairs for the value, effect and normalised effect at n prompts."""
    planted = planted_induction_model()
    task = build_task("repeats", {"d_vocab": 12, "half": 8})
    pair = task.patching_pair(n, generator=torch.Generator().manual_seed(0))
    patcher = Patcher(planted, pair.clean, pair.corrupted, pair=pair)
    exact = patcher.per_prompt_values("attn_head_out_all_pos")
    clean, corrupted = patcher.prompt_values["clean"], patcher.prompt_values["corrupted"]
    value = exact[0].double()
    effect = value - float(corrupted[0])
    truth = {"value": value, "effect": effect, "normalised": effect / float(clean[0] - corrupted[0])}
    names = {"value": "", "effect": "effect_", "normalised": "normalised_"}
    g = torch.Generator().manual_seed(seed)
    hits = dict.fromkeys(truth, 0)
    for _ in range(repeats):
        iv = sweep_intervals(
            exact + noise * torch.randn(exact.shape, generator=g),
            clean + noise * torch.randn(n, generator=g),
            corrupted + noise * torch.randn(n, generator=g),
            "denoising",
            generator=g,
        )
        for name, true in truth.items():
            low = getattr(iv, f"{names[name]}lower").double()
            high = getattr(iv, f"{names[name]}upper").double()
            hits[name] += int(((low <= true) & (true <= high)).sum())
    return {name: h / (repeats * value.numel()) for name, h in hits.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prompts", type=int, nargs="+", default=[30, 60, 100, 256], help="numbers of prompts")
    p.add_argument("--repeats", type=int, default=200, help="noise draws per number of prompts")
    p.add_argument("--noise", type=float, default=6.0, help="sd of the per-prompt noise (the gap is 20)")
    p.add_argument("--seed", type=int, default=1, help="seed of the noise and the bootstrap")
    args = p.parse_args(argv)
    print("| prompts | value | effect | normalised |\n| --- | --- | --- | --- |")
    for n in args.prompts:
        c = coverage(n, args.repeats, args.noise, args.seed)
        print(f"| {n} | {c['value']:.3f} | {c['effect']:.3f} | {c['normalised']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
