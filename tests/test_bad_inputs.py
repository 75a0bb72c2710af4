"""The scripts against bad inputs and a bad machine. Nothing hangs, nothing is half-written.

Each case runs a real script (`analyses/*.py`, in-process through `run_script(main, argv)`; in a subprocess
only where a signal must arrive) and checks the three things a user sees: the exit status, the lines on stderr
(one `error:` line), and the output folder before and after (nothing clobbered, nothing half-written, no lock
or temporary file left, no folder created by a failed run). Every outcome is also sorted into the categories
of the issue (one-line, multi-line, traceback, hang, clobbered, half-written, code executed, skipped, ok); the
counts are printed at the end of the module's run.
"""

import errno
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import ROOT
from script_cases import FAST, SCRIPTS, classify, load_main, run_case, snapshot

from mechmem.analysis.planted import planted_induction_model
from mechmem.checkpoint import payload_digest, save_model
from mechmem.cli import run_script
from mechmem.errors import MechmemError

pytestmark = pytest.mark.usefixtures("as_a_user_runs")  # see conftest.py

OUTPUTS = {
    "ablate_heads": ["ablate_heads.json", "ablate_heads.png"],
    "circuit": ["circuit.json", "circuit.png"],
    "detect_heads": ["detect_heads.json", "detect_heads.png", "detect_heads_task.png", "attention.png"],
    "patch": ["patching.json", "patching_resid_pre.png", "patching_attn_head_out_all_pos.png"],
    "logit_lens": ["logit_lens.json", "logit_lens.png"],
    "probe_memory": ["memory_probes.json", "memory_probes.png"],
    "report": ["report.md", "report.html", "report.json"],
}
"""The scripts whose outputs are written as one set, each with the files a run of it writes (all of them, or
the first few of a longer list)."""
HANG_S = 60
"""Seconds after which a case counts as a hang (the nested-list checkpoint used to run for ever)."""

OUTCOMES: Counter = Counter()
"""Category -> number of cases, printed when the module ends."""


@pytest.fixture(scope="module", autouse=True)
def print_counts(request):
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None and OUTCOMES:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(OUTCOMES.items()))
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\ntest_bad_inputs outcomes: {counts}")


# -- bad checkpoints -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return save_model(planted_induction_model(), tmp_path_factory.mktemp("good") / "ckpt.pt")


def _resave(good: Path, path: Path, edit, *, redigest: bool = True) -> Path:
    payload = torch.load(good, weights_only=True)
    edit(payload)
    payload["digest"] = (
        payload_digest(payload) if redigest else "0" * 64
    )  # some edits cannot be hashed in bounded time
    torch.save(payload, path)
    return path


def _nested(payload):
    x = [1.0, 1.0]
    for _ in range(60):
        x = [x, x]  # 60 levels of shared lists: a small file, 2**60 paths for a naive walk
    payload["metrics"]["bomb"] = x


def _wide(payload):
    payload["metrics"]["wide"] = list(range(200_000))


def _huge_vocab(payload):
    payload["task_name"] = "permutation"  # builds a table sized by its vocabulary: 800 GB at 10**11
    payload["task_config"] = {"vocab_size": 10**11}


def _out_vocab(payload):
    state = payload["state_dict"]
    payload["model_config"]["d_vocab_out"] = 8  # smaller than the task's 12 target tokens
    state["unembed.W_U"] = state["unembed.W_U"][:, :8].clone()
    state["unembed.b_U"] = state["unembed.b_U"][:8].clone()


def _nonfinite(payload):
    payload["state_dict"]["blocks.0.attn.W_Q"][0, 0, 0] = float("nan")


def _huge_weights(payload):
    payload["state_dict"]["embed.W_E"] *= 1e30  # finite, but the embeddings alone exceed sqrt(float32 max)


def _tensor_claims_more(payload):
    payload["state_dict"]["embed.W_E"] = torch.zeros(1).expand(10**6, 10**6)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch code_was_executed",))


def _pickled_code(payload):
    payload["metrics"]["x"] = _RunsCode()


BAD_CHECKPOINTS = {
    "nested_lists": (_nested, "field metrics nests deeper than 8 levels"),
    "too_many_elements": (_wide, "field metrics holds more than 100000 elements"),
    "task_vocab_1e11": (_huge_vocab, "vocabulary 100000000001 > model's 12"),
    "output_vocab_smaller": (_out_vocab, "output vocabulary 12 > model's 8"),
    "nonfinite_weights": (_nonfinite, "weights hold NaN or inf (blocks.0.attn.W_Q)"),
    "huge_finite_weights": (_huge_weights, "weights so large that the forward pass overflows"),
    "tensor_larger_than_storage": (_tensor_claims_more, "claims 4000000000000 bytes"),
    "pickled_code": (_pickled_code, "refused without running them"),
}
UNHASHABLE = ("nested_lists", "tensor_larger_than_storage", "pickled_code")


@pytest.fixture(scope="module")
def bad_checkpoints(good, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad")
    paths = {}
    for name, (edit, _) in BAD_CHECKPOINTS.items():
        paths[name] = _resave(good, folder / f"{name}.pt", edit, redigest=name not in UNHASHABLE)
    return paths


@pytest.mark.parametrize("case", sorted(BAD_CHECKPOINTS))
@pytest.mark.parametrize("script", SCRIPTS)
def test_bad_checkpoint_is_one_line_in_bounded_time(
    script, case, bad_checkpoints, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # where a pickled `os.system` would leave its marker
    argv = [str(bad_checkpoints[case]), "--out", str(out)]
    status, err, before, after = run_case(script, argv, capsys, out, limit_s=HANG_S)
    executed = (tmp_path / "code_was_executed").exists()
    category = "code executed" if executed else classify(status, err, before, after)
    OUTCOMES[category] += 1
    assert category == "one-line" and status == 2, (category, status, err)
    assert BAD_CHECKPOINTS[case][1] in err and not out.exists()


def test_byom_output_vocabulary_and_tiny_models_are_refused_or_fitted(tmp_path):
    from mechmem.models.backend import hooked_transformer_config, raw_hooked_transformer

    def model(**kw):
        cfg = {
            "n_layers": 1,
            "d_model": 8,
            "n_heads": 1,
            "d_head": 8,
            "d_vocab": 12,
            "n_ctx": 8,
            "act_fn": "relu",
            "d_mlp": 16,
        }
        return raw_hooked_transformer(hooked_transformer_config(**{**cfg, **kw}))

    # a smaller output vocabulary: the generic task is sized to it, so every target is a logit the model has
    path = save_model(model(d_vocab_out=7), tmp_path / "out7.pt")
    assert torch.load(path, weights_only=True)["task_config"]["d_vocab"] == 7
    # an explicit task that needs more output tokens than the model has is refused before anything is written
    with pytest.raises(MechmemError, match="output vocabulary 12 > model's 7"):
        save_model(model(d_vocab_out=7), tmp_path / "x.pt", task_config={"d_vocab": 12, "half": 4})
    for kw, size in [({"n_ctx": 3}, "n_ctx 3"), ({"d_vocab": 2, "d_vocab_out": 2}, "d_vocab 2")]:
        with pytest.raises(MechmemError, match=f"needs a model with context n_ctx >= 4.*{size}"):
            save_model(model(**kw), tmp_path / "tiny.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out7.pt"]


# -- flags: every number range-checked by the script itself --------------------------------------------------
FLAGS = [
    ("patch", ["--memory-mb", "nan"], "argument --memory-mb: nan must be a finite number of MB >= 1"),
    ("patch", ["--memory-mb", "0"], "argument --memory-mb: 0 must be a finite number of MB >= 1"),
    ("patch", ["--memory-mb", "-1"], "argument --memory-mb: -1 must be a finite number of MB >= 1"),
    ("logit_lens", ["--top-k", "-3"], "argument --top-k: -3 must be at least 1"),
    ("logit_lens", ["--top-k", "13"], "--top-k 13 is more than the model's 12 tokens"),
    ("ablate_heads", ["--n-samples", "-5"], "argument --n-samples: -5 must be at least 1"),
    ("report", ["--seed", "1e3"], "argument --seed: '1e3' is not an integer"),
    ("report", ["--memory-mb", "0"], "argument --memory-mb: 0 must be a finite number of MB >= 1"),
    ("report", ["--threads", "0"], "argument --threads: 0 must be at least 1"),
    (
        "circuit",
        ["--role-samples", str(10**9)],
        "argument --role-samples: 1000000000 is more than 1048576",
    ),
    ("circuit", ["--role-samples", "1000000"], "--role-samples 1000000 needs about 103271 MB for this model"),
    ("circuit", ["--share", "2"], "argument --share: 2 is outside (0, 1]"),
    ("circuit", ["--max-exact", "0"], "argument --max-exact: 0 must be at least 1"),
]


@pytest.mark.parametrize("script, argv, expected", FLAGS, ids=[f"{s}{a[0]}{a[1]}" for s, a, _ in FLAGS])
def test_numeric_flags_are_checked_by_the_script(script, argv, expected, good, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(good), "--out", str(out), *argv]
    status, err, before, after = run_case(script, argv, capsys, out, limit_s=HANG_S)
    category = classify(status, err, before, after)
    OUTCOMES[category] += 1
    assert category == "one-line" and status == 2 and expected in err, (category, err)
    assert not out.exists()


@pytest.mark.parametrize("script", ["patch", "logit_lens", "dynamics"])
def test_every_numeric_flag_states_its_range_in_help(script, capsys):
    with pytest.raises(SystemExit):
        load_main(script)(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    flags = {"patch": ["finite number >= 1"], "logit_lens": ["from 1 to"], "dynamics": ["in [2, "]}
    assert all(f in text for f in flags[script]), text


# -- the output folder: links, a full disk, a read-only file system, a second writer -------------------------
@pytest.fixture(scope="module")
def finished(good, tmp_path_factory):
    """One successful run of each set-writing script, in its own folder (copied by each test)."""
    folders = {}
    for script in OUTPUTS:
        out = tmp_path_factory.mktemp(script)
        assert run_script(load_main(script), [str(good), "--out", str(out), *FAST.get(script, [])]) == 0
        folders[script] = out
    return folders


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


LINK_CASES = [
    pytest.param(script, marks=[] if script in ("ablate_heads", "patch", "report") else [pytest.mark.slow])
    for script in sorted(OUTPUTS)
]
"""Every script; the default suite runs three whose output sets differ in kind (one figure, several figures
named by hook, the report's page set), the others with the slow tests."""


@pytest.mark.parametrize("script", LINK_CASES)
def test_links_planted_in_out_are_replaced_never_followed(script, finished, good, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    for name in OUTPUTS[script]:
        (outside / name).write_text("not yours")
        (out / name).symlink_to(outside / name)
    if script == "report":
        (outside / "figs").mkdir()
        (out / "figures").symlink_to(outside / "figs", target_is_directory=True)
    seen = {"before": snapshot(outside)}
    status, err, before, after = run_case(
        script, [str(good), "--out", str(out), *FAST.get(script, [])], capsys, out
    )
    seen["after"] = snapshot(outside)
    category = classify(status, err, before, after, outside=seen)
    OUTCOMES["ok (links replaced)" if category == "ok" else category] += 1
    assert status == 0 and category == "ok", err
    mode = 0o666 & ~_umask()
    for name in OUTPUTS[script]:
        assert not (out / name).is_symlink() and (out / name).stat().st_mode & 0o777 == mode
    assert sorted(after) == sorted(
        snapshot(finished[script])
    )  # the same names as a clean run, no .lock or .tmp
    if script == "report":
        assert not (out / "figures").is_symlink() and list((out / "figures").iterdir())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _full_disk(monkeypatch):
    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("mechmem.io.os.fsync", fsync)


def _read_only(monkeypatch):
    import tempfile

    def mkstemp(*args, dir=None, **kw):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), dir)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _immutable_file(monkeypatch):
    """The second output file cannot be replaced or moved (as `chattr +i` does; root ignores file modes)."""
    real = os.replace

    def replace(src, dst):
        if {Path(src).name, Path(dst).name} & IMMUTABLE:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(dst))
        return real(src, dst)

    monkeypatch.setattr("mechmem.io.os.replace", replace)


IMMUTABLE = {
    "ablate_heads.png",
    "circuit.png",
    "detect_heads.png",
    "logit_lens.png",
    "memory_probes.png",
    "patching_resid_pre.png",
    "report.html",
}


def _second_writer(monkeypatch):
    from mechmem.io import output_dir

    return output_dir  # held by the test around the run


FAULTS = {
    "disk_full": (_full_disk, 1, "no space left on device"),
    "read_only_file_system": (_read_only, 2, "not writable (cannot create a file in"),
    "immutable_file": (_immutable_file, 1, "operation not permitted"),
    "second_writer": (_second_writer, 2, "is being written by another process"),
}


FAULT_CASES = [
    pytest.param(
        script,
        fault,
        fresh,
        marks=[pytest.mark.slow]
        if fresh != bool((i + j) % 2) or (script == "report" and fault != "disk_full")
        else [],
        id=f"{script}-{fault}-{'into_new_folder' if fresh else 'over_old_outputs'}",
    )
    for i, script in enumerate(sorted(OUTPUTS))
    for j, fault in enumerate(sorted(FAULTS))
    for fresh in (False, True)
]
"""Every script x fault x folder state. The default suite runs a covering half: each script x fault pair once,
the folder state alternating, so every fault meets both states and every script both; the rest, and the report
(the slowest script) beyond a full disk, run with the slow tests."""


@pytest.mark.parametrize("script, fault, fresh", FAULT_CASES)
def test_machine_faults_are_one_line_and_leave_the_folder_as_it_was(
    script, fault, fresh, finished, good, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "out" if fresh else _copy(finished[script], tmp_path / "out")
    patch, code, expected = FAULTS[fault]
    holder = patch(monkeypatch)
    argv = [str(good), "--out", str(out), *FAST.get(script, [])]
    if holder is not None:
        out.mkdir(exist_ok=True)
        with holder(out):
            status, err, before, after = run_case(script, argv, capsys, out)
        before = {k: v for k, v in before.items() if k != ".lock"}
        after = {k: v for k, v in after.items() if k != ".lock"}
    else:
        status, err, before, after = run_case(script, argv, capsys, out)
    category = classify(status, err, before, after)
    OUTCOMES[category] += 1
    assert category == "one-line" and status == code and expected in err, (category, err)
    assert after == before
    if fresh and holder is None:
        assert not out.exists()


@pytest.mark.parametrize("fresh", [False, True], ids=["into_a_folder_with_other_files", "into_new_folder"])
def test_train_on_a_full_disk_is_one_line_and_leaves_nothing_behind(fresh, tmp_path, capsys, monkeypatch):
    """The first checkpoint cannot be written: one line, exit 1, the metrics file the run had begun is gone
    (nothing to resume from), and so is the folder the run created."""
    out = tmp_path / "run"
    if not fresh:
        out.mkdir()
        (out / "notes.txt").write_text("not the run's")
    _full_disk(monkeypatch)
    argv = ["permutation", "--preset", "task1-quick", "--steps", "3", "--out", str(out), "--no-progress"]
    status, err, before, after = run_case("train", argv, capsys, out)
    category = classify(status, err, before, after)
    OUTCOMES[category] += 1
    assert category == "one-line" and status == 1 and "no space left on device" in err, (category, err)
    assert after == before and out.exists() == (not fresh)


def test_a_lock_is_removed_when_the_writer_ends_and_only_one_writer_wins(tmp_path):
    from mechmem.io import LOCK, output_dir

    with output_dir(tmp_path / "a" / "b") as out:
        assert (out / LOCK).read_text().strip() == str(os.getpid())
        busy = rf"being written by another process \(pid {os.getpid()}\)"
        with pytest.raises(MechmemError, match=busy), output_dir(out):
            pass
    assert list(out.iterdir()) == []
    with pytest.raises(RuntimeError), output_dir(tmp_path / "c" / "d"):
        raise RuntimeError
    assert not (tmp_path / "c").exists()  # a failed writer removes the folders it created


# -- "does not apply" is a skip ------------------------------------------------------------------------------
def test_patch_on_a_task_without_pairs_is_a_skip(tmp_path, capsys):
    from script_cases import USER_TASK

    from mechmem.analysis.planted import planted_config
    from mechmem.checkpoint import save_checkpoint
    from mechmem.tasks import load_task_module

    (tmp_path / "t.py").write_text(USER_TASK)
    load_task_module(tmp_path / "t.py")
    path = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=planted_induction_model(),
        model_config=planted_config(),
        task_name="rel_user_count",
        task_config=None,
    )
    out = tmp_path / "out"
    assert run_script(load_main("patch"), [str(path), "--out", str(out), "--n-samples", "4"]) == 0
    captured = capsys.readouterr()
    assert (
        captured.err == ""
        and "skipped: task 'rel_user_count' defines no clean/corrupted pairs" in captured.out
    )
    OUTCOMES["skipped"] += 1


# -- signals: in a subprocess, at a point the test chooses ---------------------------------------------------
WRAPPER = """
import os, runpy, signal, sys
sys.argv = [{script!r}, *{argv!r}]
# A user's Python starts with the default Ctrl-C handler; a parent that ignores SIGINT (a test worker, nohup)
# would otherwise pass its SIG_IGN on to this interpreter and the interrupt would never arrive.
signal.signal(signal.SIGINT, signal.default_int_handler)
when = {when!r}
if when == "startup":  # an interrupt while the script imports torch
    class Interrupt:
        def find_spec(self, name, path=None, target=None):
            if name == "torch":
                os.kill(os.getpid(), signal.SIGINT)
            return None
    sys.meta_path.insert(0, Interrupt())
elif when == "mid-write":  # an interrupt while the second output file is being flushed
    import mechmem.io
    calls = []
    real = mechmem.io.os.fsync
    def fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(fd)
    mechmem.io.os.fsync = fsync
elif when == "shutdown":  # an interrupt after the script's work, while the interpreter exits
    import atexit
    atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))
runpy.run_path({script!r}, run_name="__main__")
"""


WHEN = ["startup", "mid-write", "shutdown"]
"""When the interrupt lands; the default suite runs mid-write (the case that can half-write), the others
are in `make test-slow`."""


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "when",
    [pytest.param(when, marks=[] if when == "mid-write" else [pytest.mark.slow]) for when in WHEN],
)  # an interrupt inside an import is also in test_startup_signals.py, in-process and cheaper
def test_interrupts_are_one_line_and_leave_the_folder_as_it_was(when, finished, good, tmp_path):
    script = "ablate_heads"
    out = tmp_path / "new" if when == "startup" else _copy(finished[script], tmp_path / "out")
    argv = [str(good), "--out", str(out), *FAST[script]]
    code = WRAPPER.format(script=str(ROOT / "analyses" / f"{script}.py"), argv=argv, when=when)
    before = snapshot(out)
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        status, err = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        status, err = "hang", ""
    after = snapshot(out)
    category = classify(status, err, before, after)
    if when == "shutdown":
        OUTCOMES[category] += 1
        assert status == 0 and err == "" and sorted(after) == sorted(before), err
        return
    OUTCOMES[category] += 1
    assert category == "one-line" and status != 0 and err.strip() == "error: interrupted", err
    assert after == before
