"""Discover a checkpoint's edge-level circuit: score every edge by path patching, prune, measure faithfulness.

    python analyses/circuit.py runs/task2/ckpt.pt --n-samples 64                # about a second on CPU
    python analyses/circuit.py runs/birth --ablation corrupted --attribution    # also EAP and its agreement

Edges run from each node's output (embeddings, heads, MLPs) into each later input (a head's q, k or v, an MLP,
the logits); see docs/circuits.md. The pair is the task's clean/corrupted pair, or generic repeated random
tokens for a task without one. Prints the circuit, its faithfulness and completeness, and the strongest edges;
writes DIR/circuit.json (nodes, edges with scores, the circuit, faithfulness, method, ablation) and
DIR/circuit.png, together (one output set: both or neither).
"""

from mechmem import cli
from mechmem.analysis.options import CIRCUIT_ABLATIONS, CIRCUIT_PROMPTS


def main(argv: list[str] | None = None) -> int:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_analysis_args(parser, n_samples=CIRCUIT_PROMPTS)
    parser.add_argument(
        "--ablation", choices=CIRCUIT_ABLATIONS, default="mean", help="value an ablated edge carries"
    )
    parser.add_argument("--target", type=cli.positive_float, default=0.9, help="faithfulness to reach")
    parser.add_argument(
        "--threshold", type=cli.positive_float, help="keep |score| >= THRESHOLD x |gap| instead"
    )
    parser.add_argument(
        "--max-exact", type=cli.positive_int, default=256, help="above: EAP, then exact on top"
    )
    parser.add_argument("--attribution", action="store_true", help="also run EAP and report its agreement")
    parser.add_argument("--role-samples", type=cli.positive_int, default=256, help="sequences for head roles")
    args = parser.parse_args(argv)
    ckpt, out = cli.load_for_analysis(args)  # checks every flag first; torch is imported from here on
    from mechmem.analysis.circuits.discovery import attribution_agreement, circuit_prompts, discover_circuit
    from mechmem.analysis.roles import head_roles
    from mechmem.models.adapter import is_hooked_transformer
    from mechmem.progress import working
    from mechmem.report.circuit_graph import edge_table, plot_circuit, summary_lines

    if not is_hooked_transformer(ckpt.model):
        reason = f"{type(ckpt.model).__name__} is not a HookedTransformer, which circuit discovery needs"
        return cli.skip(reason, out / "circuit.json", {"task": ckpt.task_name})
    pair, source = circuit_prompts(ckpt.model, ckpt.task, args.n_samples, args.seed)
    with working(
        f"scoring edges and pruning the circuit ({args.ablation} ablation, {args.n_samples} prompts)"
    ):
        circuit = discover_circuit(
            ckpt.model,
            pair,
            ablation=args.ablation,
            target=args.target,
            threshold=args.threshold,
            max_exact=args.max_exact,
            with_attribution=args.attribution,
        )
    record = {"task": ckpt.task_name, "pair": source, "seed": args.seed, **circuit.to_dict()}
    print("\n".join([f"{ckpt.task_name}:", *summary_lines(circuit, source)]))
    if circuit.attribution is not None:
        record["attribution_agreement"] = agree = attribution_agreement(circuit)
        print("EAP vs exact: " + ", ".join(f"{k} {v:.3f}" for k, v in agree.items()))
    table = edge_table(circuit)
    cli.print_table(table.rows, table.headers)
    roles = head_roles(ckpt.model, ckpt.task, n=args.role_samples, seed=args.seed)
    record["roles"] = {h.name: h.role for h in roles.heads}
    cli.write_outputs(out, {"circuit.json": record, "circuit.png": plot_circuit(circuit, record["roles"])})
    print(f"wrote {out / 'circuit.json'} and {out / 'circuit.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli.run_script(main))
