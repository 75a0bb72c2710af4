"""The notebook-style examples run as plain scripts (with a few training steps)."""

import os
import subprocess
import sys

import pytest
from helpers import ROOT

EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
IN_A_KERNEL = "demo_walkthrough"
"""The example the default run executes as a notebook (the kernel path and inline figures); the others run
by default as scripts. Notebook and script hold the same cells (`test_notebooks_match_their_scripts`), so the
other half of each pair, 40-90 s apiece, is in `make test-slow`."""
SCRIPT_ONLY_IN_SLOW = {"train_and_report"}
"""Examples whose every call runs in the default suite elsewhere (the docstring examples of `train_preset`
and `report_checkpoint`), so their script is in `make test-slow` too."""


def _slow_unless(condition: bool) -> tuple:
    return () if condition else (pytest.mark.slow,)


def test_examples_exist_in_percent_format():
    assert EXAMPLES
    for path in EXAMPLES:
        assert path.read_text().startswith("# %%"), path.name


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=_slow_unless(p.stem not in {IN_A_KERNEL, *SCRIPT_ONLY_IN_SLOW}))
        for p in EXAMPLES
    ],
    ids=lambda p: p.stem,
)
def test_example_runs(path, tmp_path):
    env = {
        **os.environ,
        "MECHMEM_EXAMPLE_STEPS": "30",
        "MECHMEM_EXAMPLE_OUT": str(tmp_path),
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }
    done = subprocess.run(
        [sys.executable, str(path)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


NOTEBOOKS = [path.with_suffix(".ipynb") for path in EXAMPLES]


def test_notebooks_match_their_scripts():
    """Each example ships as a notebook whose cells are the script's (regenerate with `make notebooks`)."""
    jupytext = pytest.importorskip("jupytext")
    for script, notebook in zip(EXAMPLES, NOTEBOOKS):
        assert notebook.exists(), f"{notebook.name} missing: run `make notebooks`"
        want, got = jupytext.read(script), jupytext.read(notebook)
        cells = lambda nb: [(c.cell_type, c.source) for c in nb.cells]
        assert cells(got) == cells(want), f"{notebook.name} is out of date: run `make notebooks`"


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=_slow_unless(p.stem == IN_A_KERNEL)) for p in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def test_notebook_runs(path, tmp_path, monkeypatch):
    """Executed in a Jupyter kernel (no network) on small settings; figures come out inline."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    src = str(ROOT / "src")
    for key, value in {
        "MECHMEM_EXAMPLE_STEPS": "30",
        "MECHMEM_EXAMPLE_OUT": str(tmp_path),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    if path.stem == "demo_walkthrough":
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4
