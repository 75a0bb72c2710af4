"""Papers as plugins: each reproduced work is one folder that registers its tasks, architectures and page.

A paper plugin is a package that, when imported, calls `register_task` for its tasks, `register_architecture` for
any model family TransformerLens cannot express, and `register_paper` once with a `Paper`:

    spec = paper.spec(variant, options) # "quick" (CPU minutes), "full", "paper" (published scale); options: str->str
    results = paper.run(spec, log)      # trains what is missing, measures; a JSON-able dict (the run record)
    page = paper.page(results)          # a `mechmem.report.document.Report`, written by `write_page`

The core (models, tasks, training, analysis, report) never imports a paper by name: `load_papers` imports every
sub-package of `mechmem.papers` (the built-in plugins; a fifth paper is a new folder there) and every entry point
of the group "mechmem.papers" (plugins installed from other distributions), once, on first need.
"""

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from mechmem.errors import MechmemError

ENTRY_POINT_GROUP = "mechmem.papers"


@dataclass(frozen=True)
class Paper:
    """One reproduced work: how to run its reproduction and how to turn the record into its page."""

    name: str
    """Short name used on the command line and for file names (docs/reproductions/<name>.md)."""
    title: str
    """The work's citation, as shown on the page."""
    spec: Callable[[str, dict[str, str]], Any]
    """(variant name, options such as {"runs": "runs/x", "seeds": "0,1"}) -> the reproduction's spec (a frozen
    dataclass); raises `MechmemError` for an unknown variant or option."""
    variants: tuple[str, ...]
    """Variant names `spec` accepts, the first being the default."""
    run: Callable[[Any, Callable[[str], None]], dict[str, Any]]
    """(spec, log) -> the run record: every number the page shows, JSON-able."""
    page: Callable[[dict[str, Any]], Any]
    """run record -> a `Report`; prose that is not computed lives in docs/reproductions/prose/<name>.md."""
    tasks: tuple[str, ...] = field(default_factory=tuple)
    """Names of the tasks the plugin registers."""


_PAPERS: dict[str, Paper] = {}
_LOADED = False


def register_paper(paper: Paper) -> Paper:
    """Make `paper` available by name (called by the plugin package when it is imported)."""
    _PAPERS[paper.name] = paper
    return paper


def load_papers() -> None:
    """Import every built-in paper package and every installed "mechmem.papers" entry point (once)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import mechmem.papers as builtin

    for info in sorted(pkgutil.iter_modules(builtin.__path__), key=lambda m: m.name):
        if info.ispkg:
            importlib.import_module(f"{builtin.__name__}.{info.name}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def paper_names() -> list[str]:
    """Names of every registered paper."""
    load_papers()
    return sorted(_PAPERS)


def get_paper(name: str) -> Paper:
    """The paper registered as `name`."""
    load_papers()
    if name not in _PAPERS:
        raise MechmemError(f"unknown paper {name!r} (known: {', '.join(sorted(_PAPERS)) or 'none'})")
    return _PAPERS[name]
