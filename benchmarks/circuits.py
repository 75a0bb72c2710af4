"""Edge-level circuit discovery per model: the circuit, its faithfulness, timings, and EAP against exact scores.

    python benchmarks/circuits.py runs/demo/*/ckpt.pt            # the demo models, plus planted and random ones
    python benchmarks/circuits.py --ablation corrupted --n 64

Models: the planted induction model, three random 2-layer models (seeds 0-2) and every checkpoint given. For each
it runs `discover_circuit` with mean (or --ablation) ablation on --n prompts of `circuit_pair` and prints the
circuit, faithfulness, completeness and the confidence rule's verdict; the wall time of exact edge scoring through
the engine (all edges batched), of the same variants one `run_with_hooks` each (`naive_intervene`), their ratio,
and the times of EAP (one forward + backward) and of pruning; then EAP's agreement with the exact scores
(Pearson, Spearman, top-10 overlap). Times are single runs on --threads torch threads (the machine's load shows).
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import build_model

from mechmem.analysis.circuits import EdgePatcher
from mechmem.analysis.circuits_discovery import attribution_agreement, circuit_pair, discover_circuit
from mechmem.analysis.interventions import Intervention, apply, naive_intervene
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
    variants = [
        [Intervention(e.port.hook, e.port.index, apply(lambda a, h, d=patcher.delta[e.sender.name]: a + d))]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ckpts", nargs="*", help="checkpoints to include (e.g. the demo models)")
    parser.add_argument("--n", type=int, default=64, help="prompts of the clean/corrupted pair")
    parser.add_argument(
        "--ablation", default="mean", choices=["mean", "corrupted", "zero"], help="edge ablation"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
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
