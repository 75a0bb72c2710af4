"""What the report and the circuit analysis cost as the model grows: wall time and memory per section, and a
fitted growth law in the number of layers.

    python benchmarks/report_scaling.py                                   # the default grid (tens of minutes)
    python benchmarks/report_scaling.py --grid large --skip-circuit --progress   # layers 1-12, d_model 64-768
    python benchmarks/report_scaling.py --sizes 1x64 2x64 --n-samples 64 --role-samples 128   # about a minute
    python benchmarks/report_scaling.py --sizes 12x768x12 --device cuda --out report_scaling_gpu.json

The measurements kept in the repository are in docs/record/data/ (report_scaling_DATE_WHAT.json), described in
docs/record/2026-12-01-report-cost.md.

Each size LxD[xH][@T] is a random TransformerLens model built by `build_transformer`
(`build_transformer`): L layers, d_model D, H heads (default --heads), LayerNorm, GELU MLP of width 4 D,
vocabulary --d-vocab, context T (default --n-ctx), on the generic "repeats" task sized to it. For each size,
in this one process, it runs `build_report` at the given settings (its `cost` gives every section's wall time
and memory) and the circuit analysis of analyses/circuit.py (`circuit_pair` + `discover_circuit` with mean
ablation, then the head roles on --circuit-role-samples sequences), and prints one row per size: the time of
each report section, the report's total, the circuit analysis's total, and the process's peak memory, then a
second table of how much each report step raised the peak memory (`rss_rise_mb`). Sizes
run from the smallest (fewest parameters) up, so the peak-memory column is the peak reached by that size or an
earlier one (ru_maxrss only grows; see `mechmem.report.MEMORY_NOTE`).

Side by side with other code: `--baseline DIR` names a source tree of the code to compare with (e.g. the
commit before the report's large-model speed-ups: `git archive 77451c9 | tar -x -C /tmp/before`); the sizes in
--baseline-sizes (default: all) are run by DIR's own copy of this script, with DIR/src first on the path, in a
subprocess started before this process's own sizes, so the two run at the same time on the machine's two
cores under the same load (one thread each). Their rows sit under "before" in the JSON, next to this code's,
and the table gives both totals and the ratio of the CPU times (the steadier measure on a shared machine).
`--baseline-json FILE` attaches the rows of a baseline run made earlier instead.

The floor (`benchmarks/floor.py`): per size, the report's counted forward calls on the model (`rows`
sequences, each counted as a full forward; the replay's and backward passes are not counted), the float32
matmul rate measured in the same run on --threads threads (on the GPU with --device cuda), the time that work
takes at that rate, and the ratio of the report's wall and CPU seconds to it.

The growth law: for every d_model with at least two layer counts, the report's total wall time, and
separately its CPU time, is fitted as a * L^k by least squares on log time against log L (in-process times
carry no start-up; --startup S subtracts a further fixed S seconds from the wall time first); the same over
d_model (a * d^k, at fixed layers, heads and context) and over the context (a * T^k). Times are
single runs on --threads torch threads: a loaded machine shows in the wall times much more than in the CPU
times (`mechmem.report.ReportCost`). Writes the rows, the fits and the settings to --out (JSON).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor import floor_table, forward_flops, matmul_rate

from mechmem.analysis.circuits.discovery import circuit_pair, discover_circuit
from mechmem.analysis.roles import head_roles
from mechmem.cli import format_table
from mechmem.models.backend import move_model
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.report import build_report, peak_rss_mb
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask

DEFAULT_SIZES = ("1x64", "2x64", "4x64", "8x64", "2x256", "4x256")
"""The default grid (`--grid issue`, the first cost table it reproduced): layers 1, 2, 4, 8 at d_model 64 and
layers 2, 4 at d_model 256 (4 heads)."""
GRIDS = {
    "issue": DEFAULT_SIZES,
    "large": (
        *("1x64", "2x64", "4x64", "8x64", "12x64"),  # layers 1-12
        *("4x128", "4x256", "4x384x6", "4x768x12"),  # d_model 64-768 at 4 layers
        *("4x256x8", "4x384x12"),  # heads 4-12 at fixed width
        *("2x64@32", "2x64@128"),  # sequence length 32-128
        *("8x256", "12x384x6", "12x768x12"),  # up to a GPT-2-small-sized model
    ),
}
"""Named grids (--grid): the default one, and one over layers 1-12, d_model 64-768, heads 4-12 and sequence
length 32-128 that ends at 12 layers, d_model 768, 12 heads (hours on one CPU core at the report's
defaults)."""


def parse_size(text: str, heads: int, n_ctx: int) -> dict[str, int]:
    """'4x256', '12x768x12' or '2x64@128' -> layers, d_model, heads, n_ctx."""
    body, _, ctx = text.partition("@")
    parts = body.split("x")
    if (
        len(parts) not in (2, 3)
        or not all(p.isdigit() and int(p) > 0 for p in parts)
        or (ctx and not ctx.isdigit())
    ):
        raise argparse.ArgumentTypeError(
            f"size {text!r} is not LAYERSxD_MODEL[xHEADS][@N_CTX], e.g. 4x256x4@64"
        )
    size = {
        "layers": int(parts[0]),
        "d_model": int(parts[1]),
        "heads": int(parts[2]) if len(parts) == 3 else heads,
        "n_ctx": int(ctx) if ctx else n_ctx,
    }
    if size["d_model"] % size["heads"]:
        raise argparse.ArgumentTypeError(f"size {text!r}: d_model must be divisible by the number of heads")
    return size


def build(size: dict[str, int], d_vocab: int, seed: int) -> tuple[torch.nn.Module, RepeatsTask]:
    """The random LayerNorm + GELU model of `size` and the repeats task sized to it."""
    config = TransformerConfig(
        n_layers=size["layers"],
        d_model=size["d_model"],
        n_heads=size["heads"],
        d_vocab=d_vocab,
        n_ctx=size["n_ctx"],
        d_mlp=4 * size["d_model"],
        act_fn="gelu",
        normalization_type="LN",
    )
    model = build_transformer(config, generator=torch.Generator().manual_seed(seed)).eval()
    return model, RepeatsTask(RepeatsConfig.for_model(model))


def circuit_cost(model: torch.nn.Module, task: RepeatsTask, args: argparse.Namespace) -> dict[str, float]:
    """Wall time of analyses/circuit.py's computation at its defaults: pair, edge scores, pruning, roles."""
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        pair, _ = circuit_pair(model, task, args.circuit_samples, generator=torch.Generator().manual_seed(0))
        circuit = discover_circuit(model, pair.to(args.device), ablation="mean")
        discovered = time.perf_counter()
        head_roles(model, task, n=args.circuit_role_samples, seed=0)
    end = time.perf_counter()
    return {
        "discover": discovered - start,
        "roles": end - discovered,
        "total": end - start,
        "cpu_seconds": time.process_time() - cpu,
        "edges": len(circuit.graph.edges),
    }


def run_size(size: dict[str, int], args: argparse.Namespace) -> dict[str, Any]:
    model, task = build(size, args.d_vocab, args.seed)
    model = move_model(model, args.device)
    params = sum(p.numel() for p in model.parameters())
    report = build_report(
        model,
        task,
        title="cost",
        n_samples=args.n_samples,
        role_samples=args.role_samples,
        seed=args.seed,
        progress=args.progress,
    )
    circuit = circuit_cost(model, task, args) if not args.skip_circuit else {"total": math.nan}
    circuit.setdefault("cpu_seconds", math.nan)
    return {
        **size,
        "params": params,
        "report": report.cost,
        "circuit": circuit,
        "peak_rss_mb": peak_rss_mb(),
    }


def fit_growth(
    rows: list[dict[str, Any]], startup: float, measure: str = "seconds", over: str = "layers"
) -> list[dict[str, Any]]:
    """Per group of sizes that differ only in `over` ("layers", "d_model" or "n_ctx"), with two or more values
    of it: the report's `measure` ("seconds" or "cpu_seconds", or a step's, "steps.NAME.seconds") minus
    `startup` ~ a * x^k, fitted by least squares on the logarithms. Each fit names the sizes it holds fixed
    and lists the values of `over` under that name."""
    fixed = [k for k in ("layers", "d_model", "heads", "n_ctx") if k != over]
    groups: dict[tuple[int, ...], list[tuple[int, float]]] = {}
    for r in rows:
        value: Any = r["report"]
        for part in measure.split("."):
            value = value.get(part, math.nan) if isinstance(value, dict) else math.nan
        groups.setdefault(tuple(r[k] for k in fixed), []).append((r[over], value - startup))
    fits = []
    for key, points in groups.items():
        points = [(x, t) for x, t in points if t > 0]
        if len({x for x, _ in points}) < 2:
            continue
        k, log_a = np.polyfit([math.log(x) for x, _ in points], [math.log(t) for _, t in points], 1)
        fits.append(
            {
                "measure": measure,
                "over": over,
                **dict(zip(fixed, key)),
                over: [x for x, _ in points],
                "k": float(k),
                "a": float(math.exp(log_a)),
            }
        )
    return fits


def start_baseline(args: argparse.Namespace, sizes: list[str], out: Path) -> subprocess.Popen:
    """DIR's own benchmark on `sizes`, with the same settings, in a subprocess writing its JSON to `out`."""
    script = args.baseline / "benchmarks" / "report_scaling.py"
    if not script.exists():
        raise ValueError(f"--baseline {args.baseline}: no benchmarks/report_scaling.py there")
    command = [sys.executable, str(script), "--sizes", *sizes, "--out", str(out)]
    for flag in ("heads", "n_ctx", "d_vocab", "n_samples", "role_samples", "circuit_samples"):
        command += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    command += ["--circuit-role-samples", str(args.circuit_role_samples), "--threads", str(args.threads)]
    command += ["--device", args.device, "--seed", str(args.seed)]
    command += ["--skip-circuit"] if args.skip_circuit else []
    env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve() / "src")}
    return subprocess.Popen(command, env=env, cwd=args.baseline, stdout=subprocess.DEVNULL)


def attach_baseline(rows: list[dict[str, Any]], record: dict[str, Any]) -> None:
    """Put the baseline's row of each size under "before" in this code's row of the same size."""
    key = ("layers", "d_model", "heads", "n_ctx")
    before = {tuple(r[k] for k in key): r for r in record["rows"]}
    for r in rows:
        if (found := before.get(tuple(r[k] for k in key))) is not None:
            r["before"] = found


def table(rows: list[dict[str, Any]]) -> tuple[list[list[Any]], list[str]]:
    """One row per size: each report step's wall seconds, the totals (wall, CPU, model passes and the
    sequences they ran) and the peak memory."""
    steps = list(dict.fromkeys(k for r in rows for k in r["report"]["steps"]))
    headers = ["L", "d", "H", "T", "params", *steps, "report s", "(cpu s)", "passes", "rows"]
    headers += ["circuit s", "(cpu s)", "peak MB"]
    compare = any("before" in r for r in rows)
    if compare:
        headers += ["before s", "(cpu s)", "cpu ratio"]
    out = []
    for r in rows:
        step = r["report"]["steps"]
        old = r.get("before", {}).get("report", {})
        before = [old.get("seconds", math.nan), old.get("cpu_seconds", math.nan)]
        before.append(before[1] / r["report"]["cpu_seconds"])
        out.append(
            [
                r["layers"],
                r["d_model"],
                r["heads"],
                r["n_ctx"],
                r["params"],
                *(step[k]["seconds"] if k in step else float("nan") for k in steps),
                r["report"]["seconds"],
                r["report"]["cpu_seconds"],
                r["report"]["passes"],
                r["report"]["rows"],
                r["circuit"]["total"],
                r["circuit"]["cpu_seconds"],
                r["peak_rss_mb"],
                *(before if compare else []),
            ]
        )
    return out, headers


def report_floor(rows: list[dict[str, Any]], d_vocab: int, rate: float) -> str:
    """The floor of each size's report (`floor.py`): its counted model forward calls, each as a full forward
    of the sequences it ran (the replay's passes and backward passes are not counted, so the true work is
    larger), against the report's wall and CPU seconds."""
    work = []
    for r in rows:
        cfg = argparse.Namespace(
            n_layers=r["layers"], d_model=r["d_model"], n_heads=r["heads"], d_head=r["d_model"] // r["heads"]
        )
        cfg.d_mlp, cfg.d_vocab = 4 * r["d_model"], d_vocab
        flops = r["report"]["rows"] * forward_flops(cfg, 1, r["n_ctx"])
        label = f"{r['layers']}x{r['d_model']}x{r['heads']}@{r['n_ctx']} report, {r['report']['rows']} rows"
        work.append((label, flops, {"wall": r["report"]["seconds"], "cpu": r["report"]["cpu_seconds"]}))
    return floor_table(work, rate)


def memory_table(rows: list[dict[str, Any]]) -> tuple[list[list[Any]], list[str]]:
    """One row per size: how much each report step raised the process's peak resident memory (MB), and the
    peak after the report (ru_maxrss only grows: a step below an earlier peak shows 0)."""
    steps = list(dict.fromkeys(k for r in rows for k in r["report"]["steps"]))
    out = []
    for r in rows:
        step = r["report"]["steps"]
        rise = [step[k].get("rss_rise_mb", math.nan) if k in step else math.nan for k in steps]
        peak = max((v.get("peak_rss_mb", 0.0) for v in step.values()), default=math.nan)
        out.append([r["layers"], r["d_model"], r["heads"], r["n_ctx"], *rise, peak])
    return out, ["L", "d", "H", "T", *(f"{k} +MB" for k in steps), "report peak MB"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", help="LAYERSxD_MODEL[xHEADS][@N_CTX] (default: --grid's)")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="issue", help="a named grid of sizes")
    parser.add_argument("--heads", type=int, default=4, help="heads where a size does not give them")
    parser.add_argument(
        "--n-ctx", type=int, default=64, help="context (sequence length) where a size has none"
    )
    parser.add_argument("--d-vocab", type=int, default=64, help="vocabulary")
    parser.add_argument(
        "--n-samples", type=int, default=512, help="report's sequences per section (its default)"
    )
    parser.add_argument(
        "--role-samples", type=int, default=1000, help="report's sequences for the head roles"
    )
    parser.add_argument("--circuit-samples", type=int, default=64, help="circuit.py's prompts (its default)")
    parser.add_argument("--circuit-role-samples", type=int, default=256, help="circuit.py's role sequences")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--seed", type=int, default=0, help="weights and data seed")
    parser.add_argument("--startup", type=float, default=0.0, help="seconds subtracted before the growth fit")
    parser.add_argument("--progress", action="store_true", help="the report's progress lines")
    parser.add_argument(
        "--skip-circuit", action="store_true", help="time the report only, not analyses/circuit.py's work"
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="tabulate the rows an earlier run of this benchmark wrote instead of running the sizes",
    )
    parser.add_argument(
        "--baseline", type=Path, help="source tree of the code to compare with (its src/ and benchmarks/)"
    )
    parser.add_argument(
        "--baseline-sizes", nargs="+", help="the sizes the baseline runs (default: every size)"
    )
    parser.add_argument(
        "--baseline-json",
        type=Path,
        help="instead of --baseline: the JSON an earlier run of the baseline's benchmark wrote",
    )
    parser.add_argument("--out", type=Path, default=Path("report_scaling.json"), help="JSON written here")
    try:
        args = parser.parse_args(argv)
        args.sizes = args.sizes or list(GRIDS[args.grid])
        sizes = [parse_size(s, args.heads, args.n_ctx) for s in args.sizes]
    except argparse.ArgumentTypeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    sizes.sort(key=lambda s: (s["layers"] * s["d_model"] ** 2, s["n_ctx"]))
    baseline, scratch = None, Path(tempfile.mkdtemp(prefix="report_scaling_"))
    if args.baseline is not None:
        try:
            baseline = start_baseline(args, args.baseline_sizes or args.sizes, scratch / "before.json")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    rows, threads = [], torch.get_num_threads()
    if args.from_json is not None:
        rows, sizes = json.loads(args.from_json.read_text())["rows"], []
    torch.set_num_threads(args.threads)
    rate = matmul_rate(device=args.device)
    try:
        for size in sizes:
            rows.append(run_size(size, args))
            print(f"done {size}: report {rows[-1]['report']['seconds']:.1f} s", file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(threads)
    before_fits: list[dict[str, Any]] = []
    if baseline is not None and baseline.wait() != 0:
        print(f"error: the baseline in {args.baseline} failed (exit {baseline.returncode})", file=sys.stderr)
        return 2
    before = scratch / "before.json" if baseline is not None else args.baseline_json
    if before is not None:
        old = json.loads(before.read_text())
        attach_baseline(rows, old)
        before_fits = old["fits"]
    fits = []
    for over in ("layers", "d_model", "n_ctx"):
        fits += fit_growth(rows, args.startup, over=over) + fit_growth(rows, 0.0, "cpu_seconds", over=over)
    cells, headers = table(rows)
    print(format_table(cells, headers, floatfmt=".1f"))
    cells, headers = memory_table(rows)
    print(format_table(cells, headers, floatfmt=".0f"))
    print(report_floor(rows, args.d_vocab, rate))
    symbol = {"layers": "L", "d_model": "d", "n_ctx": "T"}
    for f in fits:
        held = ", ".join(f"{k} {f[k]}" for k in ("layers", "d_model", "heads", "n_ctx") if k != f["over"])
        print(f"{held}: report {f['measure']} ~ {f['a']:.3g} x {symbol[f['over']]}^{f['k']:.2f} "
              f"over {f['over']} {f[f['over']]}")  # fmt: skip
    record = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
        "matmul_rate": rate,
        "cpus": os.cpu_count(),
        "rows": rows,
        "fits": fits,
        "before_fits": before_fits,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
