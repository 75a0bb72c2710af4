"""A reproducible round of attacks on mechmem's inputs, printed as the six counts of docs/record.

    python benchmarks/attacks.py                 # a minute or two on CPU: one line per kind, then counts
    python benchmarks/attacks.py --only lock     # the kinds whose name contains "lock"

Each kind builds one hostile input in a fresh temporary folder, runs the library call a script would make on
it (`load_checkpoint`, `read_metrics`, `output_dir`, `OutputSet`, `train`), and sorts the outcome:

    one-line          refused with a one-line MechmemError (or OSError) and nothing else changed
    traceback         any other exception
    hang              still running after --limit-s seconds (SIGALRM)
    outside           a file outside the output folder changed (a link or hard link followed)
    half-written      refused, but the output folder is not as it was
    garbage accepted  a hostile input loaded or ran without a word
    ok                a legitimate input that works (a control)

Families: hostile model configs (every size field and setting with impossible values), hostile run logs,
files that are not checkpoints, planted links, hard links and special files in output folders, and Hugging
Face folders with missing or hostile files.
"""

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mechmem.analysis.planted import planted_induction_model
from mechmem.checkpoint import load_checkpoint, payload_digest, save_model
from mechmem.errors import MechmemError
from mechmem.io import OutputSet, output_dir
from mechmem.training.rundir import read_metrics

CATEGORIES = ("one-line", "traceback", "hang", "outside", "half-written", "garbage accepted", "ok")


class Hang(BaseException):
    """The case ran past its time."""


def snapshot(folder: Path) -> dict[str, bytes | str]:
    if not folder.exists():
        return {}
    out: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            out[str(path)] = path.read_bytes()
        else:
            out[str(path)] = "dir"
    return out


def run(fn: Callable[[], object], limit_s: int) -> tuple[str, str]:
    """(outcome, one line): "refused", "accepted", "traceback" or "hang"."""

    def alarm(*_: object) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(limit_s)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            fn()
        return "accepted", ""
    except Hang:
        return "hang", f"after {limit_s} s"
    except (MechmemError, OSError) as exc:
        text = str(exc)
        return ("refused" if "\n" not in text.strip() else "traceback"), text.splitlines()[0][:100]
    except Exception as exc:  # noqa: BLE001 - what is being counted
        return "traceback", f"{type(exc).__name__}: {str(exc)[:90]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- hostile model configs -----------------------------------------------------------------------------------
SIZES = ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx", "d_head", "d_mlp", "d_vocab_out")
OPTIONAL = ("rotary_dim", "n_key_value_heads", "window_size")
BAD_SIZES = {
    "zero": 0,
    "negative": -1,
    "text": "8",
    "fraction": 2.5,
    "bool": True,
    "huge": 10**12,
    "list": [4],
}
BAD_SETTINGS = {
    "act_fn": ["evil", 3],
    "normalization_type": ["BatchNorm", 1],
    "positional_embedding_type": ["sinusoid", None],
    "arch": ["other", None],
    "attn_types": [["sideways", "global"], "global"],
    "fixed": [[["*", "nonsense"]], "x"],
}


def config_kinds() -> dict[str, Callable[[dict], None]]:
    kinds: dict[str, Callable[[dict], None]] = {}
    for field in (*SIZES, *OPTIONAL):
        for label, value in BAD_SIZES.items():
            kinds[f"config {field} {label}"] = lambda p, f=field, v=value: p["model_config"].__setitem__(f, v)
        if field not in ("d_mlp", "d_vocab_out", "d_head", *OPTIONAL):
            kinds[f"config {field} missing"] = lambda p, f=field: p["model_config"].pop(f)
    for field, values in BAD_SETTINGS.items():
        for n, value in enumerate(values):
            kinds[f"config {field} bad{n}"] = lambda p, f=field, v=value: p["model_config"].__setitem__(f, v)
    kinds["config unknown key"] = lambda p: p["model_config"].__setitem__("d_everything", 3)
    kinds["config is a list"] = lambda p: p.__setitem__("model_config", [1, 2])
    kinds["task config vocabulary 0"] = lambda p: p["task_config"].__setitem__("d_vocab", 0)
    kinds["task name unknown"] = lambda p: p.__setitem__("task_name", "nope")
    kinds["weight half precision"] = lambda p: _weights(p, lambda t: t.half())  # legitimate
    kinds["weight a scalar"] = lambda p: p["state_dict"].__setitem__("embed.W_E", torch.tensor(1.0))
    kinds["weight transposed"] = lambda p: _weights(p, lambda t: t.T.contiguous() if t.ndim == 2 else t)
    kinds["weight non-contiguous"] = lambda p: _weights(
        p, lambda t: t.mT.contiguous().mT if t.ndim >= 2 else t
    )  # legitimate
    kinds["weight uint8"] = lambda p: _weights(p, lambda t: t.to(torch.uint8))
    kinds["weight float8"] = lambda p: _weights(p, lambda t: t.to(torch.float8_e4m3fn))
    kinds["weight missing"] = lambda p: p["state_dict"].pop("embed.W_E")
    kinds["weight extra"] = lambda p: p["state_dict"].__setitem__("blocks.9.attn.W_Q", torch.zeros(1))
    kinds["weight empty name"] = lambda p: p["state_dict"].__setitem__("", torch.zeros(1))
    kinds["weight tuple key"] = lambda p: p["state_dict"].__setitem__(("a",), torch.zeros(1))
    return kinds


LEGITIMATE = {"weight half precision", "weight non-contiguous"}


def _weights(payload: dict, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    payload["state_dict"] = {k: fn(v) for k, v in payload["state_dict"].items()}


def checkpoint_case(good: Path, folder: Path, edit: Callable[[dict], None]) -> Callable[[], object]:
    payload = torch.load(good, weights_only=True)
    edit(payload)
    try:
        payload["digest"] = payload_digest(payload)
    except Exception:  # noqa: BLE001 - an edit that cannot be hashed keeps a wrong digest
        payload["digest"] = "0" * 64
    path = folder / "bad.pt"
    torch.save(payload, path)
    return lambda: load_checkpoint(path)


# -- files that are not checkpoints --------------------------------------------------------------------------
def file_kinds(good: Path) -> dict[str, Callable[[Path], Path]]:
    data = good.read_bytes()

    def write(name: str, content: bytes) -> Callable[[Path], Path]:
        def make(folder: Path) -> Path:
            (folder / name).write_bytes(content)
            return folder / name

        return make

    def fifo(folder: Path) -> Path:
        os.mkfifo(folder / "fifo.pt")
        return folder / "fifo.pt"

    def to_dev_zero(folder: Path) -> Path:
        (folder / "zero.pt").symlink_to("/dev/zero")
        return folder / "zero.pt"

    def dir_without(folder: Path) -> Path:
        (folder / "run").mkdir()
        return folder / "run"

    return {
        "file one byte": write("one.pt", b"P"),
        "file truncated 10%": write("t10.pt", data[: len(data) // 10]),
        "file truncated 50%": write("t50.pt", data[: len(data) // 2]),
        "file truncated 99%": write("t99.pt", data[: len(data) * 99 // 100]),
        "file one byte flipped": write("flip.pt", data[:200] + bytes([data[200] ^ 1]) + data[201:]),
        "file random bytes": write("rand.pt", os.urandom(4096)),
        "file zip header then junk": write("zip.pt", b"PK\x03\x04" + os.urandom(1000)),
        "file gzip": write("gz.pt", b"\x1f\x8b\x08\x00" + os.urandom(100)),
        "file json lines": write("m.jsonl", b'{"step": 0}\n{"step": 1}\n'),
        "file pickle protocol 0 with code": write("p0.pt", b"cos\nsystem\n(S'true'\ntR."),
        "file a FIFO": fifo,
        "file a link to /dev/zero": to_dev_zero,
        "file a folder without ckpt.pt": dir_without,
        "file utf-16 text": write("u16.pt", "hello".encode("utf-16")),
    }


def file_case(folder: Path, make: Callable[[Path], Path]) -> Callable[[], object]:
    path = make(folder)
    return lambda: load_checkpoint(path)


# -- hostile run logs ---------------------------------------------------------------------------------------
LINES = {
    "log empty object": "{}",
    "log step float": '{"step": 1.0}',
    "log step bool": '{"step": true}',
    "log step negative": '{"step": -3}',
    "log NaN literal": '{"step": 0, "loss": NaN}',  # Python's json reads it; the trainer never writes it
    "log invalid UTF-8": b'{"step": 0, "x": "\xff"}',
    "log nested 33": '{"step": 0, "x": ' + "[" * 33 + "]" * 33 + "}",
    "log nested 1e6": "[" * 10**6,
    "log a string": '"step"',
    "log a number": "5",
    "log truncated line": '{"step": 0, "lo',
    "log ok control": '{"step": 0, "loss": 1.0}',
}
LEGITIMATE |= {"log ok control", "log NaN literal"}


def log_case(folder: Path, line: str | bytes) -> Callable[[], object]:
    data = line if isinstance(line, bytes) else line.encode()
    (folder / "metrics.jsonl").write_bytes(data + b"\n")
    return lambda: read_metrics(folder)


def log_special(folder: Path, kind: str) -> Callable[[], object]:
    target = folder.parent / "outside.jsonl"
    if kind == "fifo":
        os.mkfifo(folder / "metrics.jsonl")
    elif kind == "link":
        target.write_text('{"step": 0}\n')
        (folder / "metrics.jsonl").symlink_to(target)
    return lambda: read_metrics(folder)


# -- planted files in output folders ------------------------------------------------------------------------
def out_case(out: Path, outside: Path, kind: str) -> Callable[[], object]:
    victim = outside / "victim.txt"
    victim.write_text("a user's file\n")
    out.mkdir()
    if kind == "lock symlink":
        (out / ".lock").symlink_to(victim)
    elif kind == "lock dangling symlink":
        (out / ".lock").symlink_to(outside / "nothing")
    elif kind == "lock hard link":
        os.link(victim, out / ".lock")
    elif kind == "lock a FIFO":
        os.mkfifo(out / ".lock")
    elif kind == "lock a folder":
        (out / ".lock").mkdir()
    elif kind == "lock stale file":
        (out / ".lock").write_text("99999999\n")
    elif kind == "output file a link":
        (out / "a.json").symlink_to(victim)
    elif kind == "output file a hard link":
        os.link(victim, out / "a.json")
    elif kind == "output subfolder a link":
        (out / "figures").symlink_to(outside, target_is_directory=True)

    def write() -> None:
        with output_dir(out), OutputSet(out) as files:
            files.add("a.json", "{}\n")
            files.add_dir("figures", {"f.png": b"png"})

    return write


OUT_KINDS = (
    "lock symlink",
    "lock dangling symlink",
    "lock hard link",
    "lock a FIFO",
    "lock a folder",
    "lock stale file",
    "output file a link",
    "output file a hard link",
    "output subfolder a link",
)
LEGITIMATE |= {"lock stale file", "output file a link", "output file a hard link", "output subfolder a link"}


# -- Hugging Face folders with missing or hostile files ------------------------------------------------------
def save_tiny_llama(hf: Path) -> None:
    """A 2-layer grouped-query Llama saved by transformers into `hf`, the folder each case edits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # transformers initialises from the global RNG
    config = LlamaConfig(
        vocab_size=40, max_position_embeddings=24, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
    )  # fmt: skip
    with contextlib.redirect_stderr(io.StringIO()):
        LlamaForCausalLM(config).save_pretrained(hf)


def hf_case(folder: Path, kind: str) -> Callable[[], object]:
    from mechmem.models.huggingface import load_pretrained

    hf = folder / "tiny"
    save_tiny_llama(hf)
    weights = hf / "model.safetensors"
    if kind == "hf no config.json":
        (hf / "config.json").unlink()
    elif kind == "hf config.json not JSON":
        (hf / "config.json").write_text("{not json")
    elif kind == "hf config.json a list":
        (hf / "config.json").write_text("[1]")
    elif kind == "hf unknown model_type":
        (hf / "config.json").write_text(json.dumps({"model_type": "nonsense", "vocab_size": 40}))
    elif kind == "hf weights missing":
        weights.unlink()
    elif kind == "hf weights truncated":
        weights.write_bytes(weights.read_bytes()[:100])
    elif kind == "hf tokenizer.json garbage":
        (hf / "tokenizer.json").write_text("garbage")
    elif kind == "hf config a link outside":
        (folder.parent / "outside" / "config.json").write_bytes((hf / "config.json").read_bytes())
        (hf / "config.json").unlink()
        (hf / "config.json").symlink_to(folder.parent / "outside" / "config.json")
    return lambda: load_pretrained(str(hf))


HF_KINDS = (
    "hf no tokenizer",
    "hf no config.json",
    "hf config.json not JSON",
    "hf config.json a list",
    "hf unknown model_type",
    "hf weights missing",
    "hf weights truncated",
    "hf tokenizer.json garbage",
    "hf config a link outside",
)
LEGITIMATE |= {"hf no tokenizer", "hf config a link outside"}  # read, never written: a user's own layout


# == processes: forked runs of the real scripts (signals, concurrent runs, races, machine faults) ==========
# A kind below runs a script's `main` under `run_script` in a child forked from this process (torch already
# imported, so a run takes seconds, not the minute a fresh interpreter takes here), exactly as the program
# runs it: sys.argv set, the interrupt handlers installed. The parent watches it, may act on the folder while
# it runs, then checks the folder: no temporary file left, every checkpoint and log readable, and the run can
# be continued (`--resume`, or run afresh when nothing was kept) to the very weights of an uninterrupted run.
TRAIN = ["permutation", "--preset", "task1-quick", "--steps", "6", "--save-every", "2", "--no-progress"]
"""A run of a few seconds with step checkpoints at 2, 4 and 6."""
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}


def script_main(name: str) -> Callable[..., int]:
    from mechmem.cli import ablate, report, train

    return {"train": train.main, "report": report.main, "ablate_heads": ablate.main}[name]


def forked(
    script: str, argv: list[str], *, setup: Callable[[], None] | None = None, limit_s: int = 300
) -> "Child":
    """Start `script argv` in a forked child (after `setup()` there); returns a handle to wait on."""
    fd, name = tempfile.mkstemp(prefix="mechmem-attack-err.")
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 99
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            os.dup2(fd, 2)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            if setup is not None:
                setup()
            from mechmem.cli import run_script

            sys.argv = [script, *argv]
            code = run_script(script_main(script))
        except BaseException:  # noqa: BLE001 - a traceback is what is being counted
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(fd)
    return Child(pid, Path(name), time.monotonic() + limit_s)


class Child:
    """A forked script run: `wait()` gives (exit status or "hang", stderr)."""

    def __init__(self, pid: int, err: Path, deadline: float) -> None:
        self.pid, self.err, self.deadline = pid, err, deadline

    def wait(self) -> tuple[int | str, str]:
        while True:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > self.deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return "hang", self.err.read_text(errors="replace")
            time.sleep(0.05)
        text = self.err.read_text(errors="replace")
        self.err.unlink()
        code = os.waitstatus_to_exitcode(status)
        return (code if code >= 0 else f"killed by {signal.Signals(-code).name}"), text


def outcome_of(status: int | str, err: str) -> tuple[str, str]:
    """("refused" | "accepted" | "traceback" | "hang", one line) for a finished child."""
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    if status == "hang":
        return "hang", "still running"
    if isinstance(status, str) or "Traceback" in err or status == 99:
        return "traceback", (lines[-1] if lines else str(status))[:100]
    if status == 0:
        return "accepted", ""
    if len(lines) == 1 and lines[0].startswith("error: "):
        return "refused", lines[0][:100]
    return "traceback", f"{len(lines)} lines: " + " | ".join(lines)[:90]


def leftovers(folder: Path) -> list[str]:
    """What a run must never leave in `folder`: temporary files, files moved aside, unreadable run files."""
    from mechmem.checkpoint import read_payload

    bad = [p.name for p in folder.rglob("*") if p.name.endswith((".tmp", ".old")) or ".tmp" in p.name]
    # A link a case planted in the folder leads to a user's files, which are no run's doing.
    steps = [] if (folder / "checkpoints").is_symlink() else sorted(folder.glob("checkpoints/*.pt"))
    for path in [folder / "ckpt.pt", folder / "resume.pt", *steps]:
        if path.exists():
            try:
                read_payload(path)
            except MechmemError as exc:
                bad.append(f"{path.name} unreadable ({str(exc)[-40:]})")
    if (folder / "metrics.jsonl").exists():
        try:
            read_metrics(folder)
        except MechmemError:
            bad.append("metrics.jsonl unreadable")
    return bad


REFERENCE: dict[str, dict[str, torch.Tensor]] = {}
"""The weights of the uninterrupted TRAIN run (computed once)."""


def reference_weights(root: Path) -> dict[str, torch.Tensor]:
    if not REFERENCE:
        out = root / "reference"
        status, err = forked("train", [*TRAIN, "--out", str(out)]).wait()
        assert status == 0, err
        REFERENCE.update(torch.load(out / "ckpt.pt", weights_only=True)["state_dict"])
    return REFERENCE


def continues(out: Path, root: Path) -> str:
    """ "" when the run in `out` can be finished (resumed, or rerun when nothing was kept) to the reference
    weights; else what went wrong."""
    kept = (out / "ckpt.pt").exists() or (out / "resume.pt").exists() or any(out.glob("checkpoints/*.pt"))
    argv = [*TRAIN, "--out", str(out), *(["--resume"] if kept else [])]
    status, err = forked("train", argv).wait()
    if status != 0:
        return f"{'--resume' if kept else 'a fresh run'} then fails: {err.strip()[-80:]}"
    got = torch.load(out / "ckpt.pt", weights_only=True)["state_dict"]
    want = reference_weights(root)
    if set(got) != set(want) or any(not torch.equal(got[k], want[k]) for k in want):
        return "the continued run's weights differ from an uninterrupted run's"
    return ""


# -- signals at every phase ----------------------------------------------------------------------------------
def kill_at(module: Any, name: str, sig: int, nth: int = 1, *, after: bool = False) -> Callable[[], None]:
    """A child `setup`: replace `module.name` so that its `nth` call sends `sig` to the process (before the
    real call, or right after it)."""

    def setup() -> None:
        real = getattr(module, name)
        calls = [0]

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] == nth and not after:
                os.kill(os.getpid(), sig)
            result = real(*args, **kwargs)
            if calls[0] == nth and after:
                os.kill(os.getpid(), sig)
            return result

        setattr(module, name, wrapper)

    return setup


def train_phases(sig: int) -> dict[str, Callable[[], None]]:
    import mechmem.io
    from mechmem.training import trainer

    return {
        "lock": kill_at(mechmem.io.fcntl, "flock", sig),
        "model build": kill_at(trainer, "move_model", sig),
        "step 1": kill_at(torch.Tensor, "backward", sig, 1),
        "step 4": kill_at(torch.Tensor, "backward", sig, 4),
        "metrics append": kill_at(trainer, "open_in_place", sig, 2),
        "checkpoint write": kill_at(torch, "save", sig, 2),
        "checkpoint fsync": kill_at(mechmem.io.os, "fsync", sig, 2),
        "checkpoint rename": kill_at(mechmem.io.os, "replace", sig, 2, after=True),
        "final checkpoint": kill_at(torch, "save", sig, 4),
        "train.log write": kill_at(mechmem.io.os, "fsync", sig, 5),
    }


SIGNAL_PHASES = (
    "lock",
    "step 4",
    "metrics append",
    "checkpoint write",
    "checkpoint rename",
    "final checkpoint",
)
"""The phases of `train_phases` the round sends each signal at."""
ANALYSIS_PHASES = (("ablate_heads", "load"), ("ablate_heads", "output write"), ("report", "output rename"))


def signal_train_case(root: Path, folder: Path, sig: int, phase: str) -> Callable[[], tuple[str, str, bool]]:
    def case() -> tuple[str, str, bool]:
        out = folder / "R"
        status, err = forked("train", [*TRAIN, "--out", str(out)], setup=train_phases(sig)[phase]).wait()
        outcome, line = outcome_of(status, err)
        if outcome == "accepted" and phase == "train.log write":  # the signal came after the run's last file
            outcome = "refused"
        bad = leftovers(out) if out.exists() else []
        broken = ", ".join(bad) or continues(out, root)
        return outcome, broken or line, bool(broken)

    return case


def signal_resume_case(root: Path, folder: Path, sig: int) -> Callable[[], tuple[str, str, bool]]:
    """A signal while --resume loads the checkpoint it continues."""

    def case() -> tuple[str, str, bool]:
        out = folder / "R"
        forked("train", [*TRAIN, "--out", str(out)], setup=train_phases(signal.SIGTERM)["step 4"]).wait()
        status, err = forked(
            "train", [*TRAIN, "--out", str(out), "--resume"], setup=kill_at(torch, "load", sig)
        ).wait()
        outcome, line = outcome_of(status, err)
        broken = ", ".join(leftovers(out)) or continues(out, root)
        return outcome, broken or line, bool(broken)

    return case


def signal_analysis_case(good: Path, folder: Path, script: str, sig: int, phase: str) -> Callable:
    import mechmem.io

    setups = {
        "load": kill_at(torch, "load", sig),
        "output write": kill_at(mechmem.io.os, "fsync", sig, 2),
        "output rename": kill_at(mechmem.io.os, "replace", sig, 2, after=True),
    }
    fast = {"report": ["--n-samples", "32"], "ablate_heads": ["--methods", "zero"]}[script]

    def case() -> tuple[str, str, bool]:
        out = folder / "A"
        first, _ = forked(script, [str(good), "--out", str(out), *fast]).wait()
        before = snapshot(out)
        status, err = forked(script, [str(good), "--out", str(out), *fast], setup=setups[phase]).wait()
        outcome, line = outcome_of(status, err)
        after = snapshot(out)
        mixed = first == 0 and sorted(after) != sorted(before)  # neither the old set nor a whole new one
        gone, new = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        names = [Path(p).name for p in gone[:2]] + [Path(p).name for p in new[:2]]
        bad = leftovers(out) + ([f"the outputs are not one whole set ({', '.join(names)})"] if mixed else [])
        return outcome, ", ".join(bad) or line, bool(bad)

    return case


# -- concurrent runs and a folder that changes under a run ---------------------------------------------------
def wait_for(path: Path, child: "Child", seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        if os.waitpid(child.pid, os.WNOHANG)[0]:
            return False
        time.sleep(0.01)
    return path.exists()


def slow_steps(seconds: float) -> Callable[[], None]:
    """A child `setup`: every optimiser step sleeps, so the parent can act while the run is under way."""

    def setup() -> None:
        real = torch.Tensor.backward

        def backward(*args: Any, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return real(*args, **kwargs)

        torch.Tensor.backward = backward  # type: ignore[method-assign]

    return setup


def two_runs_case(
    root: Path, folder: Path, first: list[str], second: list[str], *, script2: str = "train"
) -> Callable[[], tuple[str, str, bool]]:
    """Two runs into one folder at once: the second starts while the first holds the lock; exactly one may
    write, the other is refused in one line, and the run is whole afterwards."""

    def case() -> tuple[str, str, bool]:
        out = folder / "R"
        if "--resume" in first or "--overwrite" in first:
            forked("train", [*TRAIN, "--out", str(out), "--steps", "2"]).wait()
        a = forked("train", [*first, "--out", str(out)], setup=slow_steps(0.3))
        wait_for(out / "metrics.jsonl", a)
        b = forked(script2, [*second, "--out", str(out)])
        (sa, ea), (sb, eb) = a.wait(), b.wait()
        oa, la = outcome_of(sa, ea)
        ob, lb = outcome_of(sb, eb)
        if "traceback" in (oa, ob) or "hang" in (oa, ob):
            return ("traceback" if "traceback" in (oa, ob) else "hang"), la or lb, False
        bad = leftovers(out)
        if oa == ob == "accepted":
            return "accepted", "both runs wrote the folder", False
        if oa != "accepted":
            return oa, f"the first run failed: {la}", False
        return "refused", ", ".join(bad) or lb, bool(bad)

    return case


def folder_changes_case(root: Path, folder: Path, change: str) -> Callable[[], tuple[str, str, bool]]:
    """The run's folder is moved, removed, replaced or emptied of a subfolder while the run writes it."""
    outside = folder.parent / "outside"
    (outside / "victim.jsonl").write_text('{"step": 0}\n')  # a user's files, there before the run
    (outside / "victim.pt").write_bytes(b"a user's file")

    def case() -> tuple[str, str, bool]:
        out = folder / "R"
        child = forked("train", [*TRAIN, "--out", str(out)], setup=slow_steps(0.4))
        wait_for(out / "checkpoints" / "step_0000002.pt", child)
        if change == "renamed":
            out.rename(folder / "R2")
        elif change == "removed":
            shutil.rmtree(out)
        elif change == "replaced by a link outside":
            out.rename(folder / "R2")
            out.symlink_to(outside, target_is_directory=True)
        elif change == "checkpoints replaced by a link outside":
            (out / "checkpoints").rename(folder / "old-checkpoints")
            (out / "checkpoints").symlink_to(outside, target_is_directory=True)
        elif change == "metrics replaced by a link outside":
            (out / "metrics.jsonl").unlink()
            (out / "metrics.jsonl").symlink_to(outside / "victim.jsonl")
        elif change == "metrics replaced by a FIFO":
            (out / "metrics.jsonl").unlink()
            os.mkfifo(out / "metrics.jsonl")
        elif change == "checkpoints replaced by a file":
            shutil.rmtree(out / "checkpoints")
            (out / "checkpoints").write_text("not a folder\n")
        elif change == "lock removed":
            (out / ".lock").unlink()
        elif change == "ckpt.pt planted as a link outside":
            (out / "ckpt.pt").symlink_to(outside / "victim.pt")
        status, err = child.wait()
        outcome, line = outcome_of(status, err)
        if outcome == "accepted" and change in ("lock removed", "ckpt.pt planted as a link outside"):
            bad = leftovers(out)
            return ("ok" if not bad else "refused"), ", ".join(bad), bool(bad)
        kept = folder / "R2" if change in ("renamed", "replaced by a link outside") else out
        bad = leftovers(kept) if kept.is_dir() and not kept.is_symlink() else []
        if change.startswith("metrics replaced"):  # the planted file itself is no run's doing
            bad = [b for b in bad if b != "metrics.jsonl unreadable"]
        return outcome, ", ".join(bad) or line, bool(bad)

    return case


# -- the machine: a full disk, a read-only folder, a file-size limit -----------------------------------------
def tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=False,
                          capture_output=True).returncode == 0  # fmt: skip


def fill(disk: Path, leave: int) -> None:
    """Fill the file system of `disk` until about `leave` bytes are free."""
    with open(disk / "filler", "wb") as fh:
        try:
            while shutil.disk_usage(disk).free > leave:
                fh.write(b"\0" * min(2**16, max(4096, shutil.disk_usage(disk).free - leave)))
                fh.flush()
        except OSError:
            pass


MACHINE = ("full disk at the start", "full disk mid-run", "full disk, step checkpoints every step",
           "read-only mid-run", "file-size limit")  # fmt: skip
"""Read-only is `chattr +i` on the run's folders (a tmpfs in use cannot be remounted read-only)."""


def machine_case(root: Path, folder: Path, fault: str) -> Callable[[], tuple[str, str, bool]]:
    def case() -> tuple[str, str, bool]:
        disk = folder / "disk"
        mounted = fault != "file-size limit"
        if mounted and not tmpfs(disk, "8m"):
            return "refused", "no tmpfs here (not counted as a pass)", True
        out = disk / "R"
        try:
            setup = slow_steps(0.3)
            if fault == "file-size limit":
                import resource

                def setup() -> None:
                    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

            argv = [*TRAIN, "--out", str(out)]
            if fault == "full disk at the start":
                fill(disk, 20_000)
            if fault == "full disk, step checkpoints every step":
                fill(disk, 300_000)
                argv += ["--save-every", "1"]
            child = forked("train", argv, setup=setup)
            if fault in ("read-only mid-run", "full disk mid-run"):
                wait_for(out / "checkpoints" / "step_0000002.pt", child)
                if fault == "full disk mid-run":
                    fill(disk, 0)
                else:  # the folder and checkpoints/ made immutable: nothing created, renamed or removed
                    subprocess.run(["chattr", "+i", str(out), str(out / "checkpoints")], check=False)
            status, err = child.wait()
            outcome, line = outcome_of(status, err)
            if mounted:
                subprocess.run(
                    ["chattr", "-i", str(out), str(out / "checkpoints")], check=False, capture_output=True
                )
                (disk / "filler").unlink(missing_ok=True)
            bad = leftovers(out) if out.exists() else []
            broken = ", ".join(bad) or continues(out, root)
            return outcome, broken or line, bool(broken)
        finally:
            if mounted:
                subprocess.run(["umount", "-l", str(disk)], check=False)

    return case


# -- environment oddities ------------------------------------------------------------------------------------
def env_setup(name: str, folder: Path) -> Callable[[], None]:
    """A child `setup` giving the run one odd environment (what a fresh process would see)."""

    def setup() -> None:
        if name == "HOME unset":
            os.environ.pop("HOME", None)
        elif name == "HOME unwritable file":
            (folder / "home").write_text("a file, not a folder\n")
            os.environ["HOME"] = str(folder / "home")
        elif name == "TMPDIR missing":
            os.environ["TMPDIR"] = str(folder / "no-such-tmp")
            tempfile.tempdir = None  # a fresh process reads TMPDIR on first use
        elif name == "TMPDIR a file":
            (folder / "tmpfile").write_text("x")
            os.environ["TMPDIR"] = str(folder / "tmpfile")
            tempfile.tempdir = None
        elif name == "cwd deleted":
            (folder / "gone").mkdir()
            os.chdir(folder / "gone")
            os.rmdir(folder / "gone")
        elif name == "MPLCONFIGDIR a file":
            (folder / "mplcfg").write_text("x")
            os.environ["MPLCONFIGDIR"] = str(folder / "mplcfg")
        elif name == "XDG_CACHE_HOME unwritable":
            os.environ["XDG_CACHE_HOME"] = "/proc/no-such"
        elif name == "umask 0777":
            os.umask(0o777)
        elif name == "stdout closed":
            os.close(1)
        elif name == "stdin closed":
            os.close(0)

    return setup


FORK_ENVS = (
    "HOME unset", "HOME unwritable file", "TMPDIR missing", "TMPDIR a file", "cwd deleted",
    "MPLCONFIGDIR a file", "XDG_CACHE_HOME unwritable", "umask 0777", "stdout closed", "stdin closed",
)  # fmt: skip
"""Environments a forked child can take on: read at use, not at interpreter start."""
FRESH_ENVS = {
    "LANG=C, a non-ASCII --out": ({"LANG": "C", "LC_ALL": "C"}, "train", "ünï-ß"),
    "LANG=C, a non-ASCII checkpoint path": ({"LANG": "C", "LC_ALL": "C"}, "ablate_heads", "ünï-ß"),
    "MPLBACKEND bogus": ({"MPLBACKEND": "no-such-backend"}, "ablate_heads", ""),
    "OMP_NUM_THREADS=0": ({"OMP_NUM_THREADS": "0"}, "train", ""),
    "OMP_NUM_THREADS garbage": ({"OMP_NUM_THREADS": "lots"}, "train", ""),
    "PYTHONPATH shadowing config, errors, io, tasks": ({"PYTHONPATH": "SHADOW"}, "train", ""),
}
"""Environments only a fresh interpreter sees (the file-system encoding, threads, matplotlib's backend, the
module path): each a real `python analyses/SCRIPT.py`, started together at the beginning of the round."""
SHADOWS = ("config", "errors", "io", "tasks", "plugins", "checkpoint", "models")


def env_case(good: Path, folder: Path, name: str) -> Callable[[], tuple[str, str, bool]]:
    def case() -> tuple[str, str, bool]:
        out = folder / "R"
        if name.startswith("ablate") or name in ("MPLCONFIGDIR a file",):
            argv, script = [str(good), "--out", str(out), "--methods", "zero"], "ablate_heads"
        else:
            argv, script = [*TRAIN, "--out", str(out)], "train"
        status, err = forked(script, argv, setup=env_setup(name, folder)).wait()
        outcome, line = outcome_of(status, err)
        bad = leftovers(out) if out.exists() else []
        if (
            outcome == "accepted"
            and not (out / ("ckpt.pt" if script == "train" else "ablate_heads.json")).exists()
        ):
            return "accepted", "exit 0 but no output written", True
        return ("ok" if outcome == "accepted" else outcome), ", ".join(bad) or line, bool(bad)

    return case


def start_fresh(good: Path, folder: Path, name: str) -> subprocess.Popen:
    env_changes, script, odd = FRESH_ENVS[name]
    env = {**os.environ, **env_changes}
    src = str(Path(__file__).resolve().parents[1] / "src")
    if env_changes.get("PYTHONPATH") == "SHADOW":
        shadow = folder / "shadow"
        shadow.mkdir()
        for module in SHADOWS:
            (shadow / f"{module}.py").write_text("raise SystemExit(7)  # a shadowing module was imported\n")
        env["PYTHONPATH"] = os.pathsep.join([str(shadow), src])
    else:
        env["PYTHONPATH"] = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    place = folder / (odd or "plain")
    place.mkdir()
    source = good
    if script == "ablate_heads":
        source = place / "ckpt.pt"
        shutil.copyfile(good, source)
        argv = [str(source), "--out", str(place / "out"), "--methods", "zero"]
    else:
        argv = [*TRAIN, "--out", str(place / "out")]
    analyses = Path(__file__).resolve().parents[1] / "analyses"
    command = [sys.executable, str(analyses / f"{script}.py"), *argv]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=folder
    )


def fresh_result(proc: subprocess.Popen, folder: Path, name: str, limit_s: int) -> tuple[str, str, bool]:
    try:
        _, err = proc.communicate(timeout=limit_s)
        status: int | str = proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        status = "hang"
    outcome, line = outcome_of(status, err)
    _, script, odd = FRESH_ENVS[name]
    out = folder / (odd or "plain") / "out"
    bad = leftovers(out) if out.exists() else []
    wrote = (out / ("ckpt.pt" if script == "train" else "ablate_heads.json")).exists()
    if outcome == "accepted" and not wrote:
        return "accepted", "exit 0 but no output written", True
    return ("ok" if outcome == "accepted" else outcome), ", ".join(bad) or line, bool(bad)


# -- hostile Hugging Face folders ----------------------------------------------------------------------------
def _config_edit(**changes: Any) -> Callable[[Path], None]:
    def edit(hf: Path) -> None:
        config = json.loads((hf / "config.json").read_text())
        for key, value in changes.items():
            if value is _DROP:
                config.pop(key, None)
            else:
                config[key] = value
        (hf / "config.json").write_text(json.dumps(config))

    return edit


_DROP = object()


def _config_text(text: str | bytes) -> Callable[[Path], None]:
    def edit(hf: Path) -> None:
        (hf / "config.json").write_bytes(text if isinstance(text, bytes) else text.encode())

    return edit


def _weights_edit(fn: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Callable[[Path], None]:
    def edit(hf: Path) -> None:
        from safetensors.torch import load_file, save_file

        state = load_file(hf / "model.safetensors")
        save_file(fn(state), hf / "model.safetensors", metadata={"format": "pt"})

    return edit


def _header(header: Any, data: bytes = b"") -> Callable[[Path], None]:
    def edit(hf: Path) -> None:
        raw = json.dumps(header).encode()
        (hf / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)

    return edit


def _pickle_that_writes(hf: Path, name: str = "pytorch_model.bin") -> None:
    """A .bin whose unpickling writes a file outside the folder (it must never be unpickled)."""
    victim = hf.parent.parent / "outside" / "pwned"
    statement = f"open({str(victim)!r}, 'w').write('unpickled')"
    (hf / name).write_bytes(b"cbuiltins\nexec\n(" + pickle_string(statement) + b"tR.")


def pickle_string(text: str) -> bytes:
    """A protocol-0 pickle STRING opcode pushing `text`."""
    return b"S" + repr(text).encode() + b"\n"


def _only_pickle(hf: Path) -> None:
    (hf / "model.safetensors").unlink()
    _pickle_that_writes(hf)


def _special(name: str, kind: str) -> Callable[[Path], None]:
    def edit(hf: Path) -> None:
        path = hf / name
        path.unlink(missing_ok=True)
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev zero":
            path.symlink_to("/dev/zero")
        elif kind == "dangling":
            path.symlink_to(hf / "nothing-here")
        elif kind == "socket":
            import socket

            sock = socket.socket(socket.AF_UNIX)
            sock.bind(str(path))
            sock.close()
        elif kind == "folder":
            path.mkdir()

    return edit


def _remote_code(hf: Path) -> None:
    victim = hf.parent.parent / "outside" / "pwned"
    (hf / "modeling_evil.py").write_text(f"open({str(victim)!r}, 'w').write('remote code ran')\n")
    _config_edit(model_type="evil", auto_map={"AutoModelForCausalLM": "modeling_evil.EvilModel"})(hf)


def _index_outside(hf: Path) -> None:
    (hf / "model.safetensors.index.json").write_text(
        json.dumps(
            {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "../../outside/x.safetensors"}}
        )
    )


def _loop(hf: Path) -> None:
    (hf / "loop").symlink_to(hf, target_is_directory=True)


HF_NEW: dict[str, Callable[[Path], None]] = {
    "hf config.json 2 MB": _config_text("{" + " " * 2**21 + '"model_type": "llama"}'),
    "hf config.json nested 100": _config_text('{"x": ' + "[" * 100 + "]" * 100 + "}"),
    "hf config.json nested 100k": _config_text('{"x": ' + "[" * 10**5 + "]" * 10**5 + "}"),
    "hf config.json empty": _config_text(""),
    "hf config.json invalid UTF-8": _config_text(b'{"model_type": "\xff"}'),
    "hf config.json a FIFO": _special("config.json", "fifo"),
    "hf config.json a link to /dev/zero": _special("config.json", "dev zero"),
    "hf config.json a folder": _special("config.json", "folder"),
    "hf config.json a dangling link": _special("config.json", "dangling"),
    "hf model_type missing": _config_edit(model_type=_DROP),
    "hf model_type empty": _config_edit(model_type=""),
    "hf model_type a number": _config_edit(model_type=3),
    "hf architectures unknown": _config_edit(architectures=["NoSuchForCausalLM"]),
    "hf vocab_size 10**12": _config_edit(vocab_size=10**12),
    "hf vocab_size 0": _config_edit(vocab_size=0),
    "hf vocab_size -1": _config_edit(vocab_size=-1),
    "hf vocab_size text": _config_edit(vocab_size="40"),
    "hf vocab_size bool": _config_edit(vocab_size=True),
    "hf hidden_size 10**9": _config_edit(hidden_size=10**9),
    "hf hidden_size fraction": _config_edit(hidden_size=32.5),
    "hf num_hidden_layers 10**6": _config_edit(num_hidden_layers=10**6),
    "hf num_attention_heads 0": _config_edit(num_attention_heads=0),
    "hf num_attention_heads 5 (does not divide)": _config_edit(num_attention_heads=5),
    "hf max_position_embeddings 10**9": _config_edit(max_position_embeddings=10**9),
    "hf intermediate_size 10**8": _config_edit(intermediate_size=10**8),
    "hf vocab_size larger than the weights": _config_edit(vocab_size=80),
    "hf auto_map remote code": _remote_code,
    "hf safetensors header length huge": lambda hf: (hf / "model.safetensors").write_bytes(
        struct.pack("<Q", 2**62) + b"{}"
    ),
    "hf safetensors header not JSON": lambda hf: (hf / "model.safetensors").write_bytes(
        struct.pack("<Q", 5) + b"{nope"
    ),
    "hf safetensors header a list": _header([1, 2]),
    "hf safetensors empty file": lambda hf: (hf / "model.safetensors").write_bytes(b""),
    "hf safetensors 7 bytes": lambda hf: (hf / "model.safetensors").write_bytes(b"\x01" * 7),
    "hf safetensors truncated 50%": lambda hf: (hf / "model.safetensors").write_bytes(
        (hf / "model.safetensors").read_bytes()[: (hf / "model.safetensors").stat().st_size // 2]
    ),
    "hf safetensors offsets past the end": _header(
        {"model.embed_tokens.weight": {"dtype": "F32", "shape": [40, 32], "data_offsets": [0, 5120]}},
        b"\0" * 8,
    ),
    "hf safetensors int64 weights": _weights_edit(lambda s: {k: v.to(torch.int64) for k, v in s.items()}),
    "hf safetensors bool weights": _weights_edit(lambda s: {k: v > 0 for k, v in s.items()}),
    "hf safetensors float8 weights": _weights_edit(
        lambda s: {k: v.to(torch.float8_e4m3fn) for k, v in s.items()}
    ),
    "hf safetensors half precision": _weights_edit(lambda s: {k: v.half() for k, v in s.items()}),
    "hf safetensors a weight transposed": _weights_edit(
        lambda s: {k: v.T.contiguous() if "embed" in k else v for k, v in s.items()}
    ),
    "hf safetensors a weight missing": _weights_edit(
        lambda s: {k: v for k, v in s.items() if "layers.1.mlp.down_proj" not in k}
    ),
    "hf safetensors an extra weight": _weights_edit(lambda s: {**s, "model.layers.9.extra": torch.zeros(3)}),
    "hf safetensors NaN weights": _weights_edit(lambda s: {k: v * float("nan") for k, v in s.items()}),
    "hf only a pickle .bin (that writes a file)": _only_pickle,
    "hf a pickle .bin beside safetensors": _pickle_that_writes,
    "hf a pickle named model.pt beside safetensors": lambda hf: _pickle_that_writes(hf, "model.pt"),
    "hf generation_config.json garbage": lambda hf: (hf / "generation_config.json").write_text("{garbage"),
    "hf generation_config.json a FIFO": _special("generation_config.json", "fifo"),
    "hf tokenizer_config.json garbage": lambda hf: (hf / "tokenizer_config.json").write_text("[1, 2"),
    "hf tokenizer.json a FIFO": _special("tokenizer.json", "fifo"),
    "hf an extra FIFO": _special("notes.txt", "fifo"),
    "hf an extra socket": _special("agent.sock", "socket"),
    "hf an extra dangling link": _special("old.json", "dangling"),
    "hf a link loop inside": _loop,
    "hf weights a link to /dev/zero": _special("model.safetensors", "dev zero"),
    "hf weight index pointing outside": _index_outside,
    "hf a huge README": lambda hf: (hf / "README.md").write_bytes(b"x" * 2**24),
}
HF_LEGIT = {
    "hf safetensors half precision", "hf a pickle .bin beside safetensors",
    "hf a pickle named model.pt beside safetensors", "hf a huge README", "hf architectures unknown",
    "hf generation_config.json garbage", "hf a link loop inside", "hf weight index pointing outside",
}  # fmt: skip
"""Folders that load the model as published: half precision is converted to float32; pickles beside
safetensors are never read; transformers picks the class by model_type (TransformerLens 3.9 by architectures,
which refuses); a generation config only steers `generate`; a link loop is never walked; an index beside the
single weights file is not read."""


def hf_new_case(folder: Path, kind: str) -> Callable[[], object]:
    from mechmem.models.checks import check_finite_weights
    from mechmem.models.huggingface import load_pretrained

    hf = folder / "tiny-llama"
    save_tiny_llama(hf)
    HF_NEW[kind](hf)
    # what a script does with --hf: load, then refuse non-finite weights (mechmem.cli.load_for_analysis)
    return lambda: check_finite_weights(load_pretrained(str(hf)), allow=False, what=str(hf))


def classify(kind: str, outcome: str, changed_outside: bool) -> str:
    if changed_outside:
        return "outside"
    if outcome in ("traceback", "hang"):
        return outcome
    if outcome == "accepted":
        return "ok" if kind in LEGITIMATE else "garbage accepted"
    return "one-line"


FAMILIES = (
    ("config", "config"), ("weight", "config"), ("task", "config"), ("file", "files"), ("log", "logs"),
    ("lock", "output folders"), ("output", "output folders"), ("hf", "Hugging Face folders"),
    ("signal", "signals"), ("concurrent", "concurrent runs"), ("race", "file-system races"),
    ("machine", "machine faults"), ("env", "environment"),
)  # fmt: skip
"""Kind-name prefix -> the family it is counted in."""


def family(kind: str) -> str:
    return next(name for prefix, name in FAMILIES if kind.startswith(prefix))


def process_kinds(root: Path, good: Path) -> list[tuple[str, Callable[[Path], Callable[[], tuple]]]]:
    """The kinds that run scripts in forked children: (name, folder -> case returning (outcome, line,
    broken))."""
    kinds: list[tuple[str, Callable[[Path], Callable[[], tuple]]]] = []
    kinds += [(f"env {n}", lambda f, n=n: env_case(good, f, n)) for n in FORK_ENVS]
    for label, sig in SIGNALS.items():
        for phase in SIGNAL_PHASES:
            kinds.append(
                (
                    f"signal {label} train at {phase}",
                    lambda f, s=sig, p=phase: signal_train_case(root, f, s, p),
                )
            )
        kinds.append(
            (f"signal {label} train --resume at load", lambda f, s=sig: signal_resume_case(root, f, s))
        )
        for script, phase in ANALYSIS_PHASES:
            kinds.append((
                f"signal {label} {script} at {phase}",
                lambda f, s=sig, sc=script, p=phase: signal_analysis_case(good, f, sc, s, p),
            ))  # fmt: skip
    fast = {"report": ["--n-samples", "32"], "ablate_heads": ["--methods", "zero"]}
    pairs = {
        "concurrent two fresh train runs": (TRAIN, TRAIN, "train"),
        "concurrent two --overwrite runs": ([*TRAIN, "--overwrite"], [*TRAIN, "--overwrite"], "train"),
        "concurrent two --resume runs": ([*TRAIN, "--resume"], [*TRAIN, "--resume"], "train"),
        "concurrent a fresh run and an --overwrite": (TRAIN, [*TRAIN, "--overwrite"], "train"),
        "concurrent a run and a --resume": (TRAIN, [*TRAIN, "--resume"], "train"),
        "concurrent a run and a report into it": (TRAIN, [str(good), *fast["report"]], "report"),
        "concurrent a run and ablate_heads into it": (
            TRAIN,
            [str(good), *fast["ablate_heads"]],
            "ablate_heads",
        ),
        "concurrent a run and another seed": (TRAIN, [*TRAIN, "--seed", "5"], "train"),
    }
    kinds += [
        (k, lambda f, a=a, b=b, s=s: two_runs_case(root, f, a, b, script2=s))
        for k, (a, b, s) in pairs.items()
    ]
    changes = (
        "renamed", "removed", "replaced by a link outside", "checkpoints replaced by a link outside",
        "metrics replaced by a link outside", "metrics replaced by a FIFO", "checkpoints replaced by a file",
        "lock removed", "ckpt.pt planted as a link outside",
    )  # fmt: skip
    kinds += [
        (f"race run folder {c} mid-run", lambda f, c=c: folder_changes_case(root, f, c)) for c in changes
    ]
    kinds += [(f"machine {m}", lambda f, m=m: machine_case(root, f, m)) for m in MACHINE]
    return kinds


def classify_process(kind: str, outcome: str, broken: bool, changed_outside: bool) -> str:
    if changed_outside:
        return "outside"
    if broken:
        return "half-written"
    if outcome in ("traceback", "hang", "ok"):
        return outcome
    if outcome == "accepted":
        return "garbage accepted"
    return "one-line"


def main(argv: list[str] | None = None) -> int:
    """Run every kind (or those matching --only) and print one line each, then the counts per family."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="run only the kinds whose name contains this text")
    parser.add_argument("--limit-s", type=int, default=30, help="seconds after which a kind is a hang")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # no thread pool in a process that forks
    counts: dict[str, Counter] = {}
    root = Path(tempfile.mkdtemp(prefix="mechmem-attacks."))
    good = save_model(planted_induction_model(), root / "good.pt")
    fresh = {}
    for n, name in enumerate(FRESH_ENVS):
        if args.only in f"env {name}":
            (root / f"fresh{n}" / "outside").mkdir(parents=True)
            folder = root / f"fresh{n}" / "work"
            folder.mkdir()
            fresh[name] = (folder, start_fresh(good, folder, name))
    cases: list[tuple[str, Callable[[Path], Callable[[], object]]]] = []
    cases += [(k, lambda f, e=e: checkpoint_case(good, f, e)) for k, e in config_kinds().items()]
    cases += [(k, lambda f, m=m: file_case(f, m)) for k, m in file_kinds(good).items()]
    cases += [(k, lambda f, line=line: log_case(f, line)) for k, line in LINES.items()]
    cases += [(f"log a {k}", lambda f, k=k: log_special(f, k)) for k in ("fifo", "link")]
    cases += [(k, lambda f, k=k: out_case(f / "out", f.parent / "outside", k)) for k in OUT_KINDS]
    cases += [(k, lambda f, k=k: hf_case(f, k)) for k in HF_KINDS]
    cases += [(k, lambda f, k=k: hf_new_case(f, k)) for k in HF_NEW]
    LEGITIMATE.update(HF_LEGIT)
    processes = process_kinds(root, good)

    def record(kind: str, category: str, line: str) -> None:
        counts.setdefault(family(kind), Counter())[category] += 1
        print(f"{category:17s} {kind:50s} {line}", flush=True)

    for n, (kind, make) in enumerate([*processes, *cases]):
        if args.only not in kind:
            continue
        folder = root / f"case{n}" / "work"
        folder.mkdir(parents=True)
        outside = folder.parent / "outside"
        outside.mkdir()
        fn = make(folder)
        before = snapshot(outside)
        if n < len(processes):
            try:
                outcome, line, broken = fn()
            except Exception as exc:  # noqa: BLE001 - the harness itself failed: count it as a traceback
                outcome, line, broken = "traceback", f"harness: {type(exc).__name__}: {exc}"[:100], False
            category = classify_process(kind, outcome, broken, snapshot(outside) != before)
        else:
            outcome, line = run(fn, args.limit_s)
            category = classify(kind, outcome, snapshot(outside) != before)
        record(kind, category, line)
    for name, (folder, proc) in fresh.items():
        before = snapshot(folder.parent / "outside")
        outcome, line, broken = fresh_result(proc, folder, name, 600)
        record(f"env {name}", classify_process(name, outcome, broken, False), line)
    print()
    total: Counter = Counter()
    print("| family | kinds | " + " | ".join(CATEGORIES) + " |")
    for name, counter in counts.items():
        total.update(counter)
        print(
            f"| {name} | {sum(counter.values())} | " + " | ".join(str(counter[c]) for c in CATEGORIES) + " |"
        )
    print(f"| total | {sum(total.values())} | " + " | ".join(str(total[c]) for c in CATEGORIES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
