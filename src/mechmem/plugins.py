"""Papers as plugins: each reproduced work is one installed package that registers its page and experiments.

A paper plugin is a module named by an entry point of the group "mechmem.papers"; importing it may call
`register_task` and `register_architecture` for what the core lacks, and calls `register_paper` once with a
`Paper`:

    spec = paper.spec(variant, options)  # "quick" (CPU minutes), "paper" (published scale); options: str->str
    results = paper.run(spec, log)       # trains what is missing, measures; the run record (a JSON-able dict)
    shown = paper.references(results, data) if paper.references else results   # other committed records
    page = paper.page(shown)             # a `mechmem.report.document.Report`, written by `write_page`

The core never imports a paper: `load_papers` imports every entry point once, on first need. A plugin that
fails to import is reported in one line on stderr, remembered in `failed_plugins()`, and skipped.
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
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
    references: Callable[[dict[str, Any], Path], dict[str, Any]] | None = None
    """(run record, data folder) -> the record with the other committed files its page shows beside it;
    None: the page shows its record alone."""


PAPERS: dict[str, Paper] = {}
_FAILED: dict[str, str] = {}
_STATE = "unloaded"
"""unloaded -> loading (a nested call returns at once) -> loaded."""


def register_paper(paper: Paper) -> Paper:
    """Make `paper` available by name (called by the plugin package when it is imported)."""
    PAPERS[paper.name] = paper
    return paper


def load_plugin(name: str, load: Callable[[], object], *, kind: str = "paper plugin") -> None:
    """Run one plugin's import; a failure is reported in one stderr line and remembered, never raised."""
    try:
        load()
    except Exception as exc:  # noqa: BLE001  (any error inside a plugin: report it, skip it, load the others)
        detail = " ".join(str(exc).split()) or "no message"
        _FAILED[name] = f"{type(exc).__name__}: {detail}"
        print(f"warning: {kind} {name!r} failed to load, skipped ({_FAILED[name]})", file=sys.stderr)


def load_papers() -> None:
    """Import every installed "mechmem.papers" entry point (once).

    A call made while the plugins are being imported returns at once.
    """
    global _STATE
    if _STATE != "unloaded":
        return
    _STATE = "loading"
    try:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            load_plugin(ep.name, ep.load)
    finally:
        _STATE = "loaded"


def failed_plugins() -> dict[str, str]:
    """Plugins that failed to import: name -> "ErrorType: message"."""
    load_papers()
    return dict(_FAILED)


def paper_names() -> list[str]:
    """Names of every registered paper."""
    load_papers()
    return sorted(PAPERS)


def get_paper(name: str) -> Paper:
    """The paper registered as `name`."""
    load_papers()
    if name not in PAPERS:
        known = (
            ", ".join(sorted(PAPERS)) or "none: the reproductions install from a clone, pip install -e papers"
        )
        raise MechmemError(f"unknown paper {name!r} (known: {known})")
    return PAPERS[name]
