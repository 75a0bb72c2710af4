"""The layout rules: the core imports no paper,
papers register themselves, and nothing grows past its size."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

SRC = ROOT / "src" / "mechmem"
CORE = [p for p in SRC.rglob("*.py") if "papers" not in p.relative_to(SRC).parts]
MAX_MODULE, MAX_SCRIPT, MAX_FUNCTION = 400, 80, 60
LONG_REASON = "Long because"
"""A function may run past MAX_FUNCTION lines when its docstring says why, starting with these words."""


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(SRC)))
def test_core_imports_no_paper(path):
    papers = sorted(n for n in imported_modules(path) if n.startswith("mechmem.papers"))
    if (
        path.name == "plugins.py"
    ):  # the loader imports the folder of built-in plugins to discover them, by path
        papers = [n for n in papers if n != "mechmem.papers"]
    assert papers == [], f"{path.relative_to(SRC)} imports paper code: {papers}"
    assert "importlib.import_module" not in path.read_text() or path.name == "plugins.py"


def test_papers_register_through_the_plugin_loader():
    # A fresh interpreter: importing the core registers nothing; asking for a task loads every paper.
    code = (
        "import mechmem.tasks as t, mechmem.plugins as p, sys\n"
        "assert not any(m.startswith('mechmem.papers.') for m in sys.modules)\n"
        "print(sorted(t.task_names()), p.paper_names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    tasks, papers = out.strip().split("] [")
    assert {"permutation", "birth", "facts"} <= set(eval(tasks + "]"))
    assert {"permutation", "birth", "memorisation"} <= set(eval("[" + papers))


def test_module_and_script_sizes():
    too_long = [
        f"{p.relative_to(ROOT)} ({n})"
        for p in SRC.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE
    ]
    too_long += [
        f"{p.relative_to(ROOT)} ({n})"
        for p in (ROOT / "analyses").glob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_SCRIPT
    ]
    assert too_long == []


def test_long_functions_say_why():
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION and LONG_REASON not in (ast.get_docstring(node) or ""):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({length} lines)")
    assert offenders == []
