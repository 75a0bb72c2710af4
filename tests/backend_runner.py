"""Run the analysis scripts on a checkpoint in this environment and write their JSON outputs under OUT.

    python tests/backend_runner.py CKPT OUT [NAME ...]

NAME is an output folder of `SCRIPTS` (`dynamics` runs on a series of step checkpoints written from CKPT) or
`train_step`; none: all of them.

One process for all scripts, so TransformerLens is imported once. `tests/test_backends.py` runs it under each
TransformerLens major version and compares the JSON files number by number.
"""

import sys
from pathlib import Path

from helpers import load_script

from mechmem.cli import run_script

SCRIPTS = {  # output folder -> (script, its flags after the checkpoint)
    "detect_heads": ("detect_heads", ["--n-samples", "48"]),
    "ablate_heads": ("ablate_heads", ["--n-samples", "48"]),
    "logit_lens": ("logit_lens", ["--n-samples", "48"]),
    "probe_memory": ("probe_memory", ["--n-samples", "48"]),
    "patch": ("patch", ["--n-samples", "16"]),
    "attribution": ("patch", ["--n-samples", "16", "--method", "attribution"]),
    "circuit": ("circuit", ["--n-samples", "16"]),
    "report": ("report", ["--n-samples", "48"]),
    "dynamics": ("dynamics", ["--n-samples", "32", "--quantities", "all"]),
}


def write_series(ckpt: str, run_dir: Path, steps: tuple[int, ...] = (10, 20, 30)) -> None:
    """A run folder of step checkpoints for `dynamics`: the fixture's weights blended from their seed-0
    initial weights (canonical layout, the same numbers under either backend), step s at s / max(steps)."""
    import torch

    from mechmem.checkpoint import load_checkpoint, save_checkpoint
    from mechmem.models.weights import canonical_state_dict, initial_weights, load_canonical_state_dict

    loaded = load_checkpoint(ckpt)
    trained = {k: v.clone() for k, v in canonical_state_dict(loaded.model).items()}  # the model changes below
    start = initial_weights(loaded.model_config, torch.Generator().manual_seed(0))
    for step in steps:
        a = step / max(steps)
        load_canonical_state_dict(loaded.model, {k: (1 - a) * start[k] + a * v for k, v in trained.items()})
        save_checkpoint(
            run_dir / "checkpoints" / f"step_{step}.pt",
            model=loaded.model,
            model_config=loaded.model_config,
            task_name=loaded.task_name,
            task_config=loaded.task.config,
        )


def train_step(ckpt: str, out: Path) -> None:
    """The loss and its gradient (canonical layout) for one training batch, and the weights after one SGD
    step.

    SGD, not Adam: Adam divides by the gradient's own size, so float noise in a gradient that is zero in exact
    arithmetic (b_K: softmax ignores a key bias) becomes a full-size step whose sign differs between backends.
    """
    import torch

    from mechmem.checkpoint import load_checkpoint
    from mechmem.cli import write_json
    from mechmem.models.weights import canonical_parameters, canonical_state_dict

    loaded = load_checkpoint(ckpt)
    model, task = loaded.model.train(), loaded.task
    batch = task.train_batch(16, generator=torch.Generator().manual_seed(7))
    params = canonical_parameters(model)
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    loss = task.loss(model(batch.tokens), batch)
    loss.backward()
    grads = canonical_state_dict(model, grads=True)
    optimizer.step()
    after = canonical_state_dict(model)
    out.mkdir(parents=True, exist_ok=True)
    write_json(
        out / "train_step.json",
        {
            "loss": loss.item(),
            "grads": {k: v.flatten().tolist() for k, v in grads.items()},
            "after_step": {k: v.flatten().tolist() for k, v in after.items()},
        },
    )


def run(ckpt: str, out: str, names: list[str]) -> int:
    status = 0
    for name in names or [*SCRIPTS, "train_step"]:
        if name == "train_step":
            train_step(ckpt, Path(out) / name)
            print("train_step: exit 0", flush=True)
            continue
        script, flags = SCRIPTS[name]
        module = load_script(script)
        source = ckpt
        if script == "dynamics":
            source = str(Path(out) / "series")
            write_series(ckpt, Path(source))
        try:
            code = run_script(module.main, [source, "--out", str(Path(out) / name), *flags])
        except Exception as exc:  # noqa: BLE001 - reported, and the other scripts still run
            code = f"{type(exc).__name__}: {exc}"
        print(f"{name}: exit {code}", flush=True)
        status = status or (1 if code else 0)
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
