"""The plugin loader: a broken plugin is one line on stderr and is skipped; the others load, and every later
call sees the same papers."""

import sys
from importlib.metadata import EntryPoint, entry_points

import pytest
from helpers import load_script

from mechmem import plugins
from mechmem.cli import run_script

BROKEN = "import mechmem_no_such_module_for_the_test  # the plugin's own dependency is missing\n"
TOY = """
from mechmem.plugins import Paper, register_paper

register_paper(
    Paper(
        name="toy",
        title="A toy paper",
        spec=lambda variant, options: (variant, options),
        variants=("quick",),
        run=lambda spec, log: {},
        page=lambda record: None,
    )
)
"""
RAISING = "raise RuntimeError('the plugin failed\\nwhile importing')  # a two-line message\n"


@pytest.fixture
def fresh_loader(monkeypatch, tmp_path):
    """The loader as in a new process, with plugin modules written under tmp_path: `install(name, source)`
    adds an entry point after the installed ones (in call order)."""
    plugins.load_papers()  # the installed papers are imported once; re-importing them later is a no-op
    monkeypatch.setattr(plugins, "_STATE", "unloaded")
    monkeypatch.setattr(plugins, "PAPERS", dict(plugins.PAPERS))
    monkeypatch.setattr(plugins, "_FAILED", {})
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    points = list(entry_points(group=plugins.ENTRY_POINT_GROUP))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [p for p in points if p.group == group])
    installed = []

    def install(name: str, source: str) -> None:
        (tmp_path / "site").mkdir(exist_ok=True)
        (tmp_path / "site" / f"{name}.py").write_text(source)
        points.append(EntryPoint(name=name, value=name, group=plugins.ENTRY_POINT_GROUP))
        installed.append(name)

    yield install
    for name in installed:
        sys.modules.pop(name, None)


def stderr_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_a_broken_entry_point_is_one_line_and_the_others_load(fresh_loader, capsys):
    fresh_loader("mechmem_test_broken", BROKEN)
    fresh_loader("mechmem_test_toy", TOY)  # after the broken one
    first = plugins.paper_names()
    err = stderr_lines(capsys)
    assert first == plugins.paper_names() == sorted({"birth", "memorisation", "permutation", "toy"})
    assert len(err) == 1 and err[0].startswith("warning: paper plugin 'mechmem_test_broken' failed to load")
    assert "ModuleNotFoundError" in err[0] and "mechmem_no_such_module_for_the_test" in err[0]
    assert stderr_lines(capsys) == []  # reported once, not on every call
    assert list(plugins.failed_plugins()) == ["mechmem_test_broken"]


def test_a_raising_plugin_is_one_line_and_the_others_load(fresh_loader, capsys):
    fresh_loader("mechmem_test_raising", RAISING)
    fresh_loader("mechmem_test_toy", TOY)
    assert plugins.paper_names() == plugins.paper_names() == ["birth", "memorisation", "permutation", "toy"]
    (line,) = stderr_lines(capsys)
    assert line == (
        "warning: paper plugin 'mechmem_test_raising' failed to load, skipped "
        "(RuntimeError: the plugin failed while importing)"
    )


def test_loading_is_done_only_after_every_import(fresh_loader):
    # a plugin asking for the papers while it is imported sees a partial set; after loading, everyone sees all
    fresh_loader("mechmem_test_asks", "from mechmem.plugins import paper_names\nSEEN = paper_names()\n")
    fresh_loader("mechmem_test_toy", TOY)
    assert "toy" in plugins.paper_names()
    assert "toy" not in sys.modules["mechmem_test_asks"].SEEN


def test_reproduce_list_shows_the_loaded_papers_without_a_traceback(fresh_loader, capsys):
    fresh_loader("mechmem_test_broken", BROKEN)
    fresh_loader("mechmem_test_toy", TOY)
    assert run_script(load_script("reproduce").main, ["--list"]) == 0
    out, err = capsys.readouterr()
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["birth", "memorisation", "permutation", "toy"]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_every_demo_model_is_a_preset_of_a_core_task():
    from mechmem.report.demo import DEMO_MODELS, available

    assert available() == list(DEMO_MODELS) and {m.task for m in DEMO_MODELS} == {
        "birth",
        "facts",
        "permutation",
    }
