"""Shared fixtures: determinism, the repository root and the engine tests' input tokens (helpers such as
`load_script` live in helpers.py)."""

import os
import random

import pytest
import torch

# Two pytest-xdist workers share two cores: one intra-op thread each avoids oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def reproducible():
    """Every test starts from the same global RNG state (library code itself never seeds globally)."""
    random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def tokens():
    """Six random sequences of nine tokens from a vocabulary of six (the engine tests' inputs); a test module
    may define its own."""
    return torch.randint(6, (6, 9), generator=torch.Generator().manual_seed(0))
