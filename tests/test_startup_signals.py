"""A stop signal at any instant of a run's start-up ends it in one line with exit status 130; what a killed
run left staged is removed by the next run in its folder.

The sweep starts `mechmem train` (through `python -m mechmem` and through analyses/train.py) and sends
SIGTERM, SIGINT or SIGHUP after a series of delays, from the entry point's first line (the interpreter's own
start-up comes first: measured here as the time `python` takes to import `mechmem.io`, before which no script
can run a line) through the heavy imports, to the training steps. Every run must end within `GRACE_S` of its
signal (not swallowed), with status 130, exactly `error: interrupted` on stderr (no traceback) and no staged
file or lock left behind. The default run covers the window coarsely; `-m slow` sweeps it finely with every
signal.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, wait_for

from mechmem.io import LOCK, STAGED, OutputSet, atomic_write, output_dir, remove_staged

GRACE_S = 20.0
"""How long a run may take to end after its signal (a C call, such as loading torch's libraries, runs to its
end before Python sees the signal; a busy machine stretches it)."""
TRAIN = ["train", "permutation", "--preset", "task1-quick", "--steps", "1000000", "--no-progress"]
ENTRIES = {"python -m mechmem": ["-m", "mechmem"], "analyses/train.py": [str(ROOT / "analyses" / "train.py")]}


def child_env() -> dict[str, str]:
    paths = [str(ROOT / "src"), str(ROOT / "papers"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start(entry: str, out: Path) -> subprocess.Popen:
    argv = TRAIN if entry == "python -m mechmem" else TRAIN[1:]
    # The child starts with every stop signal at its default, as from a terminal, even when the tests run
    # under nohup or in a background job (whose ignored SIGHUP or SIGINT a child inherits and keeps).
    previous = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGHUP, signal.SIGINT)}
    try:
        return subprocess.Popen(
            [sys.executable, *ENTRIES[entry], *argv, "--out", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env(), cwd=out.parent,
        )  # fmt: skip
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def first_line_s() -> float:
    """Seconds a fresh interpreter takes to import `mechmem.io` and exit: the start-up before a first line."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mechmem.io"], env=child_env(), check=True)
    return time.perf_counter() - t0


def stop_after(entry: str, delay_s: float, sig: signal.Signals, out: Path) -> None:
    """Start a run, send `sig` after `delay_s`, and check how it ended."""
    proc = start(entry, out)
    time.sleep(delay_s)
    proc.send_signal(sig)
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(
            f"{entry}: {sig.name} after {delay_s:.2f} s was swallowed (still running {GRACE_S} s later)"
        )
    case = f"{entry}, {sig.name} after {delay_s:.2f} s (ended {time.monotonic() - sent:.1f} s later)"
    assert proc.returncode == 130 and err.splitlines() == ["error: interrupted"], (case, proc.returncode, err)
    left = (
        [p.name for p in out.rglob("*") if STAGED.fullmatch(p.name) or p.name == LOCK] if out.exists() else []
    )
    assert not left, (case, left)


def training_start_s(tmp_path: Path) -> float:
    """Seconds from launch until the run holds its folder's lock (its steps begin right after)."""
    out = tmp_path / "probe"
    proc = start("python -m mechmem", out)
    t0 = time.monotonic()
    try:
        assert wait_for(lambda: (out / LOCK).exists(), proc, timeout_s=300), proc.communicate()[1]
        return time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.subprocess
def test_a_stop_signal_anywhere_in_start_up_ends_the_run_in_one_line(tmp_path):
    first = first_line_s()
    cases = [
        (first * 1.5, signal.SIGTERM, "python -m mechmem"),
        (first * 1.5 + 0.15, signal.SIGINT, "analyses/train.py"),
        (first * 1.5 + 0.6, signal.SIGHUP, "python -m mechmem"),
        (first * 1.5 + 1.5, signal.SIGTERM, "analyses/train.py"),
        (first * 1.5 + 3.0, signal.SIGINT, "python -m mechmem"),
    ]
    for n, (delay, sig, entry) in enumerate(cases):
        stop_after(entry, delay, sig, tmp_path / f"run{n}")


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_stop_signal_at_every_instant_up_to_the_training_steps(tmp_path):
    first, end = first_line_s(), training_start_s(tmp_path) + 1.0
    delays = [first * 1.5 + (end - first * 1.5) * k / 23 for k in range(24)]
    sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for n, delay in enumerate(delays):
        stop_after(list(ENTRIES)[n % 2], delay, sigs[n % 3], tmp_path / f"run{n}")


IN_AN_IMPORT = """
import os, signal, sys, time
from contextlib import nullcontext
from mechmem.io import catch_stop_signals, output_dir
catch_stop_signals()
class Stop:  # SIGTERM while `colorsys` is being imported
    def find_spec(self, name, path=None, target=None):
        if name == "colorsys":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside the import
        return None
sys.meta_path.insert(0, Stop())
try:
    with output_dir(sys.argv[1]) if sys.argv[1] else nullcontext():
        import colorsys
        time.sleep(10)
except KeyboardInterrupt:
    print("interrupted after the import:", "colorsys" in sys.modules)
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("writing", [False, True])
def test_a_signal_inside_an_import_ends_at_once_or_waits_for_the_import(writing, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", IN_AN_IMPORT, str(out) if writing else ""],
        capture_output=True, text=True, env=child_env(), timeout=60, check=False,
    )  # fmt: skip
    if writing:  # raised once the import finished, so the writer's clean-up ran
        assert (done.returncode, done.stdout, done.stderr) == (0, "interrupted after the import: True\n", "")
        assert not out.exists()
    else:  # nothing written: the process ended inside the import, in one line
        assert (done.returncode, done.stdout, done.stderr) == (130, "", "error: interrupted\n")


def test_the_next_run_in_a_folder_removes_what_a_killed_one_left_staged(tmp_path):
    out, outside = tmp_path / "run", tmp_path / "outside"
    outside.mkdir()
    (outside / ".secret.abcd1234.mechmem.tmp").write_text("not ours to remove")
    with output_dir(out):  # a run that leaves each kind of staged file, as a SIGKILL in mid-write would
        atomic_write(out / "ckpt.pt", b"old")
        atomic_write(out / "checkpoints" / "step_0000002.pt", b"a step")
    staged = {
        out / ".report.md.k3j9x_2a.mechmem.tmp": "file",
        out / ".figures.q0w9e8r7.mechmem.tmp": "folder",
        out / "checkpoints" / ".step_0000004.pt.zz_11aa2.mechmem.tmp": "file",
    }
    for path, kind in staged.items():
        if kind == "folder":
            path.mkdir()
            (path / "a.png").write_bytes(b"png")
        else:
            path.write_bytes(b"half")
    (out / ".ckpt.pt.4242.mechmem.old").write_bytes(b"older")  # moved aside by a commit, its name taken
    (out / ".summary.json.4242.mechmem.old").write_bytes(b"{}")  # moved aside, its name free: it goes back
    deep = out / "a" / "b" / "c"  # deeper than any writer stages
    deep.mkdir(parents=True)
    kept = [out / "notes.tmp", out / ".hidden", out / "x.abcd1234.mechmem.tmp", out / ".bad.abc.mechmem.tmp"]
    kept += [out / ".editor.abcd1234.tmp", out / ".x.4242.old", deep / ".d.abcd1234.mechmem.tmp"]
    for path in kept:
        path.write_text("someone else's")
    (out / ".link.abcd1234.mechmem.tmp").symlink_to(outside / ".secret.abcd1234.mechmem.tmp")
    (out / "linked").symlink_to(outside, target_is_directory=True)
    other = out / "report"  # another writer's folder (it holds a lock): left to that writer
    other.mkdir()
    (other / LOCK).write_text("1\n")
    (other / ".report.md.abcdefgh.mechmem.tmp").write_text("another writer's")

    with output_dir(out):
        pass

    assert not any(p.exists() for p in staged) and not (out / ".ckpt.pt.4242.mechmem.old").exists()
    assert (out / "summary.json").read_bytes() == b"{}" and (out / "ckpt.pt").read_bytes() == b"old"
    assert all(p.exists() for p in kept) and (out / ".link.abcd1234.mechmem.tmp").is_symlink()
    assert (outside / ".secret.abcd1234.mechmem.tmp").exists()
    assert (other / ".report.md.abcdefgh.mechmem.tmp").exists()
    assert (out / "checkpoints" / "step_0000002.pt").exists()
    assert remove_staged(out) == []  # nothing left to remove


def test_staged_names_match_what_the_writers_stage(tmp_path, monkeypatch):
    """`STAGED` is checked against the names `atomic_write` and `OutputSet` really use, seen mid-write."""
    seen = []

    def writer(fh):
        seen.extend(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
        fh.write(b"x")

    atomic_write(tmp_path / "a.json", writer=writer)
    with OutputSet(tmp_path) as files:
        files.add("report.md", writer=writer)
        files.add_dir("figures", {"a.png": b"png"})
        seen.extend(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert seen and all(STAGED.fullmatch(name) for name in seen), seen
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "figures", "report.md"]
