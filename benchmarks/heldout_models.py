"""Held-out models: trained with plain TransformerLens 4 outside mechmem, then measured by mechmem.

    PYTHONPATH=src python benchmarks/heldout_models.py train --out tests/data/heldout
    PYTHONPATH=src python benchmarks/heldout_models.py measure --data tests/data/heldout --seeds 0 1 2 3 4 \
        --out heldout.json --markdown heldout.md

`train` builds each model as a TransformerLens user would (`TransformerBridge.boot_native` with a
`TransformerBridgeConfig`), trains it with a hand-written AdamW loop on one CPU thread (a mechmem task serves
only as the data generator), computes its ground truth with plain TransformerLens (`run_with_cache` attention
patterns and per-head ablations through `hook_z` hooks: nothing from mechmem's analysis code), and writes
`NAME.pt` (a mechmem checkpoint, `mechmem.save_model`) and `NAME.truth.json` beside it.

Head dropout (a `hook_z` hook zeroing each head of a layer per sequence with probability p, inverted scaling;
`HeldOut.dropout`) spreads a job over several heads: no head can be relied on. Where it is not used, the jobs
spread by themselves (split, rotary) or pair up (backup), as the ground truth shows.

`measure` loads each checkpoint, runs `mechmem.head_roles` and `mechmem.decided_circuit` at each prompt seed,
and prints per model and seed the roles, the heads in the circuit's kept edges against the heads the roles
name and the ground-truth heads, faithfulness and completeness with their intervals, and the verdict.

Kinds (see `MODELS`; the repeats models train on [noise, r, r] with |r| from 4 to 12, `shifted_repeats`):
    split      2 layers attn-only, LayerNorm, rotary, 4 heads; induction spread over the 4 layer-1 heads.
    noln       2 layers attn-only, no LayerNorm, 4 heads, layer-0 head dropout 0.5; 4 previous-token heads.
    backup     2 layers, RMSNorm, rotary, GELU MLPs, 2 heads; both layer-1 heads do induction (a pair).
    perm       2 layers, LayerNorm, ReLU MLPs; permutation Task 2 (a task with its own clean/corrupted pair).
    rotary     2 layers, RMSNorm, rotary positions, SwiGLU gated MLP; induction on 3 heads, one main.
"""

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROLE_SCORES = ("previous-token", "duplicate", "induction")


@dataclass(frozen=True)
class HeldOut:
    """One held-out model: its TransformerLens config, its data, its training and its job's ground truth."""

    name: str
    """File stem of the checkpoint and truth file."""
    about: str
    """One line for the table."""
    config: dict[str, Any]
    """TransformerBridgeConfig fields (plain TransformerLens 4)."""
    task: str
    """The mechmem task used as data generator and saved with the checkpoint."""
    task_config: dict[str, Any]
    """Its config."""
    steps: int
    """AdamW steps."""
    lr: float = 1e-2
    """Learning rate."""
    batch: int = 64
    """Sequences per step."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    dropout: dict[int, float] = field(default_factory=dict)
    """layer -> probability of zeroing each of its heads, per sequence, during training."""
    job: str = "induction"
    """The attention score whose heads (in `job_layer`) are the job's heads, or "ablation": the heads of any
    layer whose mean ablation removes at least `threshold` of the pair's logit difference."""
    job_layer: int = 1
    """The layer holding the job's heads."""
    job_at_answer: bool = False
    """Score the job at the pair's answer position on its clean prompts (else over every query)."""
    """The layer holding the job's heads."""
    threshold: float = 0.3
    """A head does the job when its score (or share of the logit difference) is at least this."""
    seed: int = 0
    """Initialisation and data seed."""


REPEATS = {"d_vocab": 32, "half": 12}

MODELS = (
    HeldOut(
        name="split",
        about="2L attn-only, LN, rotary, 4 heads; induction split over 3+ heads",
        config={
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 4,
            "d_head": 8,
            "d_vocab": 32,
            "n_ctx": 24,
            "attn_only": True,
            "positional_embedding_type": "rotary",
        },
        task="repeats",
        task_config=REPEATS,
        steps=3000,
    ),
    HeldOut(
        name="noln",
        about="2L attn-only, no LayerNorm, 4 heads; previous-token job split over layer-0 heads (dropout)",
        config={
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 4,
            "d_head": 8,
            "d_vocab": 32,
            "n_ctx": 24,
            "attn_only": True,
            "normalization_type": None,
        },
        task="repeats",
        task_config=REPEATS,
        steps=3000,
        dropout={0: 0.5},
        job="previous-token",
        job_layer=0,
    ),
    HeldOut(
        name="backup",
        about="2L, RMSNorm, rotary, GELU MLP, 2 heads; both layer-1 heads do induction: a backup pair",
        config={
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 2,
            "d_head": 16,
            "d_vocab": 32,
            "n_ctx": 24,
            "d_mlp": 32,
            "act_fn": "gelu",
            "normalization_type": "RMS",
            "positional_embedding_type": "rotary",
        },
        task="repeats",
        task_config=REPEATS,
        steps=3000,
    ),
    HeldOut(
        name="perm",
        about="2L, LN, ReLU MLP, 4 heads; permutation Task 2 (V 5, repeat ratio 0.3), its own pair",
        config={
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 4,
            "d_head": 8,
            "d_vocab": 6,
            "n_ctx": 9,
            "d_mlp": 64,
            "act_fn": "relu",
        },
        task="permutation",
        task_config={"vocab_size": 5, "repeat_ratio": 0.3},
        steps=1500,
        batch=128,
        job="ablation",
    ),
    HeldOut(
        name="rotary",
        about="2L, RMSNorm, rotary, SwiGLU MLP, 4 heads; induction on repeats",
        config={
            "n_layers": 2,
            "d_model": 32,
            "n_heads": 4,
            "d_head": 8,
            "d_vocab": 32,
            "n_ctx": 24,
            "d_mlp": 64,
            "act_fn": "silu",
            "gated_mlp": True,
            "normalization_type": "RMS",
            "positional_embedding_type": "rotary",
        },
        task="repeats",
        task_config=REPEATS,
        steps=3000,
    ),
)


# -- plain TransformerLens -----------------------------------------------------------------------------------
def boot(spec: HeldOut) -> torch.nn.Module:
    """The model as a TransformerLens 4 user builds it: a native model in a bridge, seeded."""
    from transformer_lens import TransformerBridge
    from transformer_lens.config import TransformerBridgeConfig

    return TransformerBridge.boot_native(TransformerBridgeConfig(**spec.config, seed=spec.seed))


def masked_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the masked positions."""
    per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view_as(mask)
    return (per * mask).sum() / mask.sum()


def head_dropout(dropout: dict[int, float], generator: torch.Generator, n: int, n_heads: int) -> list:
    """hook_z hooks zeroing each head of the named layers per sequence with probability p (inverted
    scaling)."""
    hooks = []
    for layer, p in dropout.items():
        keep = (torch.rand(n, 1, n_heads, 1, generator=generator) >= p).float() / (1 - p)
        hooks.append((f"blocks.{layer}.attn.hook_z", lambda z, hook, keep=keep: z * keep))
    return hooks


def shifted_repeats(spec: HeldOut, generator: torch.Generator) -> Any:
    """[noise, r, r] of the model's context with |r| drawn from 4..half per sequence, the loss on the second
    copy: the offset back to the first copy varies, so induction cannot be a fixed positional offset (as it
    can on the task's fixed [r, r])."""
    from mechmem.tasks.base import Batch

    n, vocab, length = spec.batch, spec.task_config["d_vocab"], spec.config["n_ctx"]
    tokens = torch.randint(vocab, (n, length), generator=generator)
    mask = torch.zeros(n, length)
    halves = torch.randint(4, spec.task_config["half"] + 1, (n,), generator=generator)
    for row, h in enumerate(halves.tolist()):
        r = torch.randperm(vocab, generator=generator)[:h]
        tokens[row, length - 2 * h : length - h] = r
        tokens[row, length - h :] = r
        mask[row, length - h : length - 1] = 1.0
    targets = torch.cat([tokens[:, 1:], torch.zeros(n, 1, dtype=tokens.dtype)], dim=1)
    return Batch(tokens, targets, mask)


def train(spec: HeldOut) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train `spec`'s model with AdamW; returns it in eval mode and the training record."""
    from mechmem.tasks import build_task

    torch.manual_seed(spec.seed)
    model = boot(spec)
    task = build_task(spec.task, spec.task_config)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    data, drop = torch.Generator().manual_seed(spec.seed + 1), torch.Generator().manual_seed(spec.seed + 2)
    start, losses = time.perf_counter(), []
    for step in range(spec.steps):
        lr = spec.lr * min(1.0, (step + 1) / 50) * (0.5 + 0.5 * math.cos(math.pi * step / spec.steps))
        for group in opt.param_groups:
            group["lr"] = lr
        batch = (
            shifted_repeats(spec, data)
            if spec.task == "repeats"
            else task.train_batch(spec.batch, generator=data)
        )
        hooks = head_dropout(spec.dropout, drop, spec.batch, model.cfg.n_heads)
        logits = model.run_with_hooks(batch.tokens, fwd_hooks=hooks)
        loss = masked_loss(logits, batch.targets, batch.loss_mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    record = {
        "steps": spec.steps,
        "seconds": round(time.perf_counter() - start, 1),
        "final_loss": round(sum(losses[-20:]) / 20, 4),
        "first_loss": round(losses[0], 4),
    }
    return model, record


def attention_scores(
    model: torch.nn.Module, tokens: torch.Tensor, answer_pos: torch.Tensor | None = None
) -> dict[str, list[list[float]]]:
    """Per head [layer][head] mean attention, from `run_with_cache`, of each query onto:
    previous-token, the key just before it (queries 1..); duplicate, earlier keys holding the query's token;
    induction, keys whose previous token is the query's token (each over the queries that have such a key).
    With `answer_pos` [batch], only each sequence's query at that position counts."""
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))
    pos = tokens.shape[1]
    q, k = torch.arange(pos)[:, None], torch.arange(pos)[None, :]
    same = tokens[:, :, None] == tokens[:, None, :]  # [batch query key]
    before = torch.zeros_like(same)
    before[:, :, 1:] = tokens[:, :, None] == tokens[:, None, :-1]
    keys = {
        "previous-token": (k == q - 1).expand_as(same),
        "duplicate": same & (k < q),
        "induction": before & (k < q),
    }
    counted = torch.ones(tokens.shape, dtype=torch.double)  # [batch query]
    if answer_pos is not None:
        counted = F.one_hot(answer_pos, pos).double()
    out: dict[str, list[list[float]]] = {role: [] for role in ROLE_SCORES}
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"].double()  # [batch head query key]
        for role in ROLE_SCORES:
            where = keys[role].double()
            rows = where.amax(-1) * counted  # [batch query]: counted queries that have such a key
            mass = (pattern * where[:, None]).sum(-1)  # [batch head query]
            score = (mass * rows[:, None]).sum((0, 2)) / rows.sum().clamp(min=1)
            out[role].append([round(float(s), 6) for s in score])
    return out


def ablated_metrics(
    model: torch.nn.Module, heads: list[tuple[int, int]], how: str, data: dict[str, Any]
) -> dict[str, float]:
    """Masked loss on the eval batch and mean logit difference on the pair's clean prompts, with `heads`'
    hook_z zeroed ("zero") or replaced by its mean over the eval batch at each position ("mean")."""
    means = data["z_means"]

    def hooks_for() -> list:
        out = []
        for layer in sorted({l for l, _ in heads}):
            chosen = [h for l, h in heads if l == layer]

            def hook(
                z: torch.Tensor, hook: Any, layer: int = layer, chosen: list[int] = chosen
            ) -> torch.Tensor:
                z = z.clone()
                z[:, :, chosen] = 0.0 if how == "zero" else means[layer][None, : z.shape[1], chosen]
                return z

            out.append((f"blocks.{layer}.attn.hook_z", hook))
        return out

    with torch.no_grad():
        logits = model.run_with_hooks(data["batch"].tokens, fwd_hooks=hooks_for())
        loss = masked_loss(logits, data["batch"].targets, data["batch"].loss_mask)
        pair = data["pair"]
        plogits = model.run_with_hooks(pair.clean, fwd_hooks=hooks_for())
        rows = torch.arange(pair.clean.shape[0])
        at = plogits[rows, pair.answer_pos]
        diff = (at[rows, pair.correct] - at[rows, pair.incorrect]).mean()
    return {"loss": round(float(loss), 6), "logit_diff": round(float(diff), 6)}


def truth_data(model: torch.nn.Module, spec: HeldOut, n: int = 256, seed: int = 1000) -> dict[str, Any]:
    """The eval batch, the pair and per-position hook_z means the ground truth is computed on."""
    from mechmem.tasks import build_task

    task = build_task(spec.task, spec.task_config)
    batch = task.eval_batch(n, generator=torch.Generator().manual_seed(seed))
    pair = task.patching_pair(n, generator=torch.Generator().manual_seed(seed + 1))
    names = [f"blocks.{layer}.attn.hook_z" for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(batch.tokens, names_filter=lambda name: name in names)
    means = [cache[name].mean(0) for name in names]  # [pos head d_head]
    return {"batch": batch, "pair": pair, "z_means": means}


def ground_truth(model: torch.nn.Module, spec: HeldOut) -> dict[str, Any]:
    """Attention scores and ablation effects per head, plus the job's heads and the claims they support."""
    from mechmem.models.parts import Head

    data = truth_data(model, spec)
    scores = attention_scores(model, data["batch"].tokens)
    answer = attention_scores(model, data["pair"].clean, data["pair"].answer_pos)
    job_scores = answer if spec.job_at_answer else scores
    base = ablated_metrics(model, [], "zero", data)
    heads = [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    ablation = {
        Head(l, h).name: {how: ablated_metrics(model, [(l, h)], how, data) for how in ("zero", "mean")}
        for l, h in heads
    }
    if (
        spec.job == "ablation"
    ):  # heads whose mean ablation removes at least `threshold` of the logit difference
        full = base["logit_diff"]
        job = [
            (l, h)
            for l, h in heads
            if ablation[Head(l, h).name]["mean"]["logit_diff"] <= (1 - spec.threshold) * full
        ]
    else:
        job = [
            (spec.job_layer, h)
            for h in range(model.cfg.n_heads)
            if job_scores[spec.job][spec.job_layer][h] >= spec.threshold
        ]
    groups = {"job heads": {how: ablated_metrics(model, job, how, data) for how in ("zero", "mean")}}
    by_effect = sorted(job, key=lambda lh: ablation[Head(*lh).name]["mean"]["logit_diff"])
    if len(by_effect) >= 2:
        groups["top two job heads"] = {
            how: ablated_metrics(model, by_effect[:2], how, data) for how in ("zero", "mean")
        }
    return {
        "data": {
            "n": 256,
            "eval_seed": 1000,
            "pair_seed": 1001,
            "task": spec.task,
            "task_config": spec.task_config,
        },
        "scores": scores,
        "answer_scores": answer,
        "job_at_answer": spec.job_at_answer,
        "unablated": base,
        "ablation": ablation,
        "job": spec.job,
        "job_threshold": spec.threshold,
        "job_heads": [Head(l, h).name for l, h in job],
        "job_heads_by_effect": [Head(l, h).name for l, h in by_effect],
        "group_ablation": groups,
    }


# -- commands ------------------------------------------------------------------------------------------------
def cmd_train(args: argparse.Namespace) -> int:
    from mechmem.checkpoint import save_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for spec in MODELS:
        if args.only and spec.name not in args.only:
            continue
        model, record = train(spec)
        truth = ground_truth(model, spec)
        truth = {"model": spec.name, "about": spec.about, "spec": asdict(spec), "training": record, **truth}
        path = save_model(
            model, out / f"{spec.name}.pt", task_name=spec.task, task_config=spec.task_config, metrics=record
        )
        (out / f"{spec.name}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(
            f"{spec.name}: {record['seconds']} s, loss {record['first_loss']} -> {record['final_loss']}, "
            f"{spec.job} heads {truth['job_heads']}, {path.stat().st_size / 1024:.0f} KiB"
        )
        print("  scores", {r: truth["scores"][r] for r in ROLE_SCORES})
        print("  unablated", truth["unablated"], "groups", truth["group_ablation"])
    return 0


def circuit_heads(circuit: Any, *, senders_only: bool) -> list[str]:
    """Heads in the circuit's kept edges: as senders only (the heads whose output the circuit keeps), or at
    either end."""
    heads = set()
    for edge in circuit.edge_names():
        ends = edge.split("->")
        for end in ends[:1] if senders_only else ends:
            node = end.split(".")[0]
            if node.startswith("L") and "H" in node:
                heads.add(node)
    return sorted(heads)


def measure_one(path: Path, seed: int) -> dict[str, Any]:
    from mechmem.analysis.circuits import decided_circuit
    from mechmem.analysis.roles import head_roles
    from mechmem.checkpoint import load_checkpoint

    ckpt = load_checkpoint(path)
    model, task = ckpt.model, ckpt.task
    start = time.perf_counter()
    roles = head_roles(model, task, seed=seed)
    mid = time.perf_counter()
    named = sorted(h.name for h in roles.heads if h.role != "none")
    circuit, source = decided_circuit(model, task, seed=seed, heads=named)
    end = time.perf_counter()
    kept = circuit_heads(circuit, senders_only=True)
    interval = circuit.intervals.get("faithfulness")
    return {
        "seed": seed,
        "roles": {h.name: h.role for h in roles.heads},
        "named": named,
        "circuit_heads": kept,
        "heads_touched": circuit_heads(circuit, senders_only=False),
        "kept_edges": sorted(circuit.edge_names()),
        "edges_kept": int(circuit.kept.sum()),
        "edges": int(circuit.kept.numel()),
        "faithfulness": circuit.faithfulness,
        "faithfulness_interval": list(interval) if interval else None,
        "completeness": circuit.completeness,
        "completeness_interval": list(circuit.intervals["completeness"])
        if "completeness" in circuit.intervals
        else None,
        "criteria": circuit.criteria(),
        "verdict": circuit.verdict,
        "kept_jointly": int(circuit.joint.sum()) if circuit.joint is not None else 0,
        "left_out": [h.to_dict() | {"reason": h.reason()} for h in circuit.left_out],
        "not_measurable": {k: why for k, why in circuit.unreadable().items() if why},
        "overshoots": circuit.overshoots(),
        "source": source,
        "seconds": {"roles": round(mid - start, 1), "circuit": round(end - mid, 1)},
    }


def left_out_words(left_out: list[dict[str, Any]]) -> str:
    """Each named head the circuit leaves out: its edges' joint share and what they add, with intervals."""
    return (
        "; ".join(
            f"{h['head']} {h['share'][0]:.2f} {fmt_interval(h['share'][1:])}, {h['added'][0]:+.2f} "
            f"{fmt_interval(h['added'][1:])}"
            for h in left_out
        )
        or "-"
    )


def fmt_interval(interval: list[float] | None) -> str:
    return "-" if not interval else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def cmd_measure(args: argparse.Namespace) -> int:
    data = Path(args.data)
    rows, lines = [], []
    lines.append(
        "| model | seed | roles (non-none) | ground-truth job heads | circuit heads (senders of kept edges)"
        " | named heads missing from circuit | truth heads missing from circuit | edges kept"
        " | faithfulness [interval] | completeness [interval] | verdict | named heads left out: joint share"
        " [interval], added faithfulness [interval] |"
    )
    lines.append("| --- " * 12 + "|")
    for spec in MODELS:
        if args.only and spec.name not in args.only:
            continue
        path = data / f"{spec.name}.pt"
        truth = json.loads((data / f"{spec.name}.truth.json").read_text())
        for seed in args.seeds:
            row = measure_one(path, seed)
            row["model"] = spec.name
            row["truth_heads"] = truth["job_heads"]
            row["named_missing"] = sorted(set(row["named"]) - set(row["circuit_heads"]))
            row["truth_missing"] = sorted(set(truth["job_heads"]) - set(row["circuit_heads"]))
            rows.append(row)
            named = ", ".join(f"{h} {row['roles'][h]}" for h in row["named"]) or "none"
            line = (
                f"| {spec.name} | {seed} | {named} | {', '.join(truth['job_heads'])} ({truth['job']}) | "
                f"{', '.join(row['circuit_heads']) or 'none'} | {', '.join(row['named_missing']) or '-'} | "
                f"{', '.join(row['truth_missing']) or '-'} | {row['edges_kept']}/{row['edges']} | "
                f"{row['faithfulness']:.2f} {fmt_interval(row['faithfulness_interval'])} | "
                f"{row['completeness']:.2f} {fmt_interval(row['completeness_interval'])} | "
                f"{row['verdict']} | {left_out_words(row['left_out'])} |"
            )
            lines.append(line)
            print(line, flush=True)
    table = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train every held-out model and write checkpoints and truth files")
    t.add_argument("--out", default="tests/data/heldout", help="folder for NAME.pt and NAME.truth.json")
    t.add_argument("--only", nargs="*", default=[], help="train only these models (by name)")
    m = sub.add_parser("measure", help="run head_roles and decided_circuit on every held-out model")
    m.add_argument("--data", default="tests/data/heldout", help="folder holding NAME.pt and NAME.truth.json")
    m.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="prompt seeds")
    m.add_argument("--only", nargs="*", default=[], help="measure only these models (by name)")
    m.add_argument("--out", default=None, help="JSON file for every row")
    m.add_argument("--markdown", default=None, help="markdown file for the table")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    return cmd_train(args) if args.command == "train" else cmd_measure(args)


if __name__ == "__main__":
    sys.exit(main())
