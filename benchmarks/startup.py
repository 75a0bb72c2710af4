"""Start-up cost: each backend's import, each script's `--help` and time to first output, with and without a
bytecode cache. The table in docs/analyses.md ("Start-up") comes from this script.

    python benchmarks/startup.py                                   # everything, once (about 15 minutes busy)
    python benchmarks/startup.py --scripts ablate_heads train --repeats 3
    python benchmarks/startup.py --other .venv-tl3/bin/python       # also the other major version's import
    python benchmarks/startup.py --doors --repeats 3               # each `mechmem` command's doors (a minute)

Every number is the wall-clock time of a fresh interpreter, from its start to the event: the import's end, the
`--help` text's end, or the first byte the script writes (stdout or stderr) or its exit, whichever is first,
after which the script is stopped.
"cache" runs use the bytecode the environment holds (the bootstrap compiles it: `uv pip install
--compile-bytecode`); "no cache" runs point PYTHONPYCACHEPREFIX at an empty folder with
PYTHONDONTWRITEBYTECODE=1, so every module is compiled again at each start, as in an environment installed
without bytecode that may not write it. The scripts run on a tiny planted induction model (a checkpoint
written once into a scratch folder). The machine's load averages are printed before and after: on a shared
machine they decide most of the spread; use --repeats and read the median.

`--doors` times, per `mechmem` command, the answers its flags alone decide, side by side: `--help`, an
argument error (each command's own; the exit status must be 2 and is checked) and `--list` where the command
has one, all with the bytecode cache; `train --device cuda` on a machine without CUDA is timed too (it
answers after torch's import, before TransformerLens's).
"""

import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANALYSES = ROOT / "analyses"
PAPER_SCRIPTS = {
    "birth.corpus_stats": ["{tmp}/corpus.txt", "--out", "{tmp}/stats.json"],
    "birth.eval_spread": None,
    "birth.scale": ["--no-run"],
    "memorisation.max_facts": ["--max-epochs", "10", "--patience", "5"],
    "memorisation.reproduce_constructions": None,
    "memorisation.sweep_facts": ["report", "--max-epochs", "150", "--patience", "50"],
}
"""Paper scripts (`python -m mechmem_papers.NAME.scripts.X`) and the arguments of their first-output run
(None: the script prints only when its minutes of work are done, so only its --help is timed)."""
FIRST_OUTPUT = {
    "ablate_heads": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "16", "--methods", "zero"],
    "circuit": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "8"],
    "demo": ["--steps", "1", "--out", "{tmp}/demo", "--reports", "{tmp}/reports", "--models", "facts"],
    "detect_heads": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "16"],
    "dynamics": ["{tmp}/no-steps"],
    "logit_lens": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "16"],
    "patch": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "16"],
    "probe_memory": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "16"],
    "report": ["{ckpt}", "--out", "{tmp}/o", "--n-samples", "32"],
    "reproduce": ["--list"],
    "train": ["permutation", "--preset", "task1-quick", "--steps", "1", "--out", "{tmp}/t", "--overwrite"],
}
"""Arguments of each analysis script's first-output run ({ckpt}: the planted model, {tmp}: a scratch folder;
dynamics: a folder without step checkpoints, whose one-line error is its first output after loading)."""


MISSING = "/no/such/ckpt.pt"
DOORS = {
    "train": (["permutation", "--preset", "nope"], ["--list"]),
    "analyse": ([MISSING], None),
    "heads": ([MISSING], None),
    "ablate": (["{ckpt}", "--methods", "twice"], None),
    "patch": (["{ckpt}", "--sweeps", "nope"], None),
    "lens": (["{ckpt}", "--top-k", "-3"], None),
    "probe": ([MISSING], None),
    "circuit": (["{ckpt}", "--share", "nan"], None),
    "qk": (["{ckpt}", "--head", "L1X"], None),
    "report": (["{ckpt}", "--n-samples", "0"], None),
    "dynamics": (["{tmp}", "--level", "x"], None),
    "reproduce": (["--set", "novalue"], ["--list"]),
    "demo": (["--jobs", "0"], None),
}
"""Per `mechmem` command: (an argument error its flags alone decide, its --list arguments or None)."""


def doors(python: str, tmp: str, ckpt: Path, repeats: int, limit_s: float) -> None:
    """Print, per `mechmem` command, the medians of --help, an argument error and --list, side by side."""
    environ = env(True, tmp)
    cells = {"--help": 12, "argument error": 16, "--list": 10}
    print(
        f"{'mechmem COMMAND (seconds, median of ' + str(repeats) + ')':40s}",
        *(f"{c:>{w}s}" for c, w in cells.items()),
    )

    def timed(argv: list[str], status: int) -> str:
        cmd = [python, "-m", "mechmem", *[a.format(ckpt=ckpt, tmp=tmp) for a in argv]]
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            done = subprocess.run(
                cmd, capture_output=True, env=environ, cwd=tmp, timeout=limit_s, check=False
            )
            samples.append(time.perf_counter() - t0)
            if done.returncode != status:
                return f"status {done.returncode}"
        return median(samples)

    for name, (error, listing) in DOORS.items():
        row = [
            timed([name, "--help"], 0),
            timed([name, *error], 2),
            timed([name, *listing], 0) if listing else "-",
        ]
        print(f"{name:40s}", *(f"{v:>{w}s}" for v, w in zip(row, cells.values(), strict=True)), flush=True)
    no_cuda = subprocess.run(
        [python, "-c", "import torch; raise SystemExit(torch.cuda.is_available())"], env=environ, check=False
    )
    if no_cuda.returncode == 0:
        argv = ["train", "permutation", "--preset", "task1-quick", "--device", "cuda", "--out", f"{tmp}/cuda"]
        print(f"{'train --device cuda (no CUDA here)':40s}", f"{'':>12s}", f"{timed(argv, 2):>16s}")


def env(cache: bool, empty: str) -> dict[str, str]:
    e = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if cache:
        e.pop("PYTHONPYCACHEPREFIX", None)
    else:
        e["PYTHONPYCACHEPREFIX"] = empty
    return e


def wall(cmd: list[str], environ: dict[str, str], *, first_output: bool, limit_s: float) -> float | None:
    """Seconds from start to exit, or (`first_output`) to the first byte written or the exit, whichever comes
    first (the script is then stopped); None past `limit_s`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environ, cwd=ROOT
    )
    try:
        if first_output:
            ready, _, _ = select.select([proc.stdout], [], [], limit_s)
            return time.perf_counter() - t0 if ready else None
        proc.communicate(timeout=limit_s)
        return time.perf_counter() - t0
    except subprocess.TimeoutExpired:
        return None
    finally:
        proc.kill()
        proc.wait()


def script_cmd(python: str, name: str) -> list[str]:
    if name in PAPER_SCRIPTS:
        paper, script = name.split(".")
        return [python, "-m", f"mechmem_papers.{paper}.scripts.{script}"]
    return [python, str(ANALYSES / f"{name}.py")]


def median(samples: list[float | None]) -> str:
    done = [s for s in samples if s is not None]
    return f"{statistics.median(done):.2f}" if len(done) == len(samples) else "timeout"


def planted_checkpoint(folder: Path, python: str) -> Path:
    path = folder / "planted.pt"
    code = (
        "import sys\nfrom mechmem.analysis.planted import planted_induction_model\n"
        "from mechmem.checkpoint import save_model\n"
        "save_model(planted_induction_model(), sys.argv[1])\n"
    )
    subprocess.run([python, "-c", code, str(path)], check=True, cwd=ROOT)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [*sorted(FIRST_OUTPUT), *sorted(PAPER_SCRIPTS)]
    parser.add_argument("--scripts", nargs="*", default=names, choices=names, help="scripts to time")
    parser.add_argument("--repeats", type=int, default=1, help="runs per number (the median is shown)")
    parser.add_argument("--limit-s", type=float, default=240.0, help="give up on one run after this")
    parser.add_argument(
        "--other",
        default=None,
        help="python of an environment with the other TransformerLens major version (.venv-tl3)",
    )
    parser.add_argument("--no-first-output", action="store_true", help="time only imports and --help")
    parser.add_argument("--no-imports", action="store_true", help="leave out the backends' imports")
    parser.add_argument(
        "--doors", action="store_true", help="only the mechmem commands' --help, errors, --list"
    )
    args = parser.parse_args(argv)
    python = sys.executable
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)", flush=True)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as empty:
        ckpt = planted_checkpoint(Path(tmp), python)
        (Path(tmp) / "no-steps").mkdir()
        (Path(tmp) / "corpus.txt").write_text("to be or not to be, that is the question\n" * 50)
        if args.doors:
            doors(python, tmp, ckpt, args.repeats, args.limit_s)
            print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            return 0
        rows = []

        def measure(label: str, cmd: list[str], first_output: bool = False) -> None:
            cells = []
            for cache in (True, False):
                samples = [
                    wall(cmd, env(cache, empty), first_output=first_output, limit_s=args.limit_s)
                    for _ in range(args.repeats)
                ]
                cells.append(median(samples))
            rows.append((label, *cells))
            print(f"{label:58s} {cells[0]:>8s} {cells[1]:>9s}", flush=True)

        print(f"{'what (seconds, median of ' + str(args.repeats) + ')':58s} {'cache':>8s} {'no cache':>9s}")
        for module in () if args.no_imports else ("torch", "transformer_lens"):
            measure(f"import {module} (default venv)", [python, "-c", f"import {module}"])
        if args.other and not args.no_imports:
            measure("import transformer_lens (other venv)", [args.other, "-c", "import transformer_lens"])
        for name in args.scripts:
            measure(f"{name} --help", [*script_cmd(python, name), "--help"])
        if not args.no_first_output:
            for name in args.scripts:
                extra = FIRST_OUTPUT[name] if name in FIRST_OUTPUT else PAPER_SCRIPTS[name]
                if extra is None:
                    continue
                extra = [a.format(ckpt=ckpt, tmp=tmp) for a in extra]
                measure(
                    f"{name}: first output (or exit)", [*script_cmd(python, name), *extra], first_output=True
                )
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
