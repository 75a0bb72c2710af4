"""The notebook-style examples run as plain scripts (with a few training steps)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))


def test_examples_exist_in_percent_format():
    assert EXAMPLES
    for path in EXAMPLES:
        assert path.read_text().startswith("# %%"), path.name


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
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
