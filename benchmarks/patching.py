"""Time every activation-patching sweep in TransformerLens and in mechmem, side by side, and check they agree.

    python benchmarks/patching.py                                    # trains two short permutation models
    first python benchmarks/patching.py runs/t1/ckpt.pt runs/t2/ckpt.pt --n-samples 128 --repeats 5
    python benchmarks/patching.py --no-train --models random attn-only --repeats 2   # brief: two random
    models
    python benchmarks/patching.py --archs --repeats 3        # every architecture beside the plain model
    python benchmarks/patching.py --archs Llama-like --hooks --repeats 1   # replay vs the hooks strategy
    python benchmarks/patching.py --heldout --repeats 1      # four larger models of today's architectures
    python benchmarks/patching.py --heldout --fast-path --repeats 1   # TL vs hooks vs replay, one table


Models: each checkpoint given (its task's clean/corrupted pair), or, without paths, permutation task1-quick
and task2-quick trained for --train-steps; plus random models on random token pairs (inputs differ from a
quarter of the way in, answer at the last position): a tiny 3-layer model, a 4-layer LayerNorm + MLP model
(d=128, 4 heads, 48 positions, batch 16), a 6-layer attention-only model (d=64, 8 heads, 32 positions, batch
32) and the birth demo model (the `quick` preset's config, untrained) at 64 positions, batch 16.

For each sweep it prints the time of `transformer_lens.patching.get_act_patch_*` (given the clean cache, as
its API takes one) and of `Patcher.sweep` (given its cached runs) with the metric in two forms: mechmem's
batched `PatchingMetric` and the same logit difference written as a plain callable `metric(logits) -> scalar`
(vmapped, read-out found by the dependency check); the ratios and the largest difference of each result from
TL's. Times are the best of --repeats runs (fewer when one run takes over --budget seconds). The one-time cost
of caching (TL `run_with_cache` vs building a `Patcher`) is printed per model. Under each model's table, the
floor (`benchmarks/floor.py`): each sweep's counted matmul work (one forward of the batch per cell, resumed at
the cell's layer for sweeps by layer), the machine's float32 matmul rate measured in the same run on --threads
threads, the time that work takes at that rate, and the ratio of TL's and mechmem's times to it.

`--archs` times the architectures TransformerLens can express instead (`ARCHITECTURES`: rotary, partial
rotary, grouped-query, gated MLP, RMSPre, LNPre, parallel attention + MLP, local attention, tied embeddings,
d_vocab_out != d_vocab, a NeoX-like mix, a Llama-like mix, shortformer), each a random 3-layer model of the
same size as the `plain` model beside them (d=64, 4 heads, MLP 256, LayerNorm unless named, batch 8, 24
positions), and ends with one line per architecture: the engine's strategy and the speed-up over
TransformerLens side by side; `--hooks` adds the time of the same sweeps with the engine forced onto its hooks
strategy (what a model the replay cannot run gets), in the same process.

`--heldout --fast-path` prints one table instead: per held-out sweep (the `HELDOUT` models plus a
TransformerLens 4 bridge of a Hugging Face Llama-style model of the same size, `hf_bridge_model`), the time of
TransformerLens's function, of the engine's hooks strategy (TransformerLens's own machinery: variants stacked
on the batch axis, resumed with `start_at_layer`) and of the engine's default strategy (the replay where the
model supports it), with both speed-ups over TransformerLens and the replay's over hooks, then their median
and worst case; `--small` halves each model's prompts and positions, `--models` picks models by label.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import floor_table, matmul_rate, sweep_flops

from mechmem.analysis.patching import Patcher, model_sweeps
from mechmem.analysis.patching.reference import TL_SWEEPS
from mechmem.cli import format_table
from mechmem.tasks.base import PatchingPair

TL = TL_SWEEPS


BUDGET = [2.0]  # seconds: stop repeating a timing once one run took longer (set by --budget)
RATE: list[float] = []  # the machine's matmul FLOP/s, measured once per run (`floor.matmul_rate`)


def best_of(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        if times[-1] > BUDGET[0]:
            break
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


def random_pair(vocab: int, n: int, pos: int, g: torch.Generator) -> PatchingPair:
    clean = torch.randint(vocab, (n, pos), generator=g)
    corrupted = clean.clone()
    corrupted[:, pos // 4 :] = torch.randint(vocab, (n, pos - pos // 4), generator=g)
    answers = torch.randint(vocab, (2, n), generator=g)
    return PatchingPair(clean, corrupted, torch.full((n,), pos - 1), answers[0], answers[1])


def random_models() -> list[tuple[str, torch.nn.Module, PatchingPair]]:
    """Models the project never trained, at the sizes a new user tried (see the module docstring)."""
    from mechmem.models.transformer import build_transformer
    from mechmem.models.transformer_config import TransformerConfig
    from mechmem.tasks.birth.task import BirthTask

    g = torch.Generator().manual_seed(0)
    cases = [
        ("random 3-layer", {"n_layers": 3, "d_model": 32, "n_heads": 4, "d_vocab": 20, "d_mlp": 64}, 64, 12),
        (
            "LN+MLP 4-layer",
            {"n_layers": 4, "d_model": 128, "n_heads": 4, "d_vocab": 256, "d_mlp": 512},
            16,
            48,
        ),
        (
            "attn-only 6-layer",
            {"n_layers": 6, "d_model": 64, "n_heads": 8, "d_vocab": 128, "d_mlp": None},
            32,
            32,
        ),
    ]
    out = []
    for label, kw, n, pos in cases:
        norm = {} if kw["d_mlp"] is None else {"normalization_type": "LN"}
        model = build_transformer(TransformerConfig(**kw, n_ctx=pos, **norm), generator=g).eval()
        out.append((label, model, random_pair(kw["d_vocab"], n, pos, g)))
    birth = BirthTask.presets["quick"].model
    out.append(
        ("birth demo", build_transformer(birth, generator=g).eval(), random_pair(birth.d_vocab, 16, 64, g))
    )
    return out


ARCH_BASE = {
    "n_layers": 3,
    "d_model": 64,
    "n_heads": 4,
    "d_vocab": 64,
    "d_mlp": 256,
    "normalization_type": "LN",
}
ARCHITECTURES = {
    "plain": {},
    "rotary": {"positional_embedding_type": "rotary"},
    "partial rotary": {"positional_embedding_type": "rotary", "rotary_dim": 4},
    "grouped-query": {"n_key_value_heads": 2, "normalization_type": "RMS"},
    "gated MLP": {"gated_mlp": True, "act_fn": "silu", "normalization_type": "RMS"},
    "RMSPre": {"normalization_type": "RMSPre"},
    "LNPre": {"normalization_type": "LNPre"},
    "parallel": {"parallel_attn_mlp": True},
    "local": {"attn_types": ("local", "global", "local"), "window_size": 8},
    "tied": {},  # W_U set to W_E^T
    "d_vocab_out": {"d_vocab_out": 48},
    "NeoX-like": {
        "positional_embedding_type": "rotary",
        "rotary_dim": 4,
        "n_key_value_heads": 1,
        "gated_mlp": True,
        "act_fn": "gelu",
        "parallel_attn_mlp": True,
    },
    "Llama-like": {
        "positional_embedding_type": "rotary",
        "rotary_dim": 8,
        "n_key_value_heads": 2,
        "gated_mlp": True,
        "act_fn": "silu",
        "normalization_type": "RMS",
    },
    "shortformer": {"positional_embedding_type": "shortformer"},
}
"""--archs: architecture name -> `TransformerConfig` fields over `ARCH_BASE`."""


def architecture_models(names: list[str]) -> list[tuple[str, torch.nn.Module, PatchingPair]]:
    """One random model per architecture in `names` (all when empty), the same size, on the same kind of
    random pair; an architecture the installed TransformerLens cannot build is skipped with a line saying why
    (an error when it was named)."""
    from mechmem.errors import MechmemError
    from mechmem.models.transformer import build_transformer
    from mechmem.models.transformer_config import TransformerConfig

    out = []
    for name, kw in ARCHITECTURES.items():
        if names and name not in names:
            continue
        g = torch.Generator().manual_seed(0)
        try:
            model = build_transformer(TransformerConfig(**(ARCH_BASE | kw), n_ctx=24), generator=g).eval()
        except MechmemError as err:
            if names:
                raise
            print(f"skipped {name}: {err}", flush=True)
            continue
        if name == "tied":
            with torch.no_grad():
                model.unembed.W_U.copy_(model.embed.W_E.T)
        out.append((name, model, random_pair(model.cfg.d_vocab_out, 8, 24, g)))
    return out


HELDOUT = {
    "rotary GQA 2x128x8": (
        {"n_layers": 2, "d_model": 128, "n_heads": 8, "n_key_value_heads": 2, "d_mlp": 512, "d_vocab": 256,
         "positional_embedding_type": "rotary", "normalization_type": "RMS", "act_fn": "silu"},
        16, 48,
    ),
    "partial-rotary LN gelu_new 3x128x4": (
        {"n_layers": 3, "d_model": 128, "n_heads": 4, "d_mlp": 512, "d_vocab": 256, "rotary_dim": 16,
         "positional_embedding_type": "rotary", "normalization_type": "LN", "act_fn": "gelu_new"},
        16, 40,
    ),
    "LNPre attn-only 5x64x8": (
        {"n_layers": 5, "d_model": 64, "n_heads": 8, "d_mlp": None, "d_vocab": 128,
         "normalization_type": "LNPre"},
        32, 32,
    ),
    "RMS gated gelu_new 4x96x6": (
        {"n_layers": 4, "d_model": 96, "n_heads": 6, "d_mlp": 384, "d_vocab": 128, "gated_mlp": True,
         "normalization_type": "RMS", "act_fn": "gelu_new"},
        16, 32,
    ),
}  # fmt: skip
"""--heldout: label -> (`TransformerConfig` fields, batch, positions): models at the sizes of the models
new users brought (2-5 layers, d_model 64-128, up to 8 heads), each with a feature of today's small models;
none of them is a model any other benchmark or test of the project uses."""


def heldout_models() -> list[tuple[str, torch.nn.Module, PatchingPair]]:
    """One random model per `HELDOUT` entry on a random token pair of its size."""
    from mechmem.models.transformer import build_transformer
    from mechmem.models.transformer_config import TransformerConfig

    out = []
    for label, (kw, n, pos) in HELDOUT.items():
        g = torch.Generator().manual_seed(1)
        model = build_transformer(TransformerConfig(**kw, n_ctx=pos), generator=g).eval()
        out.append((label, model, random_pair(kw["d_vocab"], n, pos, g)))
    return out


def plain_logit_diff(pair: PatchingPair):
    """The logit difference as a user writes it: a plain callable, not recognised as `pair.logit_diff`."""
    rows = torch.arange(len(pair.clean))

    def logit_diff(logits: torch.Tensor) -> torch.Tensor:
        at = logits[rows, pair.answer_pos]
        return (at[rows, pair.correct] - at[rows, pair.incorrect]).mean()

    return logit_diff


def bench_model(label: str, model: torch.nn.Module, pair: PatchingPair, repeats: int) -> list[list]:
    quiet = contextlib.redirect_stderr(io.StringIO())  # TL's per-sweep tqdm bars
    t_cache, (_, cache) = best_of(lambda: model.run_with_cache(pair.clean), repeats)
    t_patcher, patcher = best_of(lambda: Patcher(model, pair.clean, pair.corrupted, pair=pair), repeats)
    plain = Patcher(model, pair.clean, pair.corrupted, plain_logit_diff(pair))
    assert plain.metric.mode == "vmap"
    print(
        f"\n{label}: batch {len(pair.clean)}, {pair.clean.shape[1]} positions; "
        f"caching TL {1e3 * t_cache:.2f} ms, "
        f"mechmem {1e3 * t_patcher:.2f} ms (both runs)"
    )
    rows, work = [], []
    batch, pos = pair.clean.shape
    for name in model_sweeps(model):
        with quiet:
            t_tl, ref = best_of(partial(TL[name], model, pair.corrupted, cache, pair.logit_diff), repeats)
        t_ours, res = best_of(partial(patcher.sweep, name), repeats)
        t_call, res_call = best_of(partial(plain.sweep, name), repeats)
        diff = max(float((r.values - ref.cpu()).abs().max()) for r in (res, res_call))
        flops = sweep_flops(model.cfg, res.axes, tuple(res.values.shape), batch, pos)
        work.append((name, flops, {"TL": t_tl, "batched": t_ours}))
        rows.append(
            [label, name, res.values.numel(), 1e3 * t_tl, 1e3 * t_ours, 1e3 * t_call]
            + [t_tl / t_ours, t_tl / t_call, t_call / t_ours, diff]
        )
    print(format_table(rows, HEADERS, floatfmt=".3g"))
    rate = RATE[0] if RATE else matmul_rate()
    print(f"{label}: work per sweep = {FLOOR_WORK}")
    print(floor_table(work, rate))
    return rows


FLOOR_WORK = "one forward of the batch per cell, resumed at the cell's layer for sweeps by layer"
HEADERS = ["model", "sweep", "cells", "TL ms", "batched ms", "callable ms"]
HEADERS += ["TL/batched", "TL/callable", "callable/batched", "max |diff|"]


def summary(label: str, rows: list[list]) -> str:
    def stats(i: int, worst=min) -> str:
        values = [r[i] for r in rows]
        return f"median {statistics.median(values):.2f}, worst {worst(values):.2f}"

    return (
        f"{label} ({len(rows)} sweeps): speed-up over TL batched {stats(6)}; callable {stats(7)}; "
        f"callable/batched time {stats(8, max)}; largest difference {max(r[9] for r in rows):.2g}"
    )


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
    parser.add_argument(
        "--budget", type=float, default=2.0, help="stop repeating a timing after a run this long (s)"
    )
    parser.add_argument(
        "--no-train", action="store_true", help="only the random models (no permutation training)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 suits tiny models)")
    parser.add_argument(
        "--models",
        nargs="+",
        help="only the random (or with --fast-path, held-out) models whose label starts with one of these",
    )
    parser.add_argument(
        "--archs",
        nargs="*",
        help="time the architecture models instead (ARCHITECTURES; names to pick some, none for all)",
    )
    parser.add_argument(
        "--heldout",
        action="store_true",
        help="time the held-out models instead (HELDOUT: rotary, grouped-query, gated, LNPre; 2-5 layers)",
    )
    parser.add_argument(
        "--hooks",
        action="store_true",
        help="with --archs: also time every sweep with the engine forced onto hooks (its fallback strategy)",
    )
    parser.add_argument(
        "--fast-path",
        action="store_true",
        help="with --heldout: one table of TL, hooks and replay per sweep (adds an HF bridge)",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="with --fast-path: half the prompts and half the positions of each model (a run of minutes)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    BUDGET[0] = args.budget
    RATE.append(matmul_rate())
    if args.archs is not None:
        return architectures(args.archs, args.repeats, args.hooks)
    if args.heldout and args.fast_path:
        return fast_path_table(args.repeats, args.small, args.models)
    if args.heldout:
        rows = [row for case in heldout_models() for row in bench_model(*case, args.repeats)]
        print("\n" + summary("held-out models", rows))
        return 0 if all(r[9] <= 1e-5 for r in rows) else 1
    if args.ckpts:
        from mechmem.checkpoint import load_checkpoint

        loaded = [load_checkpoint(p) for p in args.ckpts]
        models = [
            (f"{c.task_name} {Path(p).parent.name}", c.model, c.task) for p, c in zip(args.ckpts, loaded)
        ]
    else:
        models = [] if args.no_train else trained_models(args.train_steps)
    cases = [
        (label.split(" (")[0], m, t.patching_pair(args.n_samples, generator=torch.Generator().manual_seed(0)))
        for label, m, t in models
    ]
    cases += [c for c in random_models() if not args.models or c[0].startswith(tuple(args.models))]
    rows = [row for case in cases for row in bench_model(*case, repeats=args.repeats)]
    print()
    for label, _, _ in cases:
        print(summary(label, [r for r in rows if r[0] == label]))
    larger = [r for r in rows if r[0] in ("LN+MLP 4-layer", "attn-only 6-layer", "birth demo")]
    if larger:
        print(summary("the larger models", larger))
    print(summary("all models", rows))
    return 0 if all(r[9] <= 1e-5 for r in rows) else 1


def hooks_ms(model: torch.nn.Module, pair: PatchingPair, repeats: int) -> float:
    """Milliseconds of every sweep of `model` with the engine forced onto its hooks strategy (as on a model
    the replay cannot run), batched metric."""
    patcher = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    patcher.engine.replay = None
    return 1e3 * sum(best_of(partial(patcher.sweep, name), repeats)[0] for name in model_sweeps(model))


def architectures(names: list[str], repeats: int, hooks: bool = False) -> int:
    """Every sweep on each architecture model, then one line per architecture with its ratios (with `hooks`,
    also the time of all its sweeps on the engine's hooks strategy)."""
    cases = architecture_models(names)
    rows, strategies, on_hooks = [], {}, {}
    for label, model, pair in cases:
        strategies[label] = Patcher(model, pair.clean, pair.corrupted, pair=pair).engine.strategy
        rows += bench_model(label, model, pair, repeats)
        if hooks:
            on_hooks[label] = hooks_ms(model, pair, repeats)
    table = []
    for label, _, _ in cases:
        mine = [r for r in rows if r[0] == label]
        ratios = [r[6] for r in mine]
        ours = sum(r[4] for r in mine)
        table.append(
            [label, strategies[label], len(mine), sum(r[3] for r in mine), ours]
            + [sum(r[3] for r in mine) / ours, statistics.median(ratios), min(ratios)]
            + [max(r[9] for r in mine)]
            + ([on_hooks[label], on_hooks[label] / ours] if hooks else [])
        )
    print()
    head = ["architecture", "strategy", "sweeps", "TL ms (all)", "mechmem ms (all)", "TL/mechmem (all)"]
    head += ["median TL/mechmem", "worst", "max |diff|"] + (
        ["hooks ms (all)", "hooks/mechmem"] if hooks else []
    )
    print(format_table(table, head, floatfmt=".3g"))
    return 0 if all(r[9] <= 1e-5 for r in rows) else 1


def hf_bridge_model(folder: str) -> tuple[str, torch.nn.Module, PatchingPair]:
    """A random Llama-style `transformers` model (2 layers, d_model 128, 8 heads, 2 key-value heads, gated
    MLP, RMSNorm, rotary) saved to `folder` and loaded by path: a TransformerLens 4 bridge under TL 4."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from mechmem.models.huggingface import load_pretrained

    vocab, pos, n = 256, 48, 16
    torch.manual_seed(1)  # transformers initialises from the global RNG (benchmark only)
    config = LlamaConfig(
        vocab_size=vocab,
        max_position_embeddings=pos,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=512,
    )
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    words = Tokenizer(WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0").save_pretrained(folder)
    model = load_pretrained(folder).eval()
    return "HF Llama bridge 2x128x8", model, random_pair(vocab, n, pos, torch.Generator().manual_seed(1))


def halved(case: tuple[str, torch.nn.Module, PatchingPair]) -> tuple[str, torch.nn.Module, PatchingPair]:
    """`case` on the first half of its prompts cut to the first half of its positions (answer at the last)."""
    label, model, pair = case
    n, pos = len(pair.clean) // 2, pair.clean.shape[1] // 2
    cut = PatchingPair(
        pair.clean[:n, :pos], pair.corrupted[:n, :pos], torch.full((n,), pos - 1), pair.correct[:n],
        pair.incorrect[:n],
    )  # fmt: skip
    return label, model, cut


def fast_path_table(repeats: int, small: bool = False, only: list[str] | None = None) -> int:
    """Per held-out sweep: TransformerLens, the hooks strategy and the default strategy (replay where the
    model supports it), ratios side by side, then the median and worst case of each ratio."""
    quiet = contextlib.redirect_stderr(io.StringIO())  # TL's per-sweep tqdm bars
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = heldout_models() + [hf_bridge_model(tmp)]
        cases = [c for c in cases if not only or c[0].startswith(tuple(only))]
        if small:
            cases = [halved(c) for c in cases]
        for label, model, pair in cases:
            _, cache = model.run_with_cache(pair.clean)
            replay = Patcher(model, pair.clean, pair.corrupted, pair=pair)
            hooks = Patcher(model, pair.clean, pair.corrupted, pair=pair)
            hooks.engine.replay = None
            for name in model_sweeps(model):
                with quiet:
                    t_tl, ref = best_of(
                        partial(TL[name], model, pair.corrupted, cache, pair.logit_diff), repeats
                    )
                t_hooks, res_h = best_of(partial(hooks.sweep, name), repeats)
                t_replay, res_r = best_of(partial(replay.sweep, name), repeats)
                diff = max(float((r.values - ref.cpu()).abs().max()) for r in (res_h, res_r))
                rows.append(
                    [label, replay.engine.strategy, name, 1e3 * t_tl, 1e3 * t_hooks, 1e3 * t_replay]
                    + [t_tl / t_hooks, t_tl / t_replay, t_hooks / t_replay, diff]
                )
                print(format_table(rows[-1:], FAST_HEADERS, floatfmt=".3g").splitlines()[-1], flush=True)
    print()
    print(format_table(rows, FAST_HEADERS, floatfmt=".3g"))
    for i, what in ((6, "TL/hooks"), (7, "TL/replay"), (8, "hooks/replay")):
        values = [r[i] for r in rows]
        print(
            f"{what}: median {statistics.median(values):.2f}, worst {min(values):.2f} ({len(values)} sweeps)"
        )
    return 0 if all(r[9] <= 1e-5 for r in rows) else 1


FAST_HEADERS = ["model", "strategy", "sweep", "TL ms", "hooks ms", "replay ms"]
FAST_HEADERS += ["TL/hooks", "TL/replay", "hooks/replay", "max |diff|"]


if __name__ == "__main__":
    sys.exit(main())
