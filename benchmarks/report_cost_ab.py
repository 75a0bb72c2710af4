"""The report's cost on checkpoints, this code beside another source tree, in one run.

    git worktree add /tmp/before REV                      # the code to compare with
    python benchmarks/report_cost_ab.py --baseline /tmp/before runs/demo/*/ckpt.pt --random 8x256

For each checkpoint (and each `--random LxD` model: a random LayerNorm + GELU model on the generic repeats
task, saved once by this tree), `analyses/report.py CKPT --out DIR` runs at its DEFAULT settings from this
tree and from the baseline tree at the same time, each a subprocess on one thread with its own tree's `src`
first on the path, so the two share the machine's load. Each report's own cost record (report.json's "cost")
gives its CPU seconds, model forward passes (`passes`), sequences (`rows`) and peak resident memory (the
largest of its steps' `peak_rss_mb`). Prints one row per checkpoint:
before, after, and the ratio of the CPU times; `--out FILE` keeps the rows as JSON.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from mechmem.checkpoint import save_model
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.tables import format_table
from mechmem.tasks.generic import RepeatsConfig

HERE = Path(__file__).resolve().parent.parent


def random_checkpoint(size: str, folder: Path, seed: int = 0) -> Path:
    """A random LxD or LxDxH model (H heads, default 4; MLP 4 D, LayerNorm, GELU, context 64, vocabulary 64)
    saved with the repeats task."""
    layers, d_model, *heads = (int(x) for x in size.split("x"))
    config = TransformerConfig(
        n_layers=layers, d_model=d_model, n_heads=heads[0] if heads else 4, d_vocab=64, n_ctx=64,
        d_mlp=4 * d_model, act_fn="gelu", normalization_type="LN",
    )  # fmt: skip
    model = build_transformer(config, generator=torch.Generator().manual_seed(seed)).eval()
    path = folder / f"random-{size}" / "ckpt.pt"
    path.parent.mkdir(parents=True)
    return save_model(model, path, task_config=RepeatsConfig.for_model(model))


def start(tree: Path, ckpt: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    command = [sys.executable, str(tree / "analyses" / "report.py"), str(ckpt), "--out", str(out)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def cost_of(proc: subprocess.Popen, out: Path) -> dict[str, Any]:
    _, err = proc.communicate()
    if proc.returncode:
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    cost = json.loads((out / "report.json").read_text())["cost"]
    peak = max((step.get("peak_rss_mb", 0.0) for step in cost["steps"].values()), default=None)
    return {**{k: cost[k] for k in ("seconds", "cpu_seconds", "passes", "rows")}, "peak_rss_mb": peak}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="*", type=Path)
    parser.add_argument("--baseline", type=Path, required=True, help="source tree to compare with")
    parser.add_argument("--random", nargs="*", default=[], help="random models LxD or LxDxH, e.g. 8x256")
    parser.add_argument("--out", type=Path, default=None, help="write the rows here (JSON)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mechmem-report-ab-"))
    ckpts = [*args.checkpoints, *(random_checkpoint(s, work) for s in args.random)]
    rows = []
    for ckpt in ckpts:
        name = ckpt.parent.name
        outs = {side: work / side / name for side in ("before", "after")}
        procs = {
            "before": start(args.baseline, ckpt, outs["before"]),
            "after": start(HERE, ckpt, outs["after"]),
        }
        found = {side: cost_of(p, outs[side]) for side, p in procs.items()}
        rows.append({"model": name, **found})
        print(f"{name}: {json.dumps(found)}", flush=True)
    table = []
    for r in rows:
        b, a = r["before"], r["after"]
        ok = "error" not in b and "error" not in a
        table.append([
            r["model"],
            b.get("cpu_seconds", b.get("error")), b.get("passes"), b.get("rows"), b.get("peak_rss_mb"),
            a.get("cpu_seconds", a.get("error")), a.get("passes"), a.get("rows"), a.get("peak_rss_mb"),
            round(a["cpu_seconds"] / b["cpu_seconds"], 2) if ok else None,
        ])  # fmt: skip
    headers = [
        "model", "before CPU s", "passes", "rows", "peak MiB",
        "after CPU s", "passes", "rows", "peak MiB", "after/before CPU",
    ]  # fmt: skip
    print(format_table(table, headers))
    if args.out:
        args.out.write_text(json.dumps({"baseline": str(args.baseline), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
