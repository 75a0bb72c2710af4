"""Are mechmem's verdicts stable across prompt seeds, on models it did not design?

    OMP_NUM_THREADS=1 nice -n 5 python benchmarks/stability.py    # docs/record/data/2026-12-03-stability.json

Trains four small models with plain TransformerLens (`HookedTransformer(HookedTransformerConfig(...))` under
3.x; under 4.x, which removed it, `TransformerBridge.boot_native(TransformerBridgeConfig(...))`) and a plain
AdamW loop written here (not mechmem's trainer or model builders), each unlike mechmem's demo models; each is
turned into a mechmem checkpoint with `save_model` (which checks the reloaded logits) and analysed reloaded:

    rotary-attn    2 layers, attention only, rotary positions, 2 heads; repeats (the generic task)
    ln-gelu        3 layers, LayerNorm, GELU MLPs, 4 heads per layer; repeats
    birth-subset   2 layers, LayerNorm, ReLU MLPs, 1 head per layer; the Birth task with fixed triggers (only
                   the 3 most frequent tokens are ever triggers in training, of the vocabulary)
    perm-rms       2 layers, RMSNorm, ReLU MLPs, 2 heads; the permutation task with repeats (Task 2)

Then for each model and prompt seed 0..4: `head_roles(model, task, seed=s)` (the report's defaults) and
`decided_circuit(model, task, seed=s, ablation="mean")` (the report's call), with the prompt fit the report
prints beside each (`repeats_fit` of head detection's longest random probe; `prompt_fit` of the circuit's
first round); and the report's other decided verdicts, called as the report calls them: `decided_patching`
(every sweep the model has, exact), `decided_ablation` (mean ablation of every head and MLP) and
`decided_mlp_role` (the last MLP; not on attention-only models). A quantity is "stable" when its verdict is
identical at every seed (or undecided at every seed); for the many-test analyses (edges, patching cells,
ablations) each test is counted as stable, "decided vs undecided" (one decided verdict at some seeds,
undecided at the others) or contradictory (yes at one seed, no at another).

`--skip-decided` leaves out the patching, ablation and MLP verdicts (the record of 2026-12-04 ran without).
"""

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
import transformer_lens

from mechmem.analysis.ablation import decided_ablation
from mechmem.analysis.circuits.decided import decided_circuit
from mechmem.analysis.circuits.discovery import circuit_prompts
from mechmem.analysis.distribution import prompt_fit, repeats_fit
from mechmem.analysis.heads import probe_halves
from mechmem.analysis.mlp_role import decided_mlp_role
from mechmem.analysis.patching.decided import decided_patching
from mechmem.analysis.roles import RoleThresholds, head_roles
from mechmem.analysis.stats import CIRCUIT_POLICY
from mechmem.checkpoint import load_checkpoint, save_model
from mechmem.errors import MechmemError
from mechmem.tables import print_table
from mechmem.tasks.registry import build_task

SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class Subject:
    """A held-out model to train: its name, what it is in words, its TL config, its task and training."""

    name: str
    words: str
    config: dict[str, Any]
    task: Callable[[], Any]
    steps: int
    batch: int = 64
    lr: float = 3e-3


SUBJECTS = (
    Subject(
        "rotary-attn",
        "2 layers, attention only, rotary positions, 2 heads of 16, d_model 32, vocab 32, context 32; "
        "repeats [r, r] with |r| = 16",
        {
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 2,
            "d_head": 16,
            "d_vocab": 32,
            "n_ctx": 32,
            "attn_only": True,
            "positional_embedding_type": "rotary",
            "rotary_dim": 16,
            "normalization_type": None,
        },
        lambda: build_task("repeats", {"d_vocab": 32, "half": 16}),
        steps=1500,
    ),
    Subject(
        "ln-gelu",
        "3 layers, LayerNorm, GELU MLPs (d_mlp 96), 4 heads of 12 per layer, d_model 48, vocab 32, "
        "context 32; repeats with |r| = 16",
        {
            "n_layers": 3,
            "d_model": 48,
            "n_heads": 4,
            "d_head": 12,
            "d_mlp": 96,
            "d_vocab": 32,
            "n_ctx": 32,
            "act_fn": "gelu",
            "normalization_type": "LN",
        },
        lambda: build_task("repeats", {"d_vocab": 32, "half": 16}),
        steps=700,
    ),
    Subject(
        "birth-subset",
        "2 layers, LayerNorm, ReLU MLPs (d_mlp 128), 1 head of 64 per layer, d_model 64, context 64; Birth "
        "(shipped tiny-Shakespeare counts) with fixed_triggers: the 3 most frequent tokens are the only "
        "triggers in training and analysis",
        {
            "n_layers": 2,
            "d_model": 64,
            "n_heads": 1,
            "d_head": 64,
            "d_mlp": 128,
            "n_ctx": 64,
            "act_fn": "relu",
            "normalization_type": "LN",
        },
        lambda: build_task("birth", {"seq_len": 64, "n_triggers": 3, "fixed_triggers": True}),
        steps=600,
    ),
    Subject(
        "perm-rms",
        "2 layers, RMSNorm, ReLU MLPs (d_mlp 64), 2 heads of 16, d_model 32; permutation task V = 5 with "
        "repeat_ratio 0.3 (vocab 6, context 9)",
        {
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 2,
            "d_head": 16,
            "d_mlp": 64,
            "act_fn": "relu",
            "normalization_type": "RMS",
        },
        lambda: build_task("permutation", {"vocab_size": 5, "repeat_ratio": 0.3}),
        steps=2500,
    ),
)


def plain_model(cfg: dict[str, Any], seed: int) -> torch.nn.Module:
    """TransformerLens's own model for `cfg`: `HookedTransformer` under 3.x; under 4.x (which removed it) the
    native model in a bridge, `TransformerBridge.boot_native`, TL's own replacement."""
    torch.manual_seed(seed)  # TL initialises from the global generator
    if version("transformer-lens").startswith("3."):
        return transformer_lens.HookedTransformer(transformer_lens.HookedTransformerConfig(**cfg, seed=seed))
    bridge_cfg = transformer_lens.TransformerBridgeConfig(**cfg, seed=seed, default_prepend_bos=False)
    return transformer_lens.TransformerBridge.boot_native(bridge_cfg)


def train(subject: Subject, task: Any, seed: int = 0) -> tuple[torch.nn.Module, dict[str, float]]:
    """A plain TransformerLens model for `subject`, trained by AdamW on the task's masked next-token loss."""
    cfg = dict(subject.config)
    cfg.setdefault("d_vocab", task.d_vocab)
    cfg.setdefault("n_ctx", task.seq_len)
    model = plain_model(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=subject.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed + 1)
    start, loss = time.perf_counter(), torch.tensor(float("nan"))
    for _ in range(subject.steps):
        batch = task.train_batch(subject.batch, generator=gen)
        loss = task.loss(model(batch.tokens), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    metrics = task.evaluate(model, generator=torch.Generator().manual_seed(seed + 2), n=256)
    metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
    return model, {"train_loss": float(loss.detach()), "train_s": time.perf_counter() - start, **metrics}


def heads_at(model: Any, task: Any, seed: int) -> dict[str, Any]:
    """The report's head naming at `seed`, with the looks taken and its probe's prompt fit."""
    start = time.perf_counter()
    roles = head_roles(model, task, seed=seed)
    named = {h.name: h.role for h in roles.heads if h.role != "none"}
    decision = roles.info.get("patterns", {}).get("decision", {})
    halves = probe_halves(model.cfg.n_ctx, model.cfg.d_vocab)
    fit = None
    if halves:  # as the report: the longest random probe against the task's data (report seed offset 11)
        gen = torch.Generator().manual_seed(seed * 1000 + 11)
        fit = repeats_fit(model, task, max(halves), CIRCUIT_POLICY.first, generator=gen).to_dict()
    return {
        "heads": named,
        "looks": decision.get("looks"),
        "stopped": decision.get("stopped"),
        "evidence": {h.name: {k: float(v) for k, v in h.evidence.items()} for h in roles.heads},
        "prompt_fit": fit,
        "seconds": time.perf_counter() - start,
    }


def circuit_at(model: Any, task: Any, seed: int) -> dict[str, Any]:
    """The report's decided circuit at `seed` (mean ablation), with the first round's prompt fit."""
    start = time.perf_counter()
    circuit, source = decided_circuit(model, task, seed=seed, ablation="mean")
    pair, _ = circuit_prompts(model, task, CIRCUIT_POLICY.first, seed)
    gen = torch.Generator().manual_seed(seed * 1000 + 12)
    fit = prompt_fit(model, task, pair, generator=gen, source=source).to_dict()
    fam = circuit.decision.families
    return {
        "verdict": circuit.verdict,
        "criteria": circuit.criteria(),
        "edges": circuit.edge_names(),
        "edge_verdicts": dict(
            zip([e.name for e in circuit.graph.edges], circuit.edge_verdicts(), strict=True)
        ),
        "gap": circuit.gap,
        "faithfulness": circuit.faithfulness,
        "completeness": circuit.completeness,
        "intervals": {k: list(v) for k, v in circuit.intervals.items()},
        "corrected": {
            k: [float(fam[k].corrected_lower), float(fam[k].corrected_upper)]
            for k in ("gap", "faithfulness", "completeness")
        },
        "looks": list(circuit.decision.looks),
        "stopped": circuit.decision.stopped,
        "undecided": circuit.undecided(),
        "source": source,
        "prompt_fit": fit,
        "seconds": time.perf_counter() - start,
    }


def verdicts_of(decision: Any) -> dict[str, list[str]]:
    """Every test's verdict in words, per family (a `Decision`, or one `FamilyDecision`)."""
    families = getattr(decision, "families", None) or {"": decision}
    return {name: family.verdicts() for name, family in families.items()}


def decided_at(model: Any, task: Any, seed: int) -> dict[str, Any]:
    """The report's patching, ablation and MLP verdicts at `seed`, each called as the report calls it."""
    start, out = time.perf_counter(), {}
    try:
        out["patching"] = verdicts_of(decided_patching(model, task, seed=seed).decision)
    except (NotImplementedError, MechmemError) as exc:
        out["patching"] = {"skipped": [str(exc)]}
    out["ablation"] = verdicts_of(decided_ablation(model, task, seed=seed).decision)
    if not model.cfg.attn_only:
        role = decided_mlp_role(model, task, seed=seed, threshold=RoleThresholds().mlp_drop)
        out["mlp"] = verdicts_of(role.decision)
    out["seconds"] = time.perf_counter() - start
    return out


def per_test_stability(runs: list[list[str]]) -> dict[str, int]:
    """Per test (position in the verdict lists), across seeds: stable / decided vs undecided /
    contradictory."""
    counts = {"stable": 0, "decided vs undecided": 0, "contradictory": 0}
    for seen in map(set, zip(*runs, strict=True)):
        kind = (
            "stable"
            if len(seen) == 1
            else "contradictory"
            if {"yes", "no"} <= seen
            else "decided vs undecided"
        )
        counts[kind] += 1
    return counts


def decided_rows(name: str, runs: list[dict[str, Any]]) -> list[list[str]]:
    """Per analysis and family of the decided verdicts: its tests' stability over the seeds."""
    rows = []
    for analysis in ("patching", "ablation", "mlp"):
        if analysis not in runs[0]["decided"]:
            continue
        for family in runs[0]["decided"][analysis]:
            per_seed = [r["decided"][analysis][family] for r in runs]
            tally = [f"{v.count('yes')}y {v.count('no')}n {v.count('undecided')}u" for v in per_seed]
            counts = per_test_stability(per_seed)
            label = f"{analysis} {family}".strip() + ": stable / dec. vs undec. / contradictory"
            state = "stable" if counts["contradictory"] == 0 else "UNSTABLE"
            rows.append([name, label, *tally, "/".join(map(str, counts.values())) + f" {state}"])
    return rows


def stability(values: list[Any]) -> str:
    return "stable" if all(v == values[0] for v in values) else "UNSTABLE"


def heads_cell(named: dict[str, str]) -> str:
    return " ".join(f"{h}:{r}" for h, r in sorted(named.items())) or "-"


def edge_stability(runs: list[dict[str, Any]]) -> dict[str, int]:
    """Per-edge verdicts over the seeds, counted as `per_test_stability` counts them ("in" is yes, "out"
    no); edges untested at a seed count as out there."""
    words = {"in": "yes", "out": "no", "untested": "no"}
    names = list(runs[0]["circuit"]["edge_verdicts"])
    per_seed = [[words.get(r["circuit"]["edge_verdicts"][n], "undecided") for n in names] for r in runs]
    return per_test_stability(per_seed)


def task_role_cells(runs: list[dict[str, Any]]) -> list[str]:
    """Per seed, each head's task-role verdicts (recall / elimination ...: yes, no, undecided)."""
    words = {1.0: "y", 0.0: "n", -1.0: "u"}
    cells = []
    for r in runs:
        ev = r["heads"]["evidence"]
        parts = [
            f"{head}:"
            + "".join(words[v[k]] for k in sorted(v) if k.endswith("_verdict") and "score" not in k)
            for head, v in sorted(ev.items())
            if any(k.endswith("_verdict") for k in v)
        ]
        cells.append(" ".join(parts) or "-")
    return cells


def table_rows(name: str, runs: list[dict[str, Any]]) -> list[list[str]]:
    """Per quantity of one model: its value at every seed and whether they agree."""
    quantities = {
        "heads (head:role)": [heads_cell(r["heads"]["heads"]) for r in runs],
        "head looks": [str(r["heads"]["looks"][-1] if r["heads"]["looks"] else "-") for r in runs],
        "heads probe off-dist": [str((r["heads"]["prompt_fit"] or {}).get("off_distribution")) for r in runs],
        "circuit verdict": [r["circuit"]["verdict"] for r in runs],
        "criteria b/f/s/c": ["/".join(v[0] for v in r["circuit"]["criteria"].values()) for r in runs],
        "task-role verdicts": task_role_cells(runs),
        "circuit edges": [" ".join(r["circuit"]["edges"]) or "-" for r in runs],
        "circuit looks": [str(r["circuit"]["looks"][-1]) for r in runs],
        "circuit off-dist": [str(r["circuit"]["prompt_fit"]["off_distribution"]) for r in runs],
    }
    rows = [[name, q, *v, stability(v)] for q, v in quantities.items()]
    counts = edge_stability(runs)
    rows.append([name, "edges: stable / decided vs undecided / contradictory", *[""] * (len(runs) - 1)])
    rows[-1].append("/".join(str(c) for c in counts.values()))
    rows[-1].append("stable" if counts["contradictory"] == 0 else "UNSTABLE")
    for key in ("gap", "faithfulness"):
        cells = [
            f"{r['circuit'][key]:.3f} [{r['circuit']['intervals'][key][0]:.3f}, "
            f"{r['circuit']['intervals'][key][1]:.3f}]"
            for r in runs
        ]
        rows.append([name, f"{key} [95%]", *cells, "(value)"])
    if "decided" in runs[0]:
        rows += decided_rows(name, runs)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="docs/record/data/2026-12-03-stability.json", help="JSON output")
    p.add_argument("--only", nargs="*", default=None, help="subject names to run (default: all)")
    p.add_argument("--steps", type=int, default=None, help="override training steps (for a smoke run)")
    p.add_argument("--skip-decided", action="store_true", help="no patching, ablation or MLP verdicts")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    out: dict[str, Any] = {"seeds": list(SEEDS), "models": {}}
    rows: list[list[str]] = []
    for subject in SUBJECTS:
        if args.only and subject.name not in args.only:
            continue
        if args.steps is not None:
            subject = Subject(**{**subject.__dict__, "steps": args.steps})
        task = subject.task()
        trained, metrics = train(subject, task)
        with tempfile.TemporaryDirectory() as folder:  # into a mechmem checkpoint: `save_model` checks logits
            path = save_model(
                trained,
                Path(folder) / "ckpt.pt",
                task_name=task.name,
                task_config=task.config,
                metrics=metrics,
            )
            ckpt = load_checkpoint(path)
        model, task = ckpt.model.eval(), ckpt.task
        print(
            f"{subject.name}: trained {subject.steps} steps in {metrics['train_s']:.0f} s: {metrics}",
            flush=True,
        )
        runs = []
        for seed in SEEDS:
            run = {
                "seed": seed,
                "heads": heads_at(model, task, seed),
                "circuit": circuit_at(model, task, seed),
            }
            if not args.skip_decided:
                run["decided"] = decided_at(model, task, seed)
            named = heads_cell(run["heads"]["heads"])
            print(
                f"  seed {seed}: heads {named} ({run['heads']['seconds']:.0f} s); "
                f"circuit {run['circuit']['verdict']} {run['circuit']['edges']} "
                f"({run['circuit']['seconds']:.0f} s)",
                flush=True,
            )
            runs.append(run)
        out["models"][subject.name] = {
            "words": subject.words,
            "config": {**subject.config, "d_vocab": model.cfg.d_vocab, "n_ctx": model.cfg.n_ctx},
            "task": {"name": task.name, "config": task.config.to_dict()},
            "steps": subject.steps,
            "batch": subject.batch,
            "lr": subject.lr,
            "metrics": metrics,
            "runs": runs,
        }
        rows += table_rows(subject.name, runs)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1, default=str)
    print_table(rows, ["model", "quantity", *(f"seed {s}" for s in SEEDS), "stability"])


if __name__ == "__main__":
    main()
