"""The layout rules: dependencies point one way, the core imports no paper, papers register themselves and
share one skeleton, and nothing grows past its size.

`python tests/test_layout.py` prints the module diagram of docs/architecture.md (mermaid), drawn from the
imports.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

SRC = ROOT / "src" / "mechmem"
CORE = list(SRC.rglob("*.py"))
PAPER_SRC = ROOT / "papers" / "mechmem_papers"
PAPERS = sorted(p.name for p in PAPER_SRC.iterdir() if (p / "__init__.py").exists())
SCRIPT_DIRS = [ROOT / "analyses", ROOT / "benchmarks"]


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
    papers = sorted(n for n in imported_modules(path) if n.startswith("mechmem_papers"))
    assert papers == [], f"{path.relative_to(SRC)} imports paper code: {papers}"
    # The loader imports plugins by name; the package's __init__ imports each public name on first use.
    lazy = path.name == "plugins.py" or path == SRC / "__init__.py"
    assert "importlib.import_module" not in path.read_text() or lazy


@pytest.mark.subprocess
def test_papers_register_through_the_plugin_loader():
    # A fresh interpreter: importing the core registers nothing; asking for a task loads every paper.
    code = (
        "import mechmem.tasks as t, mechmem.plugins as p, sys\n"
        "assert not any(m.startswith('mechmem_papers.') for m in sys.modules)\n"
        "print(sorted(t.task_names()), p.paper_names())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    tasks, papers = out.strip().split("] [")
    assert {"permutation", "birth", "facts"} <= set(eval(tasks + "]"))
    assert {"permutation", "birth", "memorisation"} <= set(eval("[" + papers))


# -- the layers ----------------------------------------------------------------------------------------------
LAYERS = [
    ("base", ("errors", "config", "io", "progress", "plotting", "plugins", "tables", "threads", "version")),
    ("models and tasks", ("models", "tasks")),
    ("checkpoint", ("checkpoint", "pretrained")),
    ("training", ("training",)),
    ("analysis", ("analysis",)),
    ("report", ("report",)),
    ("cli", ("cli",)),
    ("papers", ("papers",)),
    ("api", ("mechmem", "__main__")),
    ("scripts", ("scripts",)),
]
"""Bottom to top: a module may import its own layer or a lower one, never a higher one
(docs/architecture.md)."""
LAYER_OF = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}
ALLOWED_UPWARD = {("mechmem.tasks.birth.probes", "mechmem.analysis.probes")}
"""The birth task logs the associative-memory probes of `mechmem.analysis.probes` while it trains (the
training curves of Bietti et al.); no other import points upwards."""


def module_files() -> dict[str, Path]:
    """Every module of the library and every script, by dotted name (scripts: "scripts.<folder>.<name>")."""
    modules = {}
    for package in (SRC, PAPER_SRC):
        for path in package.rglob("*.py"):
            parts = list(path.relative_to(package.parent).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for folder in SCRIPT_DIRS:
        for path in folder.glob("*.py"):
            modules[f"scripts.{folder.name}.{path.stem}"] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """module -> the mechmem modules it imports anywhere in its body (function-level imports count too).

    `from a.b import c` is an import of the module a.b.c when that is a module, else of a.b; the parent
    packages Python runs on the way are not edges.
    """
    modules = module_files()

    def resolve(name: str) -> str:
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                ]
            else:
                continue
            edges.update(resolve(t) for t in targets if t.split(".")[0] in ("mechmem", "mechmem_papers"))
        graph[name] = edges - {name}
    return graph


def unit_of(module: str) -> str:
    """The layer unit of a module: "scripts" for scripts (a paper's scripts/ and benchmarks/ too), "papers"
    for the rest of the papers, else the first name below mechmem ("mechmem" for the package itself)."""
    parts = module.split(".")
    if parts[0] == "scripts" or (
        parts[0] == "mechmem_papers" and parts[2:3] in (["scripts"], ["benchmarks"])
    ):
        return "scripts"
    if parts[0] == "mechmem_papers":
        return "papers"
    return parts[1] if len(parts) > 1 else "mechmem"


def paper_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "mechmem_papers" and parts[1:2] and parts[1] in PAPERS else None


def test_every_module_has_a_layer():
    assert sorted({unit_of(m) for m in import_graph()} - set(LAYER_OF)) == []


def test_imports_point_down_the_layers():
    upward = [
        f"{a} ({LAYERS[LAYER_OF[unit_of(a)]][0]}) imports {b} ({LAYERS[LAYER_OF[unit_of(b)]][0]})"
        for a, targets in import_graph().items()
        for b in targets
        if LAYER_OF[unit_of(b)] > LAYER_OF[unit_of(a)] and (a, b) not in ALLOWED_UPWARD
    ]
    assert upward == []


def test_papers_import_no_other_paper():
    crossing = [
        f"{a} imports {b}"
        for a, targets in import_graph().items()
        for b in targets
        if paper_of(a) and paper_of(b) and paper_of(a) != paper_of(b)
    ]
    assert crossing == []


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_find_cycles_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert find_cycles(graph) == [["a", "b", "c"]]


def test_no_import_cycle():
    assert find_cycles(import_graph()) == []


PRIVATE_CHECKED = [SRC, ROOT / "analyses", ROOT / "benchmarks", ROOT / "examples", ROOT / "tests", PAPER_SRC]
LOCAL_MODULES = {p.stem for folder in PRIVATE_CHECKED[1:-1] for p in folder.glob("*.py")}
"""Modules of the repository that are not in the package: scripts, benchmarks and test modules, imported by
their bare names."""


def is_project_module(name: str) -> bool:
    return name.split(".")[0] in ("mechmem", "mechmem_papers") or name in LOCAL_MODULES


def private_crossings(path: Path, root: Path = ROOT) -> list[str]:
    """Private names (one leading underscore) of the project's modules that `path` takes from another one:
    `from m import _x`, or `m._x` where `m` names a project module it imported (`import a.b as m`,
    `from a import m`). Standard-library and third-party names (`os._exit`) are theirs to document."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and is_project_module(node.module):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(
                        f"{path.relative_to(root)}:{node.lineno} from {node.module} import {alias.name}"
                    )
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name.split(".")[0] for a in node.names if is_project_module(a.name))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_private_names_stay_in_their_module():
    """A name with a leading underscore is its module's own: no module, script, example or test takes one
    from another (the library's and the tests' alike). A helper two modules need is public, with a docstring.
    """
    paths = [p for root in PRIVATE_CHECKED for p in root.rglob("*.py")]
    assert [c for p in paths for c in private_crossings(p)] == []


def test_test_modules_import_no_test_module():
    """Tests share fixtures through conftest.py and builders through helper modules (helpers.py,
    engine_cases.py, hf_models.py, script_cases.py), never by importing another test module."""
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[-1].startswith("test_")]
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] == "tests"]
    assert found == []


def test_private_crossings_are_found(tmp_path):
    path = tmp_path / "x.py"
    lines = [
        "import os",
        "from mechmem.checkpoint import _hidden",
        "import mechmem.io as mio",
        "mio._write()",
    ]
    path.write_text("\n".join([*lines, "os._exit(0)", ""]))
    found = private_crossings(path, tmp_path)
    assert len(found) == 2 and "import _hidden" in found[0] and "mio._write" in found[1], found


def test_every_paper_has_the_skeleton():
    parts = [
        "__init__.py",
        "plugin.py",
        "spec.py",
        "run.py",
        "page.py",
        "figures.py",
        "published.json",
        "scripts",
        "benchmarks",
    ]
    missing = [
        f"{paper}/{part}" for paper in PAPERS for part in parts if not (PAPER_SRC / paper / part).exists()
    ]
    assert missing == []


@pytest.mark.subprocess
def test_paper_scripts_run_as_modules_from_any_directory(tmp_path):
    # `python -m mechmem_papers.NAME.scripts.X --help` from a folder that is not the repository
    for script in [p for p in sorted(PAPER_SRC.glob("*/scripts/*.py")) if p.name != "__init__.py"][:1]:
        module = ".".join(script.relative_to(PAPER_SRC.parent).with_suffix("").parts)
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0 and "usage" in out.stdout, out.stderr


def mermaid() -> str:
    """The module diagram: one box per layer holding its units (a package or a top-level module), one arrow
    per pair of units with an import between them; imports of the base layer, which every layer may use, are
    left out.
    """
    edges = {
        (unit_of(a), unit_of(b))
        for a, targets in import_graph().items()
        for b in targets
        if unit_of(a) != unit_of(b) and LAYER_OF[unit_of(b)] > 0 and (a, b) not in ALLOWED_UPWARD
    }
    lines = ["flowchart TD"]
    for rank, (name, units) in reversed(list(enumerate(LAYERS))):
        lines.append(f'    subgraph layer{rank}["{name}"]')
        lines.extend(f"        {unit}" for unit in units)
        lines.append("    end")
    lines.extend(f"    {a} --> {b}" for a, b in sorted(edges, key=lambda e: (-LAYER_OF[e[0]], e)))
    return "\n".join(lines) + "\n"


def test_architecture_doc_shows_the_current_diagram():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert "```mermaid\n" + mermaid() + "```" in doc, "regenerate it: python tests/test_layout.py"


if __name__ == "__main__":
    print(mermaid(), end="")
