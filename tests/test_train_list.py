"""`train.py --list` shows each preset's measured time from the committed measurements."""

import json

import pytest
from helpers import load_script

from mechmem.cli import run_script
from mechmem.progress import format_seconds
from mechmem.tasks import get_task_class, task_names
from mechmem.training import timings


def test_list_reads_the_recorded_times(tmp_path, monkeypatch, capsys):
    steps = get_task_class("permutation").presets["task1-quick"].train.steps
    record = {"steps": steps // 2, "seconds": 50.0, "how": "full run", "measured_steps": steps // 2}
    data = {"command": "python benchmarks/preset_times.py", "date": "today", "machine": {"cpus": 2}}
    data["presets"] = {"permutation/task1-quick": {**record, "load_1min": 3.3}}
    (tmp_path / "times.json").write_text(json.dumps(data))
    monkeypatch.setattr(timings, "TIMES_FILE", tmp_path / "times.json")
    assert run_script(load_script("train").main, ["--list"]) == 0
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:2]): line for line in out.splitlines() if len(line.split()) > 3}
    # measured on half the steps: the preset's own steps take twice as long (the time scales with the steps)
    # and the rate it was measured at, with the machine's load then
    rate = f"{1000 * 50.0 / (steps // 2):.1f} ms/step at load 3.3"
    assert f"{format_seconds(100.0)} (full run: {rate})" in rows[("permutation", "task1-quick")]
    assert "not measured" in rows[("permutation", "task2-quick")]
    assert all((task, p) in rows for task in task_names() for p in get_task_class(task).presets)
    assert "measured: python benchmarks/preset_times.py on today" in out


def test_every_preset_has_a_committed_measurement():
    recorded = timings.recorded_times()["presets"]
    missing = [
        f"{t}/{p}" for t in task_names() for p in get_task_class(t).presets if f"{t}/{p}" not in recorded
    ]
    assert missing == [], f"run benchmarks/preset_times.py (missing: {missing})"
    assert all(r["seconds"] > 0 and r["steps"] > 0 for r in recorded.values())


def test_the_committed_preset_index_is_the_registrys():
    """`mechmem train --list` and the preset checks read presets.json without torch: it must say what the
    registry says, and cover the plugins installed here."""
    committed = json.loads(timings.INDEX_FILE.read_text())
    now = timings.preset_index()
    # Tasks another test registered in this process (a user's --task-module) are not the installed ones.
    now["tasks"] = {name: presets for name, presets in now["tasks"].items() if name in committed["tasks"]}
    assert committed == now, "a preset changed: run python -m mechmem.training.timings"
    assert set(timings.indexed_presets()) >= set(now["plugins"]["mechmem.tasks"])


def test_an_unseen_plugin_makes_the_index_step_aside(monkeypatch):
    from mechmem.errors import MechmemError

    with pytest.raises(MechmemError, match="has no preset 'nope'"):
        timings.check_preset_name("permutation", "nope")
    seen = timings.installed_plugins()
    monkeypatch.setattr(timings, "installed_plugins", lambda: {**seen, "mechmem.tasks": ["someone-elses"]})
    assert timings.indexed_presets() is None
    timings.check_preset_name("permutation", "nope")  # undecided here: the registry decides, after its import
