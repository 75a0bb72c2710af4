"""Shared fixtures: determinism, one intra-op thread where a module asks for it, and the engine tests' input
tokens. Helpers that are not fixtures live in helper modules beside this file (helpers.py, engine_cases.py,
hf_models.py, script_cases.py); test modules import those, never each other."""

import importlib.util
import os
import pkgutil
import random

import pytest
import torch
from jaxtyping import install_import_hook

UNCHECKED = (
    "mechmem.models.native_hooks",
    "mechmem.analysis.interventions.engine",
    "mechmem.analysis.interventions.hooked",
    "mechmem.analysis.interventions.replay",
)
"""Modules whose calls the test run does not type-check: the inner loops a patching run enters thousands of
times (checking each call doubled the patching tests' time; their numbers are held to TransformerLens's by the
equivalence tests). `MECHMEM_TYPECHECK=all` checks them too."""


def checked_modules() -> list[str]:
    """Every mechmem module the run type-checks (jaxtyping shapes through beartype): all but `UNCHECKED`."""
    if os.environ.get("MECHMEM_TYPECHECK") == "all":
        return ["mechmem"]
    names = []

    def walk(package: str, paths: list[str]) -> None:
        for info in pkgutil.iter_modules(paths):
            name = f"{package}.{info.name}"
            if name in UNCHECKED:
                continue
            if info.ispkg and any(u.startswith(name + ".") for u in UNCHECKED):
                walk(name, [os.path.join(path, info.name) for path in paths])
            else:
                names.append(name)

    walk("mechmem", list(importlib.util.find_spec("mechmem").submodule_search_locations))
    return names


install_import_hook(checked_modules(), "beartype.beartype")

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


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run far faster on one intra-op thread when the cores are shared; a module asks for it with
    `pytestmark = pytest.mark.usefixtures("one_thread")`, and the thread count is restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
