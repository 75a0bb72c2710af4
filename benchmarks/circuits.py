"""Edge-level circuit discovery per model: the circuit, its faithfulness, timings, and EAP against exact
scores.

    python benchmarks/circuits.py runs/demo/*/ckpt.pt            # the demo models, plus planted and random
    ones python benchmarks/circuits.py --ablation corrupted --n 64

Models: the planted induction model, three random 2-layer models (seeds 0-2) and every checkpoint given. For
each it runs `discover_circuit` with mean (or --ablation) ablation on --n prompts of `circuit_pair` and prints
the circuit, faithfulness, completeness and the confidence rule's verdict; the wall time of exact edge scoring
through the engine (all edges batched), of the same variants one `run_with_hooks` each (`naive_intervene`),
their ratio, and the times of EAP (one forward + backward) and of pruning; then EAP's agreement with the exact
scores (Pearson, Spearman, top-10 overlap). Times are single runs on --threads torch threads (the machine's
load shows).

    python benchmarks/circuits.py --agreement --n 32 --train-steps 600    # first order vs integrated
    gradients

`--agreement` instead measures, on the planted induction model and on a held-out kind (a 3-layer
LayerNorm/GELU model with 4 heads per layer, trained here for --train-steps on repeats [r, r] of 6-16 random
tokens), how well each gradient estimate agrees with exact scores over EVERY cell: edge attribution (EAP, and
EAP-IG with k interpolation steps) against exact path patching of every edge (mean ablation), and the patching
sweeps (first order with AtP*'s query/key fix, and integrated gradients) against exact activation patching
(median over the sweeps, denoising). Cost: forward + backward passes and seconds.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import build_model

from mechmem.analysis.circuits import EdgePatcher
from mechmem.analysis.circuits.discovery import (
    attribution_agreement,
    circuit_pair,
    discover_circuit,
    edge_attribution,
)
from mechmem.analysis.interventions import Intervention, apply
from mechmem.analysis.interventions.reference import naive_intervene
from mechmem.analysis.patching import Patcher
from mechmem.analysis.patching.attribution import Attributor, judge
from mechmem.analysis.patching.tables import model_sweeps
from mechmem.analysis.planted import planted_induction_model
from mechmem.checkpoint import load_checkpoint
from mechmem.cli import format_table
from mechmem.errors import MechmemError

HEADERS = [
    "model",
    "edges",
    "kept",
    "faithful",
    "complete",
    "confident",
    "exact s",
    "naive s",
    "speed-up",
    "EAP s",
    "prune s",
    "pearson",
    "spearman",
    "top-10",
]


def naive_exact_seconds(model, pair, ablation: str) -> float:
    """Wall time of the exact edge scores as one `run_with_hooks` per edge (the engine's reference)."""
    patcher = EdgePatcher(model, pair, ablation)
    deltas = {u.name: patcher.delta(u) for u in patcher.senders}
    variants = [
        [Intervention(e.port.hook, e.port.index, apply(lambda a, h, d=deltas[e.sender.name]: a + d))]
        for e in patcher.graph.edges
    ]
    start = time.perf_counter()
    naive_intervene(model, patcher.tokens, variants, patcher.metric)
    return time.perf_counter() - start


def bench(label: str, model, task, args) -> tuple[list, list[str]]:
    pair, _ = circuit_pair(model, task, args.n, generator=torch.Generator().manual_seed(0))
    c = discover_circuit(model, pair, ablation=args.ablation, with_attribution=True)
    naive = naive_exact_seconds(model, pair, args.ablation)
    agree = attribution_agreement(c)
    t = c.timings
    row = [
        label,
        len(c.graph.edges),
        int(c.kept.sum()),
        c.faithfulness,
        c.completeness,
        c.confident,
        t["exact"],
        naive,
        naive / t["exact"],
        t["attribution"],
        t["prune"],
        agree["pearson"],
        agree["spearman"],
        agree["top_k"],
    ]
    return row, [
        f"{label}: " + (", ".join(c.edge_names()) or "none") + f"  (values {c.values}, {c.criteria()})"
    ]


def trained_repeats_model(steps: int, seed: int = 0) -> torch.nn.Module:
    """The held-out kind: 3 layers, LayerNorm, GELU MLPs, 4 heads per layer, trained with Adam on [r, r] with
    |r| drawn from 6..16 per batch (loss on the second copy)."""
    from mechmem.models.transformer import build_transformer
    from mechmem.models.transformer_config import TransformerConfig

    cfg = TransformerConfig(
        n_layers=3, d_model=64, n_heads=4, d_vocab=48, n_ctx=32, d_mlp=256, act_fn="gelu",
        normalization_type="LN",
    )  # fmt: skip
    g = torch.Generator().manual_seed(seed)
    model = build_transformer(cfg, generator=g)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(steps):
        half = int(torch.randint(6, 17, (), generator=g))
        r = torch.rand(32, cfg.d_vocab, generator=g).argsort(-1)[:, :half]
        tokens = torch.cat([r, r], 1)
        logp = model(tokens)[:, half - 1 : -1].log_softmax(-1)
        loss = -logp.gather(-1, tokens[:, half:, None]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = float(loss.detach())
    print(f"held-out 3-layer model: final loss on the second copy {final:.3f} after {steps} steps")
    return model.eval()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def agreement_rows(label: str, model, n: int, steps: list[int]) -> list[list]:
    """Edge and sweep estimates against exact scores over every cell (see the module docstring)."""
    pair, _ = circuit_pair(model, None, n, generator=torch.Generator().manual_seed(0))
    patcher = EdgePatcher(model, pair, "mean")
    exact, t_exact = timed(lambda: patcher.exact(patcher.graph.edges).mean(1))
    rows = [[label, "edges: exact path patching", 1.0, 1.0, 1.0, len(exact), "-", t_exact]]
    for k in steps:
        est, t = timed(lambda k=k: edge_attribution(patcher, k))
        a = judge(est, exact, k=10)
        name = "edges: EAP" if k == 0 else f"edges: EAP-IG k={k}"
        rows.append([label, name, a["pearson"], a["spearman"], a["top_k"], len(exact), max(k, 1), t])
    sweeps = model_sweeps(model)
    exact_p = Patcher(model, pair.clean, pair.corrupted, pair=pair)
    ref, t_ref = timed(lambda: {s: exact_p.sweep(s) for s in sweeps})
    cells = sum(r.values.numel() for r in ref.values())
    rows.append([label, "sweeps: exact patching", 1.0, 1.0, 1.0, cells, "-", t_ref])
    for k in steps:
        att = Attributor(model, pair.clean, pair.corrupted, pair=pair, steps=k)
        got, t = timed(lambda att=att: {s: att.sweep(s, check=False) for s in sweeps})
        scores = [
            judge((got[s].values - got[s].baseline), ref[s].values - ref[s].baseline, k=10) for s in sweeps
        ]
        med = [statistics.median(torch.tensor([x[key] for x in scores]).nan_to_num(0).tolist()) for key in
               ("pearson", "spearman", "top_k")]  # fmt: skip
        name = "sweeps: AtP*" if k == 0 else f"sweeps: IG k={k} + AtP* q/k fix"
        rows.append([label, name, *med, cells, att.passes, t])
    return rows


AGREEMENT_HEADERS = ["model", "estimate", "pearson", "spearman", "top-10", "cells", "passes", "seconds"]


def agreement(args) -> None:
    models = [("planted induction", planted_induction_model())]
    held_out = trained_repeats_model(args.train_steps, seed=args.seed)
    models.append((f"3-layer LN/GELU (held out, seed {args.seed})", held_out))
    rows = [row for label, model in models for row in agreement_rows(label, model, args.n, args.steps)]
    print(format_table(rows, AGREEMENT_HEADERS, floatfmt=".3f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ckpts", nargs="*", help="checkpoints to include (e.g. the demo models)")
    parser.add_argument("--n", type=int, default=64, help="prompts of the clean/corrupted pair")
    parser.add_argument(
        "--ablation", default="mean", choices=["mean", "corrupted", "zero"], help="edge ablation"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--agreement", action="store_true", help="first order vs integrated gradients against exact scores"
    )
    parser.add_argument("--train-steps", type=int, default=1500, help="training steps of the held-out model")
    parser.add_argument(
        "--seed", type=int, default=0, help="initialisation and data seed of the held-out model"
    )
    parser.add_argument(
        "--steps", type=int, nargs="+", default=[0, 4, 16], help="IG steps to compare (0: first order)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.agreement:
        agreement(args)
        return
    models = [("planted", planted_induction_model(), None)]
    models += [(f"random{s}", build_model(s, n_ctx=24, d_vocab=12), None) for s in range(3)]
    for path in args.ckpts:
        ckpt = load_checkpoint(path)
        models.append((Path(path).parent.name or path, ckpt.model, ckpt.task))
    rows, notes = [], []
    for label, model, task in models:
        try:
            row, note = bench(label, model, task, args)
        except MechmemError as exc:
            notes.append(f"{label}: skipped ({exc})")
            continue
        rows.append(row)
        notes += note
    print(format_table(rows, HEADERS, floatfmt=".3f"))
    print("\n".join(["", *notes]))


if __name__ == "__main__":
    main()
