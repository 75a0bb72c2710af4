"""Run the analysis scripts on a checkpoint in this environment and write their JSON outputs under OUT.

    python tests/backend_runner.py CKPT OUT [SCRIPT ...]

One process for all scripts, so TransformerLens is imported once. `tests/test_backends.py` runs it under each
TransformerLens major version and compares the JSON files number by number.
"""

import importlib.util
import sys
from pathlib import Path

from mechmem.cli import run_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "detect_heads": ["--n-samples", "48"],
    "ablate_heads": ["--n-samples", "48"],
    "logit_lens": ["--n-samples", "48"],
    "probe_memory": ["--n-samples", "48"],
    "patch": ["--n-samples", "16"],
    "circuit": ["--n-samples", "16"],
    "report": ["--n-samples", "48"],
}


def train_step(ckpt: str, out: Path) -> None:
    """The loss and its gradient (canonical layout) for one training batch, and the weights after one SGD
    step.

    SGD, not Adam: Adam divides by the gradient's own size, so float noise in a gradient that is zero in exact
    arithmetic (b_K: softmax ignores a key bias) becomes a full-size step whose sign differs between backends.
    """
    import torch

    from mechmem.checkpoint import load_checkpoint
    from mechmem.cli import write_json
    from mechmem.models.adapter import canonical_parameters, canonical_state_dict

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
        spec = importlib.util.spec_from_file_location(f"runner_{name}", ROOT / "analyses" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        try:
            code = run_script(module.main, [ckpt, "--out", str(Path(out) / name), *SCRIPTS[name]])
        except Exception as exc:  # noqa: BLE001 - reported, and the other scripts still run
            code = f"{type(exc).__name__}: {exc}"
        print(f"{name}: exit {code}", flush=True)
        status = status or (1 if code else 0)
    return status


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
