"""Every analysis on every architecture TransformerLens can express: the table of
docs/bring-your-own-model.md.

    python benchmarks/architectures.py --out /tmp/arch        # a few minutes on CPU

Builds each architecture of `tests/test_byom.py` (`ARCHITECTURES`) as a TransformerLens model with random
weights, saves it with `save_model` (which reloads it and checks the logits), and runs each
analysis script (`RUNS`) on the checkpoint, `patch.py --method attribution` among them.
Prints one markdown row per architecture: the save/reload logit gap, the execution strategy the intervention
engine picks for exact patching on the reloaded model (`Engine.strategy`: the hook-free replay or hooks) and,
per analysis, `ok` or the one line it refused with. Under TransformerLens 4 the models are booted as bridges;
an architecture the bridge cannot compute is refused at save.
"""

import argparse
import contextlib
import importlib.util
import io
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_byom import ARCHITECTURES, randomised, tl_model

from mechmem.analysis.interventions import Engine
from mechmem.checkpoint import load_checkpoint, save_model
from mechmem.cli import one_line
from mechmem.errors import MechmemError


def _main_of(name: str):
    spec = importlib.util.spec_from_file_location(f"arch_{name}", ROOT / "analyses" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


RUNS = {
    "detect_heads": ("detect_heads", ["--n-samples", "48"]),
    "ablate_heads": ("ablate_heads", ["--n-samples", "48"]),
    "logit_lens": ("logit_lens", ["--n-samples", "48"]),
    "probe_memory": ("probe_memory", ["--n-samples", "48"]),
    "patch": ("patch", ["--n-samples", "16"]),
    "patch --method attribution": ("patch", ["--n-samples", "16", "--method", "attribution"]),
    "circuit": ("circuit", ["--n-samples", "16"]),
    "report": ("report", ["--n-samples", "48"]),
}
"""Column -> (analysis script, its arguments after the checkpoint), sized as in tests/backend_runner.py."""


def row(name: str, overrides: dict, out: Path) -> list[str]:
    try:
        model = randomised(tl_model(**overrides))
    except ValueError as exc:  # TransformerLens itself cannot build it (e.g. shortformer on 4.x)
        return [name, f"not built by TransformerLens: {one_line(exc)}"] + [""] * (len(RUNS) + 1)
    try:
        path = save_model(model, out / name / "ckpt.pt")
    except MechmemError as exc:
        return [name, f"refused: {one_line(exc)}"] + [""] * (len(RUNS) + 1)
    tokens = torch.randint(14, (3, 10), generator=torch.Generator().manual_seed(1))
    reloaded = load_checkpoint(path).model
    with torch.no_grad():
        gap = float((reloaded(tokens) - model(tokens)).abs().max())
    cells = [name, f"{gap:.1g}", Engine(reloaded, lambda logits: logits.sum()).strategy]
    for column, (script, argv) in RUNS.items():
        err = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = _main_of(script)(
                    [str(path), "--out", str(out / name / column.replace(" ", "_")), *argv]
                )
            cells.append("ok" if not code else "exit " + str(code))
        except MechmemError as exc:
            cells.append(f"refused: {one_line(exc)}")
        except Exception as exc:  # noqa: BLE001 - a crash is a finding; the table shows it
            cells.append(f"CRASH {type(exc).__name__}: {str(exc)[:80]}")
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the checkpoints and outputs")
    parser.add_argument("names", nargs="*", help="architectures (default: all)")
    args = parser.parse_args()
    print("| architecture | reload max dlogit | patching engine | " + " | ".join(RUNS) + " |")
    print("| --- " * (len(RUNS) + 3) + "|")
    for name in args.names or ARCHITECTURES:
        print("| " + " | ".join(row(name, ARCHITECTURES[name], args.out)) + " |", flush=True)


if __name__ == "__main__":
    main()
