"""Side check of the ladder's metric: how much one fixed evaluation batch can read off for random triggers.

    # CPU: ~5 min
    python -m mechmem_papers.birth.scripts.eval_spread --out docs/reproductions/data/birth_eval_spread.json

Retrains the ladder's R0 one-layer random-trigger cell (seed 0: the same run, its curve equal to the committed
one) and measures its in-context accuracy (`BirthTask.batch_metrics`) on the 128-sequence curve batch
(generator seed 2), on 16 other 128-sequence batches (seeds 3..18), on the ladder's final batch (1024
sequences, seed 1000) and on 4096 fresh sequences (seed 5000). Added after the ladder's results were seen; it
judges nothing.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

from pathlib import Path

from mechmem.cli import ArgumentParser, check_out_dir, run_script, write_json


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    check_out_dir(Path(args.out).parent, flag="--out")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem.models.transformer import build_transformer
    from mechmem.tasks import build_task
    from mechmem.tasks.birth.models import full_config
    from mechmem.tasks.birth.task import N_TOKENS, BirthConfig
    from mechmem.training import TrainConfig, train
    from mechmem_papers.birth.scale import final_accuracy

    torch.set_num_threads(1)
    cfg = full_config(d_vocab=N_TOKENS, n_ctx=64, n_layers=1, d_model=64)
    task = build_task("birth", BirthConfig(seq_len=64, fixed_triggers=False, head_only_loss=False))
    tc = TrainConfig(
        steps=1000,
        batch_size=32,
        lr=0.2,
        optimizer="sgd",
        momentum=0.9,
        weight_decay=1e-4,
        eval_every=25,
        eval_samples=128,
        seed=0,
    )
    res = train(
        build_transformer(cfg, generator=torch.Generator().manual_seed(0)),
        task,
        tc,
        model_config=cfg,
        progress=False,
    )

    @torch.no_grad()
    def acc(seed: int, n: int) -> float:
        batch = task.eval_batch(n, generator=torch.Generator().manual_seed(seed))
        return round(task.batch_metrics(res.model(batch.tokens), batch)["icl_acc"], 5)

    out = {
        "run": "ladder cell R0/1l_random retrained (seed 0)",
        "curve_end": round(res.history[-1]["eval_icl_acc"], 5),
        "curve_batch_128_seed2": acc(2, 128),
        "other_batches_128": {str(s): acc(s, 128) for s in range(3, 19)},
        "final_batch_1024_seed1000": round(final_accuracy(res.model, task, 1024, 0)["icl_acc"], 5),
        "fresh_4096_seed5000": acc(5000, 4096),
    }
    write_json(args.out, out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
