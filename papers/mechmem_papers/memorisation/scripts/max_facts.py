"""Binary-search how many facts one variant stores (11 inits trained as one batched model).

    # CPU, minutes
    python -m mechmem_papers.memorisation.scripts.max_facts --mixing 2emb --no-mlp --no-norms \
        --max-epochs 200 --patience 50
    # the anchor
    python -m mechmem_papers.memorisation.scripts.max_facts --mixing 2emb --no-mlp --no-norms \
        --max-epochs 3000 --patience 500 --out docs/reproductions/data/facts_anchor_2emb_nomlp.json
    python -m mechmem_papers.memorisation.scripts.max_facts --mixing attn --act relu --acc 0.9 \
        --out runs/facts/attn.json

Defaults are the published variant sizes (n_in=32, d=16), schedule (lr 1e-2, 3e-3, 1e-3; 50,000 epochs per
phase, patience 5,000) and search (the authors' bracket, precision 8); on CPU cap the schedule.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import argparse
from pathlib import Path

from mechmem import cli
from mechmem.cli import ArgumentParser, print_table, run_script, write_json
from mechmem_papers.memorisation.options import ACTS, MIXINGS, add_schedule_args


def main(argv: list[str] | None = None) -> int:
    """Search one variant's capacity."""
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--mixing", choices=MIXINGS, default="attn", help="learned attention, uniform attention or 2Emb"
    )
    p.add_argument("--no-mlp", action="store_true", help="drop the MLP")
    p.add_argument("--no-norms", action="store_true", help="drop the RMSNorms")
    p.add_argument(
        "--no-mlp-residual", action="store_true", help="the MLP output replaces the residual stream"
    )
    p.add_argument("--no-bias", action="store_true", help="no MLP or unembedding biases")
    p.add_argument("--act", choices=ACTS, default="gelu", help="MLP activation")
    p.add_argument("--d", type=cli.positive_int, default=16, help="d_model = d_mlp = n_out, >= 1")
    p.add_argument("--n-in", type=cli.positive_int, default=None, help="input vocabulary, >= 1 (default 2d)")
    add_schedule_args(p)
    p.add_argument("--precision", type=cli.positive_int, default=8, help="binary-search precision, >= 1")
    p.add_argument(
        "--repeat", type=cli.nonnegative_int, default=0, help="repeat index r >= 0: seeds 11r..11r+10"
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--threads", type=cli.thread_count, default=1, help="torch CPU threads, >= 1")
    p.add_argument("--out", default=None, help="write the result (a CapacityResult) as JSON here")
    args = p.parse_args(argv)
    if args.out:
        cli.check_out_dir(Path(args.out).parent, flag="--out")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem.config import resolve_device
    from mechmem.models.facts import FactsModelConfig
    from mechmem_papers.memorisation.batched import Schedule
    from mechmem_papers.memorisation.capacity import N_INITS, find_capacity

    torch.set_num_threads(args.threads)
    cfg = FactsModelConfig(
        n_in=args.n_in or 2 * args.d,
        n_out=args.d,
        d_model=args.d,
        d_mlp=args.d,
        mixing=args.mixing,
        mlp=not args.no_mlp,
        norms=not args.no_norms,
        mlp_residual=not args.no_mlp_residual,
        bias=not args.no_bias,
        act_fn=args.act,
    )
    schedule = Schedule(max_epochs=args.max_epochs, patience=args.patience, target_acc=args.acc)
    print(f"{cfg.name}  (n_in={cfg.n_in}, d={cfg.d_model}, acc>={args.acc}, {args.max_epochs} epochs/phase)")
    result = find_capacity(
        cfg,
        schedule=schedule,
        seeds=[N_INITS * args.repeat + i for i in range(N_INITS)],
        precision=args.precision,
        device=resolve_device(args.device),
        on_trial=lambda n, o: print(
            f"  n={n:5d}: {o.n_success}/{N_INITS} inits stored every fact, best acc {o.best_acc.max():.3f}"
        ),
    )
    row = [cfg.name, result["any"], result["most"], result["all"], f"{result.seconds:.0f}"]
    print_table([row], ["variant", "any", "most", "all", "seconds"])
    if args.out:
        write_json(args.out, result.to_dict())
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
