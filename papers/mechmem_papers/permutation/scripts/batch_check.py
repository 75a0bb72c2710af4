"""Side check of one unknown of the seed page: its batch size, at the published number of samples.

    # CPU: about 10 minutes per Task 2 seed at batch 64, 2 per Task 1 seed
    python -m mechmem_papers.permutation.scripts.batch_check --preset task2-paper --batch-size 64 \
        --seeds 0 1 2 --out docs/reproductions/data/permutation_batch64.json

Trains `task1-paper` or `task2-paper` (the published epochs of 100,000 samples, Adam 1e-3, constant rate) with
`--batch-size` instead of the preset's 128, so the same samples arrive in more, smaller steps, and measures
what the authors' page publishes, on the page's evaluation sequences: per answer step the accuracy, MAE and
max error against the Bayesian posterior (and the last step's elimination and memorisation subgroups), and the
probe's p(recall) and p(elimination), as the mean over probes and as the median probe (the authors' page
reports one probe sequence). The rule that judges it is in docs/record/2026-12-07-permutation-sources.md,
written before its first run. Resumable: the file is rewritten after every seed and a seed already in it is
not trained again.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import json
from pathlib import Path

from mechmem.cli import ArgumentParser, check_out_dir, positive_int, run_script, write_json
from mechmem.errors import MechmemError

PRESETS = ("task1-paper", "task2-paper")
EPOCH_SAMPLES = {"task1-paper": 20 * 100_000, "task2-paper": 50 * 100_000}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=PRESETS, required=True, help="the published-schedule preset")
    parser.add_argument("--batch-size", type=positive_int, required=True, help="batch size, >= 1")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    args = parser.parse_args(argv)
    check_out_dir(Path(args.out).parent, flag="--out")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem.tasks import build_task, get_preset
    from mechmem.training.run import train_preset
    from mechmem_papers.permutation.run import side_check_run

    torch.set_num_threads(1)
    steps = EPOCH_SAMPLES[args.preset] // args.batch_size
    task = build_task("permutation", get_preset("permutation", args.preset).task)
    out = Path(args.out)
    head = {"preset": args.preset, "batch_size": args.batch_size, "steps": steps}
    done = json.loads(out.read_text()) if out.exists() else {**head, "runs": []}
    if {k: done.get(k) for k in head} != head:
        raise MechmemError(f"{out} holds runs of another preset, batch size or length: give another --out")
    runs = done["runs"]
    for seed in sorted(set(args.seeds) - {r["seed"] for r in runs}):
        result = train_preset(
            "permutation", args.preset, seed=seed, steps=steps, batch_size=args.batch_size, progress=False
        )
        loss = float(result.history[-1]["train_loss"])
        runs.append(side_check_run(result.model.eval(), task, seed=seed, train_loss=loss))
        print(f"seed {seed}: probe {runs[-1]['probe']}", flush=True)
        runs.sort(key=lambda r: r["seed"])
        write_json(out, {**head, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
