"""Time every activation-patching sweep in TransformerLens and in mechmem, side by side, and check they agree.

    python benchmarks/patching.py                                    # trains two short permutation models first
    python benchmarks/patching.py runs/t1/ckpt.pt runs/t2/ckpt.pt --n-samples 128 --repeats 5

Models: each checkpoint given (its task's clean/corrupted pair), or, without paths, permutation task1-quick and
task2-quick trained for --train-steps; plus a tiny random 3-layer model on random token pairs. For each sweep it
prints the time of `transformer_lens.patching.get_act_patch_*` (given the clean cache, as its API takes one) and of
`Patcher.sweep` (given its cached runs), best of --repeats, the ratio, and the largest difference of the results.
The one-time cost of caching (TL `run_with_cache` vs building a `Patcher`) is printed per model.
"""

import argparse
import contextlib
import dataclasses
import io
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

from mechmem.analysis.patching import SWEEPS, Patcher
from mechmem.analysis.patching_reference import TL_SWEEPS
from mechmem.cli import format_table
from mechmem.tasks.base import PatchingPair

TL = TL_SWEEPS


def best_of(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def trained_models(steps: int) -> list[tuple[str, torch.nn.Module, PatchingPair]]:
    from mechmem.models import build_model
    from mechmem.tasks import build_task, get_preset
    from mechmem.training import train

    out = []
    for preset_name in ("task1-quick", "task2-quick"):
        preset = get_preset("permutation", preset_name)
        cfg = dataclasses.replace(preset.train, steps=steps, eval_every=steps, eval_samples=512)
        model = build_model(preset.model, generator=torch.Generator().manual_seed(cfg.seed))
        task = build_task("permutation", preset.task)
        with tempfile.TemporaryDirectory() as tmp:
            train(model, task, cfg, model_config=preset.model, out_dir=tmp, progress=False)
        out.append((f"permutation {preset_name} ({steps} steps)", model, task))
    return out


def random_model() -> tuple[str, torch.nn.Module, PatchingPair]:
    from mechmem.models.adapter import TransformerConfig, build_transformer

    g = torch.Generator().manual_seed(0)
    cfg = TransformerConfig(
        n_layers=3, d_model=32, n_heads=4, d_vocab=20, n_ctx=12, d_mlp=64, normalization_type="LN"
    )
    model = build_transformer(cfg, generator=g)
    n, pos = 64, 12
    clean = torch.randint(20, (n, pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, 4:] = torch.randint(20, (n, pos - 4), generator=g)
    answers = torch.randint(20, (2, n), generator=g)
    pair = PatchingPair(clean, corrupted, torch.full((n,), pos - 1), answers[0], answers[1])
    return "random 3-layer d=32 4 heads, 12 positions", model, pair


def bench_model(label: str, model: torch.nn.Module, pair: PatchingPair, repeats: int) -> list[list]:
    quiet = contextlib.redirect_stderr(io.StringIO())  # TL's per-sweep tqdm bars
    t_cache, (_, cache) = best_of(lambda: model.run_with_cache(pair.clean), repeats)
    t_patcher, patcher = best_of(lambda: Patcher(model, pair.clean, pair.corrupted, pair=pair), repeats)
    print(
        f"\n{label}: batch {len(pair.clean)}, {pair.clean.shape[1]} positions; caching TL {1e3 * t_cache:.2f} ms, "
        f"mechmem {1e3 * t_patcher:.2f} ms (both runs)"
    )
    rows = []
    for name, spec in SWEEPS.items():
        if model.cfg.attn_only and spec.stage in ("resid_mid", "mlp_out"):
            continue
        with quiet:
            t_tl, ref = best_of(partial(TL[name], model, pair.corrupted, cache, pair.logit_diff), repeats)
        t_ours, res = best_of(partial(patcher.sweep, name), repeats)
        diff = float((res.values - ref.cpu()).abs().max())
        rows.append(
            [label.split(" (")[0], name, res.values.numel(), 1e3 * t_tl, 1e3 * t_ours, t_tl / t_ours, diff]
        )
    print(
        format_table(
            rows, ["model", "sweep", "cells", "TL ms", "mechmem ms", "speed-up", "max |diff|"], floatfmt=".3g"
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "ckpts", nargs="*", help="mechmem checkpoints (default: train permutation task1/task2)"
    )
    parser.add_argument(
        "--train-steps", type=int, default=1000, help="training steps when no checkpoint is given"
    )
    parser.add_argument("--n-samples", type=int, default=128, help="clean/corrupted pairs per checkpoint")
    parser.add_argument("--repeats", type=int, default=3, help="timings are the best of this many runs")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 suits tiny models)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.ckpts:
        from mechmem.checkpoint import load_checkpoint

        loaded = [load_checkpoint(p) for p in args.ckpts]
        models = [
            (f"{c.task_name} {Path(p).parent.name}", c.model, c.task) for p, c in zip(args.ckpts, loaded)
        ]
    else:
        models = trained_models(args.train_steps)
    cases = [
        (label, m, t.patching_pair(args.n_samples, generator=torch.Generator().manual_seed(0)))
        for label, m, t in models
    ]
    cases.append(random_model())
    rows = [row for case in cases for row in bench_model(*case, repeats=args.repeats)]
    ratios = [r[5] for r in rows]
    print(
        f"\nspeed-up over {len(rows)} sweeps: median {statistics.median(ratios):.1f}x, min {min(ratios):.1f}x, "
        f"max {max(ratios):.1f}x; largest difference {max(r[6] for r in rows):.2g}"
    )
    return 0 if all(r[6] <= 1e-5 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
