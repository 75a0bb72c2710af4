"""Every script answers `--help` and every argument error the flags alone decide before torch
or TransformerLens is imported; `mechmem train --list` and an unknown task or preset too (from the committed
preset index), and a `--device cuda` this machine lacks right after torch, before TransformerLens.

Each case runs the script in a fresh interpreter, as a user does (`python analyses/X.py`, `python -m
mechmem_papers.NAME.scripts.X`), through a small wrapper that reports which heavy modules `sys.modules` holds
when the script exits. No timing is asserted (the machine's load decides that; `benchmarks/startup.py`
measures it): only that neither module was imported, which is what makes the answer immediate.
"""

import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT

HEAVY = ("torch", "transformer_lens")

WRAPPER = textwrap.dedent(
    """
    import runpy, sys
    target, argv = sys.argv[1], sys.argv[2:]
    sys.argv = [target, *argv]
    code = 0
    try:
        if target.endswith(".py"):
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    print("HEAVY:" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
    sys.exit(code)
    """
).format(heavy=HEAVY)

ANALYSES = sorted(p.stem for p in (ROOT / "analyses").glob("*.py"))
PAPER_SCRIPTS = sorted(
    ".".join(p.relative_to(ROOT / "papers").with_suffix("").parts)
    for p in (ROOT / "papers" / "mechmem_papers").glob("*/scripts/*.py")
    if p.name != "__init__.py"
)
MISSING = "/no/such/file.pt"

ERRORS = {
    "ablate_heads": [[MISSING], ["{ckpt}", "--n-samples", "-5"], ["{ckpt}", "--methods", "twice"]],
    "circuit": [[MISSING], ["{ckpt}", "--share", "nan"]],
    "demo": [["--jobs", "x"], ["--jobs", "0"]],
    "detect_heads": [[MISSING], ["{ckpt}", "--lengths", "4,x"]],
    "dynamics": [[MISSING], ["{run}", "--quantities", "nope"], ["{run}", "--level", "x"]],
    "logit_lens": [[MISSING], ["{ckpt}", "--top-k", "-3"]],
    "patch": [[MISSING], ["{ckpt}", "--memory-mb", "nan"], ["{ckpt}", "--sweeps", "nope"]],
    "probe_memory": [[MISSING], ["{ckpt}", "--seed", "1e3"]],
    "qk_attribution": [[MISSING], ["{ckpt}", "--head", "L1X"]],
    "report": [[MISSING], ["{ckpt}", "--n-samples", "0"]],
    "reproduce": [["--set", "novalue"]],
    "train": [
        ["permutation"],
        ["permutation", "--preset", "q", "--steps", "-1"],
        ["--task-module", MISSING],
        ["permutation", "--preset", "nope"],
        ["nope", "--preset", "quick"],
        ["permutation", "--preset", "task1-quick", "--device", "tpu"],
        ["permutation", "--preset", "task1-quick", "--resume", "--out", "{run}/none"],
    ],
    "mechmem_papers.birth.scripts.corpus_stats": [[MISSING]],
    "mechmem_papers.birth.scripts.eval_spread": [[]],
    "mechmem_papers.permutation.scripts.accumulated_grads": [[], ["--out", "x.json", "--steps", "0"]],
    "mechmem_papers.permutation.scripts.batch_check": [
        ["--preset", "task2-paper", "--out", "x.json"],
        ["--preset", "task2-paper", "--batch-size", "0", "--out", "x.json"],
    ],
    "mechmem_papers.permutation.scripts.model_check": [
        ["--preset", "task1-paper", "--out", "x.json"],
        ["--preset", "task1-paper", "--model", "plain", "--steps", "0", "--out", "x.json"],
    ],
    "mechmem_papers.permutation.scripts.split_prior": [[], ["--out", "x.json", "--splits", "0"]],
    "mechmem_papers.birth.scripts.scale": [["--threads", "0"], ["--rules", MISSING], ["--executor", "nope"]],
    "mechmem_papers.memorisation.scripts.int8_check": [["--ds", "2"], ["--modes", "nope"]],
    "mechmem_papers.memorisation.scripts.max_facts": [["--d", "0"], ["--mixing", "nope"]],
    "mechmem_papers.memorisation.scripts.reproduce_constructions": [["--ds", "2"], ["--modes", "nope"]],
    "mechmem_papers.memorisation.scripts.sweep_facts": [
        ["table", "--shard", "3/2"],
        ["scaling", "--ds", "64"],
    ],
}
"""Per script, argument errors its flags alone decide ({ckpt}: an existing file, {run}: an existing
folder)."""


NO_CUDA = "this machine has no CUDA device torch can use; use --device cpu"
"""The end of the one line `--device cuda` gives on a machine without CUDA."""


def run(target: str, argv: list[str], cwd) -> tuple[int, str, str, list[str]]:
    """(exit status, stdout, stderr without the wrapper's line, heavy modules imported); target "mechmem" is
    `python -m mechmem`."""
    path = target if target == "mechmem" or "." in target else str(ROOT / "analyses" / f"{target}.py")
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, path, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )
    lines = done.stderr.splitlines()
    assert lines and lines[-1].startswith("HEAVY:"), done.stderr
    heavy = [m for m in lines[-1][len("HEAVY:") :].split(",") if m]
    return done.returncode, done.stdout, "\n".join(lines[:-1]), heavy


def test_every_script_has_its_cases():
    assert sorted(ERRORS) == sorted([*ANALYSES, *PAPER_SCRIPTS])


@pytest.mark.subprocess
@pytest.mark.parametrize("target", [*ANALYSES, *PAPER_SCRIPTS])
def test_help_and_argument_errors_answer_before_torch(target, tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(b"not read: the flags are refused first")
    code, out, err, heavy = run(target, ["--help"], tmp_path)
    assert code == 0 and "usage:" in out and heavy == [], (code, err, heavy)
    for argv in ERRORS[target]:
        argv = [a.format(ckpt=ckpt, run=tmp_path) for a in argv]
        code, out, err, heavy = run(target, argv, tmp_path)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (argv, code, err)
        assert heavy == [], (argv, heavy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # nothing written, no folder made


@pytest.mark.subprocess
def test_the_examples_command_copies_them_out_before_torch(tmp_path):
    """`mechmem examples DIR` copies examples/ and analyses/ (a checkout's here, the wheel's bundle when
    installed) without importing torch, and refuses to overwrite in one line."""
    code, _, err, heavy = run("mechmem.__main__", ["examples", str(tmp_path / "copy")], tmp_path)
    assert code == 0 and heavy == [], (code, err, heavy)
    want = [*ROOT.glob("examples/*.py"), *ROOT.glob("examples/*.ipynb"), *ROOT.glob("analyses/*.py")]
    for source in want:
        assert (tmp_path / "copy" / source.relative_to(ROOT)).read_bytes() == source.read_bytes()
    assert len(list((tmp_path / "copy").rglob("*.*"))) == len(want)
    code, _, err, heavy = run("mechmem.__main__", ["examples", str(tmp_path / "copy")], tmp_path)
    assert code == 2 and err.strip().startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert heavy == []


def test_the_light_name_lists_are_the_ones_the_analyses_use():
    from mechmem.analysis import ablation, circuits, dynamics, patching
    from mechmem.analysis.patching import tables as patching_tables
    from mechmem.cli import args
    from mechmem.models import facts as facts_models
    from mechmem_papers.memorisation import options as facts_options
    from mechmem_papers.memorisation import sweep
    from mechmem_papers.memorisation.constructions import evaluators

    assert ablation.METHODS == args.ABLATION_METHODS
    assert circuits.ABLATIONS == args.CIRCUIT_ABLATIONS
    assert patching.DIRECTIONS == args.PATCH_DIRECTIONS
    assert tuple(patching.SWEEPS) == args.PATCH_SWEEPS
    assert patching_tables.METHODS == args.PATCH_METHODS
    assert tuple(dynamics.QUANTITIES) == args.DYNAMICS_QUANTITIES
    assert tuple(evaluators.EVALUATORS) == facts_options.EVALUATORS
    assert tuple(sweep.SCALING_VARIANTS) == facts_options.SCALING_VARIANTS
    assert (facts_models.MIXINGS, facts_models.ACTS) == (facts_options.MIXINGS, facts_options.ACTS)


@pytest.mark.subprocess
def test_the_preset_list_answers_before_torch(tmp_path):
    from mechmem.training.timings import registered_presets

    code, out, err, heavy = run("mechmem", ["train", "--list"], tmp_path)
    assert code == 0 and heavy == [], (code, err, heavy)
    rows = {tuple(line.split()[:3]) for line in out.splitlines()}
    want = {
        (t, p, str(s["steps"])) for t, presets in registered_presets().items() for p, s in presets.items()
    }
    assert want and want <= rows, want - rows


@pytest.mark.subprocess
def test_a_missing_cuda_device_is_said_before_transformer_lens(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    argv = [
        "train",
        "permutation",
        "--preset",
        "task1-quick",
        "--device",
        "cuda",
        "--out",
        str(tmp_path / "r"),
    ]
    code, _, err, heavy = run("mechmem", argv, tmp_path)
    assert code == 2 and err.splitlines() == [f"error: --device cuda: {NO_CUDA}"], err
    assert heavy == ["torch"] and not (tmp_path / "r").exists()
