"""Running the analysis scripts as a user would, for the bad-input tests: the scripts and their fast flags,
one case run in-process with a time limit, the snapshot of an output folder and the category of an outcome,
and a user's task module. Not a test module."""

import os
import signal
from contextlib import contextmanager
from pathlib import Path

from helpers import load_script

from mechmem.cli import run_script

SCRIPTS = ("ablate_heads", "detect_heads", "logit_lens", "patch", "probe_memory", "report")
"""Scripts that take a checkpoint and write an output folder."""
FAST = {
    "report": ["--n-samples", "32"],
    "ablate_heads": ["--methods", "zero"],
    "circuit": ["--n-samples", "8", "--role-samples", "32"],
    "detect_heads": ["--n-samples", "16"],
    "patch": ["--n-samples", "16", "--sweeps", "resid_pre", "attn_head_out_all_pos"],
}
"""Flags that make each script's run short."""


def load_main(name):
    """The `main` of analyses/`name`.py."""
    return load_script(name).main


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under `folder`: (kind, bytes or link target, mode); {} when it does not exist."""
    if not folder.exists():
        return {}
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path), None)
        elif path.is_dir():
            out[rel] = ("dir", None, None)
        else:
            out[rel] = ("file", path.read_bytes(), path.stat().st_mode & 0o777)
    return out


def classify(status, err: str, before: dict, after: dict, *, outside: dict | None = None) -> str:
    """The issue's category of one outcome (what a user would notice first)."""
    if outside is not None and outside["before"] != outside["after"]:
        return "clobbered"
    leftovers = [k for k in after if k.endswith((".tmp", ".lock")) or "/." in f"/{k}" and ".tmp" in k]
    if status == "hang":
        return "hang"
    if "Traceback" in err:
        return "traceback"
    if status != 0 and (leftovers or after != before):
        return "half-written"
    lines = err.strip().splitlines()
    if status != 0:
        return "one-line" if len(lines) == 1 and lines[0].startswith("error: ") else "multi-line"
    return "ok"


class Hang(BaseException):
    """Raised in a case that runs past its time (a BaseException, so no script handler catches it)."""


@contextmanager
def within(seconds: int | None):
    """Raise `Hang` when the block runs longer than `seconds` (main thread, SIGALRM); None: no limit."""
    if seconds is None:
        yield
        return

    def alarm(*_):
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_case(script: str, argv: list[str], capsys, folder: Path, *, limit_s: int | None = None):
    """Run `script` in-process (a `Hang` after `limit_s` seconds); return (exit status or "hang", stderr,
    folder before, folder after)."""
    before = snapshot(folder)
    capsys.readouterr()
    try:
        with within(limit_s):
            status = run_script(load_main(script), argv)
    except Hang:
        status = "hang"
    err = capsys.readouterr().err
    return status, err, before, snapshot(folder)


USER_TASK = '''
import torch
from dataclasses import dataclass
from mechmem.config import ConfigMixin
from mechmem.tasks import Batch, Task, register_task

@dataclass(frozen=True)
class CountConfig(ConfigMixin):
    """Tokens 0, 1, 2, ... (mod d_vocab)."""
    d_vocab: int = 12
    """Vocabulary."""

@register_task
class CountTask(Task):
    name = "rel_user_count"
    config_cls = CountConfig
    d_vocab = property(lambda self: self.config.d_vocab)
    seq_len = property(lambda self: 8)

    def train_batch(self, n, *, generator):
        start = torch.randint(self.config.d_vocab, (n, 1), generator=generator)
        seq = (start + torch.arange(9)) % self.config.d_vocab
        return Batch(seq[:, :-1], seq[:, 1:], torch.ones(n, 8))
'''
"""A user's task module: a task without clean/corrupted pairs, registered as "rel_user_count"."""
