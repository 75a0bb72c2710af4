"""The public API: `import mechmem` is light, every public name resolves and has a docstring example that
runs as a doctest, and the examples and README snippets use nothing else."""

import ast
import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT

import mechmem

EXAMPLE_SOURCES = sorted((ROOT / "examples").glob("*.py"))
ALLOWED_IMPORTS = {"os", "pathlib", "torch", "mechmem", "tempfile", "circuitsvis"}
"""What the examples and the README's Python snippets may import: the standard library bits they use, torch,
`mechmem` itself (only its public names), and CircuitsVis (the notebook extra; its example runs without
it)."""


@pytest.mark.subprocess
def test_import_mechmem_is_light():
    code = "import sys, mechmem; print(sorted(m for m in ('torch', 'transformer_lens') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_public_name_resolves_with_an_example():
    missing = []
    for name in mechmem.__all__:
        obj = getattr(mechmem, name)
        if name.startswith("__") or isinstance(obj, type) and issubclass(obj, Exception):
            continue
        if ">>>" not in (obj.__doc__ or ""):
            missing.append(name)
    assert missing == []
    assert set(mechmem.__all__) <= set(dir(mechmem))
    assert len(mechmem.__all__) <= 40, "the public surface should stay small"


def test_unknown_names_are_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        mechmem.nope  # noqa: B018


WHOLE_REPORTS = ("build_report", "report_checkpoint")
"""The public names whose examples build a whole report (3-4 s each); `make test-slow` runs them, the default
run the other examples (the report itself is built in test_report.py and test_commands.py)."""

DOCTEST_RUNNER = r"""
import doctest, sys, mechmem
heavy = sys.argv[1].split(",")
names = [n for n in mechmem.__all__ if not n.startswith("__") and (n in heavy) == (sys.argv[2] == "heavy")]
failed, ran = [], 0
for obj in [mechmem] * (sys.argv[2] != "heavy") + [getattr(mechmem, n) for n in names]:
    for test in doctest.DocTestFinder(recurse=False).find(obj, getattr(obj, "__name__", "mechmem")):
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        ran += len(test.examples)
        if runner.failures:
            failed.append(test.name)
print("RAN", ran, "FAILED", ",".join(failed))
sys.exit(1 if failed else 0)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("part", ["light", pytest.param("heavy", marks=pytest.mark.slow)])
def test_docstring_examples_run(part, tmp_path):
    """Every public docstring's example, in a fresh interpreter (their registrations stay there) and an empty
    folder (examples write only where they say)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", DOCTEST_RUNNER, ",".join(WHOLE_REPORTS), part],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    names = len(WHOLE_REPORTS) if part == "heavy" else len(mechmem.__all__) - len(WHOLE_REPORTS)
    assert int(re.search(r"RAN (\d+)", done.stdout).group(1)) >= 3 * names
    assert list(tmp_path.iterdir()) == []


def non_public_imports(source: str) -> list[str]:
    """Imports in `source` beyond ALLOWED_IMPORTS and beyond `mechmem`'s public names, and any
    `mechmem.X` attribute that is not public."""
    bad = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name not in ALLOWED_IMPORTS]
        elif isinstance(node, ast.ImportFrom):
            if node.module == "mechmem":
                bad += [f"mechmem.{a.name}" for a in node.names if a.name not in mechmem.__all__]
            elif node.module not in ALLOWED_IMPORTS:
                bad.append(node.module or ".")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "mechmem"
        ) and node.attr not in mechmem.__all__:
            bad.append(f"mechmem.{node.attr}")
    return bad


def readme_snippets() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


@pytest.mark.parametrize("path", EXAMPLE_SOURCES, ids=lambda p: p.stem)
def test_examples_use_only_public_names(path):
    assert non_public_imports(path.read_text()) == []


def test_readme_snippets_use_only_public_names():
    snippets = readme_snippets()
    assert snippets, "the README has a notebook snippet"
    assert [bad for s in snippets for bad in non_public_imports(s)] == []


def test_the_public_name_check_catches_internals():
    source = "import mechmem\nfrom mechmem.analysis import heads\nfrom mechmem import cli\nmechmem.cli.run\n"
    assert non_public_imports(source) == ["mechmem.analysis", "mechmem.cli", "mechmem.cli"]


def test_old_name_of_save_model_is_kept():
    from mechmem.checkpoint import save_hooked_transformer

    assert save_hooked_transformer is mechmem.save_model


@pytest.mark.subprocess
def test_plotting_forces_no_backend():
    code = (
        "import matplotlib; matplotlib.use('svg'); import mechmem.analysis.heads, mechmem.plotting; "
        "print(matplotlib.get_backend())"
    )
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "svg"


def test_plot_refuses_what_it_cannot_draw():
    with pytest.raises(TypeError, match="no figure for a dict"):
        mechmem.plot({})
