"""Run analyses on every step checkpoint of a run and find when each part of the circuit forms.

    mechmem train birth --preset quick --out runs/birth --save-every 50    # 30 checkpoints
    mechmem dynamics runs/birth                                            # about 30 s on CPU
    mechmem dynamics runs/task2 --quantities loss,heads,roles --level '*.induction=0.4'
    mechmem dynamics runs/birth --quantities circuit --circuit-heads L0H2,L1H1   # progress measures
    mechmem dynamics runs/control --compare runs/ablated --quantities loss,circuit  # two runs side by side

Every checkpoint (RUN_DIR/checkpoints/step_N.pt) is measured on one evaluation draw. Each curve's event is a
stated level crossing or its steepest change. Writes OUT/dynamics.json and one OUT/dynamics_QUANTITY.png per
quantity (with --compare: OUT/dynamics_compare.json and dynamics_compare_QUANTITY.png).
"""

from mechmem import cli
from mechmem.analysis.transitions import parse_levels, parse_pairs
from mechmem.cli.args import parse_quantities


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    parser = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=cli.input_path,
        help="a run directory holding checkpoints/step_N.pt",
    )
    parser.add_argument("--out", default=None, help="output directory (default: RUN_DIR)")
    parser.add_argument("--quantities", default="loss,heads,probes", help="comma-separated names, or all")
    parser.add_argument("--level", action="append", default=[], help="CURVE_GLOB=VALUE: an event's level")
    parser.add_argument(
        "--match", action="append", default=[], help="KEY=CURVE: compare metrics.jsonl KEY's event"
    )
    parser.add_argument(
        "--n-samples",
        type=cli.int_range(2, cli.MAX_SAMPLES),
        default=128,
        help=f"evaluation sequences, in [2, {cli.MAX_SAMPLES}] (default 128; bounded by a memory estimate)",
    )
    parser.add_argument(
        "--seed", type=cli.seed_int, default=0, help="the evaluation draw's seed, in [0, 2**63)"
    )
    parser.add_argument("--device", type=cli.device_name, default="cpu", help="cpu or cuda (default: cpu)")
    circuit = parser.add_mutually_exclusive_group()
    circuit.add_argument(
        "--circuit-edges", default="", help="E1,E2: the circuit quantity's edges (e.g. L0H2->L1H1.k)"
    )
    circuit.add_argument(
        "--circuit-heads", default="", help="L0H2,L1H1: every edge into and out of these heads"
    )
    parser.add_argument(
        "--compare",
        metavar="RUN_B",
        type=cli.input_path,
        default=None,
        help="a second run of the same model and task: both runs' curves side by side, with B - A",
    )
    cli.add_threads_flag(parser)
    cli.add_task_module_arg(parser)
    cli.add_nonfinite_flag(parser)
    args = parser.parse_args(argv)
    quantities, levels = parse_quantities(args.quantities), parse_levels(args.level)
    matches = parse_pairs(args.match, "--match")
    edges, heads = (
        [n.strip() for n in t.split(",") if n.strip()] for t in (args.circuit_edges, args.circuit_heads)
    )
    out = cli.check_out_dir(args.run_dir if args.out is None else args.out)
    # torch is imported from here on, after every check the flags alone decide; then the device, at once
    from mechmem.config import resolve_device

    resolve_device(args.device)
    from mechmem.analysis import dynamics
    from mechmem.analysis.dynamics import views as dynamics_views
    from mechmem.analysis.dynamics.compare import comparison_lines as compare_lines
    from mechmem.progress import working
    from mechmem.tasks import load_task_module
    from mechmem.threads import use_threads

    use_threads(args.threads)
    for module in args.task_module:
        load_task_module(module)
    files = dynamics.checked_steps(args.run_dir, allow_nonfinite=args.allow_nonfinite)
    settings = {"n": args.n_samples, "seed": args.seed, "device": args.device}
    if args.compare is not None:
        dynamics.checked_steps(args.compare, allow_nonfinite=args.allow_nonfinite)
        with working(f"measuring {', '.join(quantities)} on two runs"):
            both = dynamics.compare_dynamics(
                args.run_dir, args.compare, quantities, circuit_edges=edges, circuit_heads=heads, **settings
            )
        for result in (both.a, both.b):
            dynamics.set_levels(result, levels)
        print("\n".join(compare_lines(both)))
        figures = {
            f"dynamics_compare_{q}.png": dynamics.plot_comparison(both, q)
            for q, g in both.a.groups.items()
            if any(c in both.b.curves for c in g)
        }
        cli.write_outputs(cli.claim_out(out), {"dynamics_compare.json": both.to_dict(), **figures})
        print(f"wrote {out / 'dynamics_compare.json'} and dynamics_compare_<quantity>.png")
        return 0
    circuit = None
    if "circuit" in quantities and (edges or heads):
        circuit = dynamics.final_circuit(args.run_dir, edges=edges, heads=heads, seed=args.seed)
    with working(f"measuring {', '.join(quantities)} on {len(files)} step checkpoints"):
        result = dynamics.run_dynamics(args.run_dir, quantities, circuit=circuit, **settings)
    if skipped := result.info.get("circuit", {}).get("skipped"):
        print(f"circuit: not measured ({skipped})")
    dynamics.set_levels(result, levels)
    print("\n".join(dynamics_views.dynamics_lines(result, args.run_dir, matches)))
    figures = {
        f"dynamics_{q}.png": dynamics_views.plot_dynamics(result, q) for q, g in result.groups.items() if g
    }
    cli.write_outputs(cli.claim_out(out), {"dynamics.json": result.to_dict(), **figures})
    print(f"wrote {out / 'dynamics.json'} and dynamics_<quantity>.png")
    return 0
