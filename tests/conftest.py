"""Shared fixtures: determinism, and small config builders with overridable defaults; `load_script`."""

import importlib.util
import os
import random
from pathlib import Path

import pytest
import torch

# Two pytest-xdist workers share two cores: one intra-op thread each avoids oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


ROOT = Path(__file__).resolve().parents[1]


def load_script(name: str):
    """The module of analyses/<name>.py (scripts are not a package), to call its `main` in-process."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "analyses" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def reproducible():
    """Every test starts from the same global RNG state (library code itself never seeds globally)."""
    random.seed(0)
    torch.manual_seed(0)
    yield
