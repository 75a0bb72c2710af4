"""Shared fixtures: determinism, one intra-op thread where a module asks for it, and the engine tests' input
tokens. Helpers that are not fixtures live in helper modules beside this file (helpers.py, engine_cases.py,
hf_models.py, script_cases.py); test modules import those, never each other."""

import contextlib
import importlib.util
import os
import pkgutil
import random

import jaxtyping
import pytest
import torch
from jaxtyping import install_import_hook

UNCHECKED = (
    "mechmem.models.native_hooks",
    "mechmem.models.layout",
    "mechmem.analysis.interventions.engine",
    "mechmem.analysis.interventions.hooked",
    "mechmem.analysis.interventions.replay",
    "mechmem.analysis.interventions.spec",
    "mechmem.analysis.circuits.edges",
    "mechmem.io",
)
"""Modules whose calls the test run does not type-check: the inner loops of patching and edge runs, the
weight layout's per-tensor renaming and the recursive JSON writer, each entered thousands of times per test
(checking them all took the default run from 241 s to 376 s; without these, 309 s). Their numbers are held to
TransformerLens's and to files on disk by their own tests. `MECHMEM_TYPECHECK=all` checks them too."""


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


@contextlib.contextmanager
def unchecked():
    """The run's jaxtyping/beartype checks off, as in a user's process: calls meet mechmem's own checks."""
    before = jaxtyping.config.jaxtyping_disable
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", before)


@pytest.fixture
def as_a_user_calls():
    """One test without the run's type checks (a wrong input meets mechmem's own check, not beartype's)."""
    with unchecked():
        yield


@pytest.fixture(scope="module")
def as_a_user_runs():
    """A whole module without the run's type checks: the bad-input and fault rounds, whose subject is what a
    user sees (one line, nothing lost), in a process like the user's."""
    with unchecked():
        yield


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
