"""Side check of one difference from the seed page: its printed training loop never zeroes the gradients.

    # CPU: a few minutes per seed
    python -m mechmem_papers.permutation.scripts.accumulated_grads --seeds 0 1 2 3 4 \
        --out docs/reproductions/data/permutation_accumulated.json

Trains the `task2-paper` preset (Task 2 at the published schedule) with the seed page's loop as printed:
`loss.backward(); optimizer.step()` with no `optimizer.zero_grad()`, so Adam reads the sum of every gradient
so far. Everything else is the preset's: model, data, batch size, Adam's settings, the initial weights of each
seed and the data generator our trainer uses (seed + 1). Measures what the page compares with the published
values, on the page's evaluation sequences: the probe's p(recall) and the memorisation subgroup's last-step
accuracy and max error against the Bayesian posterior. Added after the published-schedule results were seen;
it judges nothing, the page shows it as a sensitivity check. Resumable: the file is rewritten after every seed
and a seed already in it is not trained again.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import json
from pathlib import Path

from mechmem.cli import ArgumentParser, check_out_dir, positive_int, run_script, write_json
from mechmem.errors import MechmemError

PRESET = "task2-paper"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="training seeds")
    parser.add_argument(
        "--steps", type=positive_int, default=None, help="steps, >= 1 (default: the preset's)"
    )
    args = parser.parse_args(argv)
    check_out_dir(Path(args.out).parent, flag="--out")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem.models import build_model
    from mechmem.tasks import build_task, get_preset
    from mechmem_papers.permutation.run import ReproConfig, bayes_table, probe_stats

    torch.set_num_threads(1)
    spec = get_preset("permutation", PRESET)
    cfg = spec.train if args.steps is None else spec.train.replace(steps=args.steps)
    task = build_task("permutation", spec.task)
    eval_seed, n_eval = ReproConfig().eval_seed, ReproConfig().n_eval
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.exists() else {"steps": cfg.steps, "runs": []}
    if done["steps"] != cfg.steps:
        raise MechmemError(f"{out} holds runs of {done['steps']} steps, not {cfg.steps}: give another --out")
    runs = done["runs"]
    for seed in sorted(set(args.seeds) - {r["seed"] for r in runs}):
        model = build_model(spec.model, generator=torch.Generator().manual_seed(seed))
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.betas)
        data = torch.Generator().manual_seed(seed + 1)
        model.train()
        for _ in range(cfg.steps):
            batch = task.train_batch(cfg.batch_size, generator=data)
            task.loss(model(batch.tokens), batch).backward()  # as printed: the gradients are never zeroed
            optimizer.step()
        model.eval()
        rows = bayes_table(model, task, n_eval, generator=torch.Generator().manual_seed(eval_seed))
        memo = next(r for r in rows if r["step"].endswith("memorisation"))
        probe = probe_stats(model, task, n_eval, generator=torch.Generator().manual_seed(eval_seed))
        runs.append(
            {
                "seed": seed,
                "p_recall": round(probe["p_recall"], 5),
                "memorisation_acc": round(memo["acc"], 5),
                "memorisation_max_err": round(memo["max_err"], 5),
            }
        )
        print(f"seed {seed}: {runs[-1]}", flush=True)
        runs.sort(key=lambda r: r["seed"])
        write_json(out, {"preset": PRESET, "steps": cfg.steps, "loop": "no zero_grad", "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
