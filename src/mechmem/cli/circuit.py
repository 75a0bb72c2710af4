"""Decide a checkpoint's edge-level circuit: test every edge by path patching, then measure faithfulness.

    mechmem circuit runs/task2/ckpt.pt --n-samples 64                # about a second on CPU
    mechmem circuit runs/birth --ablation corrupted --attribution    # also EAP and its agreement

Edges run from each node's output (embeddings, heads, MLPs) into each later input (a head's q, k or v, an MLP,
the logits); see docs/circuits.md. Each edge is in when its share of the gap is decided >= --share over
rounds of prompts; the circuit's verdict is then decided on new rounds (the report's policy). Then, on
held-out prompts, its verdict under each of --ablations and its faithfulness over circuit sizes (CPR, CMD;
`circuit_robustness`). Writes DIR/circuit.json (with "robustness"), DIR/circuit.png and DIR/robustness.png.
"""

import argparse
from typing import Any

from mechmem import cli
from mechmem.analysis.options import CIRCUIT_BUDGET, HEAD_BUDGET
from mechmem.cli.args import CIRCUIT_ABLATIONS

MAX_EDGES = 2**20
"""Largest --max-exact (more edges than any model here has)."""


def parser(prog: str | None = None) -> cli.ArgumentParser:
    p = cli.analysis_parser(prog, __doc__, n_samples=CIRCUIT_BUDGET)
    p.add_argument("--ablation", choices=CIRCUIT_ABLATIONS, default="mean", help="an ablated edge's value")
    p.add_argument(
        "--share",
        type=cli.share,
        default=None,
        help="an edge is in when its share of the gap is decided >= SHARE in size, SHARE in (0, 1] "
        "(default: the rule's EDGE_SHARE, docs/decisions.md)",
    )
    p.add_argument(
        "--ablations",
        nargs="+",
        choices=CIRCUIT_ABLATIONS,
        default=["mean", "corrupted", "zero"],
        help="ablations the circuit is also judged under, on held-out prompts (default: all three)",
    )
    p.add_argument(
        "--max-exact",
        type=cli.int_range(1, MAX_EDGES),
        default=256,
        help=f"edges tested exactly, in [1, {MAX_EDGES}]; above: EAP, then exact on the top ones "
        "(default 256)",
    )
    p.add_argument("--attribution", action="store_true", help="also run EAP and report its agreement")
    p.add_argument(
        "--role-samples",
        type=cli.sample_count,
        default=HEAD_BUDGET,
        help=f"sequences for head roles, in [1, {cli.MAX_SAMPLES}] and within the memory estimate "
        "(per probe, the budget of the sequential rule; the report's default)",
    )
    cli.add_memory_flag(p)
    return p


def outputs(ckpt: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Decide every edge and the circuit's verdict; print them; return circuit.{json,png}."""
    import torch

    from mechmem.analysis.circuits import (
        attribution_agreement,
        circuit_prompts,
        circuit_robustness,
        decided_circuit,
        plot_robustness,
    )
    from mechmem.analysis.distribution import prompt_fit
    from mechmem.analysis.roles import head_roles
    from mechmem.analysis.stats import CIRCUIT_POLICY, EDGE_SHARE
    from mechmem.models.backend import is_transformer_lens_model
    from mechmem.models.checks import check_n_samples
    from mechmem.progress import working
    from mechmem.report.circuit_graph import (
        ROBUSTNESS_WORDS,
        edge_table,
        plot_circuit,
        robustness_table,
        summary_lines,
    )

    if not is_transformer_lens_model(ckpt.model):
        reason = f"{type(ckpt.model).__name__} is not a HookedTransformer, which circuit discovery needs"
        return cli.skipped(reason, "circuit.json", {"task": ckpt.task_name})
    check_n_samples(args.role_samples, ckpt.model, flag="--role-samples")
    policy = CIRCUIT_POLICY.with_budget(args.n_samples)
    with working(
        f"deciding the circuit's edges and verdict ({args.ablation} ablation, rounds of {policy.first} to "
        f"{policy.budget} prompts)"
    ):
        roles = {
            h.name: h.role
            for h in head_roles(ckpt.model, ckpt.task, n=args.role_samples, seed=args.seed).heads
        }
        circuit, source = decided_circuit(
            ckpt.model,
            ckpt.task,
            seed=args.seed,
            policy=policy,
            ablation=args.ablation,
            share=EDGE_SHARE if args.share is None else args.share,
            max_exact=args.max_exact,
            with_attribution=args.attribution,
            heads=[name for name, role in roles.items() if role != "none"],
            memory_mb=args.memory_mb,
        )
    record = {"task": ckpt.task_name, "pair": source, "seed": args.seed, **circuit.to_dict()}
    print("\n".join([f"{ckpt.task_name}:", *summary_lines(circuit, source, roles)]))
    reference = torch.Generator().manual_seed(args.seed + 1)  # not the prompts' own draw (`circuit_prompts`)
    pair, _ = circuit_prompts(ckpt.model, ckpt.task, policy.first, args.seed)  # the first round's prompts
    fit = prompt_fit(ckpt.model, ckpt.task, pair, generator=reference, source=source)
    record["prompt_fit"] = fit.to_dict()
    print(fit.message)
    if circuit.attribution is not None:
        record["attribution_agreement"] = agree = attribution_agreement(circuit)
        print("EAP vs exact: " + ", ".join(f"{k} {v:.3f}" for k, v in agree.items()))
    table = edge_table(circuit)
    cli.print_table(table.rows, table.headers)
    record["roles"] = roles
    ablations = tuple(dict.fromkeys(args.ablations))
    with working(f"judging the circuit under {', '.join(ablations)} ablation and over circuit sizes"):
        robust = circuit_robustness(
            ckpt.model,
            ckpt.task,
            circuit,
            ablations=ablations,
            n=policy.first,
            seed=args.seed,
            memory_mb=args.memory_mb,
        )
    record["robustness"] = robust.to_dict()
    table = robustness_table(robust)
    print(table.caption)
    cli.print_table(table.rows, table.headers)
    print("\n".join(ROBUSTNESS_WORDS))
    figures = {"circuit.png": plot_circuit(circuit, roles), "robustness.png": plot_robustness(robust)}
    return {"circuit.json": record, **figures}


main = cli.analysis_main(parser, outputs)
