"""mechmem as users install it: a wheel in a fresh virtual environment outside the repository, used from an
empty folder (`make test-wheel`, which `.ci/run` runs; marked `wheel`, outside the default run).

The wheel is built from this checkout and installed without `-e`, so nothing of the repository is on
`sys.path`; from an empty folder the test runs `mechmem --help`, a short training run, `mechmem analyse`, the
README's notebook snippet and every example, and checks that every output lands under that folder (or
`--out`) and nothing is written inside the environment.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.wheel

LOCAL_TORCH = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-*.whl"))
"""The CPU build of torch some machines keep on disk (the Makefile pins it the same way)."""


def sh(argv: list, *, cwd: Path, env: dict | None = None, timeout: int = 900) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel of this checkout (and its dependencies); returns its bin folder."""
    base = tmp_path_factory.mktemp("wheel")
    dist = base / "dist"
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is installed with the test extras"
    sh([uv, "build", "--wheel", "--out-dir", dist, ROOT], cwd=base)
    wheel = next(dist.glob("mechmem-*.whl"))
    venv = base / "venv"
    sh([sys.executable, "-m", "venv", venv], cwd=base)
    pins = ["--find-links", LOCAL_TORCH[0].parent, "torch==2.13.0"] if LOCAL_TORCH else []
    sh([uv, "pip", "install", "-q", "--python", venv / "bin" / "python", *pins, wheel], cwd=base)
    return venv / "bin"


def user_env(bin_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env | {
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
    }


def test_the_wheel_holds_the_tasks_and_no_paper_code(installed):
    import zipfile

    wheel = next((installed.parent.parent / "dist").glob("mechmem-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if "papers" in n] == []
    assert {"mechmem/tasks/permutation.py", "mechmem/tasks/facts.py", "mechmem/tasks/birth/task.py"} <= set(
        names
    )
    assert "mechmem/tasks/birth/tinyshakespeare_stats.json" in names


def site_files(bin_dir: Path) -> set[Path]:
    return {p for p in (bin_dir.parent / "lib").rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.subprocess
def test_installed_from_a_wheel_and_used_from_an_empty_folder(installed, tmp_path):
    env, work = user_env(installed), tmp_path / "work"
    work.mkdir()
    before = site_files(installed)
    where = sh([installed / "python", "-c", "import mechmem; print(mechmem.__file__)"], cwd=work, env=env)
    assert str(installed.parent) in where and str(ROOT) not in where, where
    assert "analyse" in sh([installed / "mechmem", "--help"], cwd=work, env=env)
    sh(
        [
            installed / "mechmem",
            "train",
            "permutation",
            "--preset",
            "task2-quick",
            "--steps",
            "20",
            "--out",
            "t2",
            "--no-progress",
        ],
        cwd=work,
        env=env,
    )
    assert (work / "t2" / "ckpt.pt").is_file() and (work / "t2" / "train.log").is_file()
    sh([installed / "mechmem", "analyse", "t2/ckpt.pt", "--n-samples", "32"], cwd=work, env=env)
    assert (work / "t2" / "analysis" / "analyse.json").is_file()
    assert (work / "t2" / "analysis" / "report" / "report.html").is_file()
    sh([installed / "mechmem", "examples", "copied"], cwd=work, env=env)
    shipped = sorted(p.relative_to(work / "copied") for p in (work / "copied").rglob("*") if p.is_file())
    assert shipped == sorted(
        p.relative_to(ROOT)
        for pattern in ("examples/*.py", "examples/*.ipynb", "analyses/*.py")
        for p in ROOT.glob(pattern)
    )
    snippet = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.DOTALL).group(1)
    sh([installed / "python", "-c", snippet], cwd=work, env=env)
    assert site_files(installed) == before, "nothing may be written inside the environment"


@pytest.mark.subprocess
@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.stem)
def test_examples_run_from_the_wheel(installed, example, tmp_path):
    env = user_env(installed) | {"MECHMEM_EXAMPLE_STEPS": "30"}
    env.pop("MECHMEM_EXAMPLE_OUT", None)
    before = site_files(installed)
    sh([installed / "python", example], cwd=tmp_path, env=env)
    assert (tmp_path / "runs" / "examples").is_dir(), "outputs go under the working folder"
    assert site_files(installed) == before
