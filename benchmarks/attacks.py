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
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

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
def hf_case(folder: Path, kind: str) -> Callable[[], object]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from mechmem.models.adapter import load_pretrained

    hf = folder / "tiny"
    torch.manual_seed(0)  # transformers initialises from the global RNG
    config = LlamaConfig(
        vocab_size=40, max_position_embeddings=24, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
    )  # fmt: skip
    with contextlib.redirect_stderr(io.StringIO()):
        LlamaForCausalLM(config).save_pretrained(hf)
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


def classify(kind: str, outcome: str, changed_outside: bool) -> str:
    if changed_outside:
        return "outside"
    if outcome in ("traceback", "hang"):
        return outcome
    if outcome == "accepted":
        return "ok" if kind in LEGITIMATE else "garbage accepted"
    return "one-line"


def main(argv: list[str] | None = None) -> int:
    """Run every kind (or those matching --only) and print one line each, then the six counts."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="run only the kinds whose name contains this text")
    parser.add_argument("--limit-s", type=int, default=30, help="seconds after which a kind is a hang")
    args = parser.parse_args(argv)
    counts: Counter = Counter()
    root = Path(tempfile.mkdtemp(prefix="mechmem-attacks."))
    good = save_model(planted_induction_model(), root / "good.pt")
    cases: list[tuple[str, Callable[[Path], Callable[[], object]]]] = []
    cases += [(k, lambda f, e=e: checkpoint_case(good, f, e)) for k, e in config_kinds().items()]
    cases += [(k, lambda f, m=m: file_case(f, m)) for k, m in file_kinds(good).items()]
    cases += [(k, lambda f, line=line: log_case(f, line)) for k, line in LINES.items()]
    cases += [(f"log a {k}", lambda f, k=k: log_special(f, k)) for k in ("fifo", "link")]
    cases += [(k, lambda f, k=k: out_case(f / "out", f.parent / "outside", k)) for k in OUT_KINDS]
    cases += [(k, lambda f, k=k: hf_case(f, k)) for k in HF_KINDS]
    for n, (kind, make) in enumerate(cases):
        if args.only not in kind:
            continue
        folder = root / f"case{n}" / "work"
        folder.mkdir(parents=True)
        (folder.parent / "outside").mkdir()
        fn = make(folder)
        outside = folder.parent / "outside"
        before = snapshot(outside)
        outcome, line = run(fn, args.limit_s)
        category = classify(kind, outcome, snapshot(outside) != before)
        counts[category] += 1
        print(f"{category:17s} {kind:40s} {line}")
    print()
    print(" | ".join(f"{c} {counts[c]}" for c in CATEGORIES))
    print(f"{sum(counts.values())} kinds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
