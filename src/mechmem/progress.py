"""Progress of long loops (training, sweeps, the demo) that shows on a terminal and in logs alike.

On a terminal, `Progress` is a tqdm bar; otherwise it writes one plain line at regular intervals:

    train permutation: step 300/1500 (20%) loss 1.2345 elapsed 12s left ~48s

`working(what)` reports a step that cannot count its progress; `LogRelay` relays the progress lines of
parallel jobs.
"""

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

LINE_MARK = ": step "
"""What every progress line contains (how `LogRelay` recognises them)."""


def format_seconds(s: float | int) -> str:
    """12s, 3m05s, 1h02m."""
    s = round(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """A progress display with tqdm's `update` / `set_postfix` / `close` (see the module docstring).

    Args:
        total: number of steps.
        initial: steps already done (a resumed run).
        desc: what is progressing, e.g. "train permutation".
        enabled: False shows nothing.
        stream: where to write (default stderr); a bar when it is a terminal, lines otherwise.
        every_s: seconds between lines when not on a terminal.
        clock: time source (tests pass a fake one).
    """

    def __init__(
        self,
        total: int,
        *,
        initial: int = 0,
        desc: str = "",
        enabled: bool = True,
        stream: Any = None,
        every_s: float | int = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total, self.n, self.start_n, self.desc = total, initial, initial, desc
        self.enabled, self.every_s, self.clock = enabled, every_s, clock
        self.postfix: dict[str, Any] = {}
        self.t0 = self.last = clock()
        self.bar = None
        if enabled and bool(getattr(self.stream, "isatty", lambda: False)()):
            from tqdm.auto import tqdm  # here, not at the top: scripts import this module before parsing

            self.bar = tqdm(total=total, initial=initial, desc=desc, leave=False, file=self.stream)

    def set_postfix(self, **stats: Any) -> None:
        """Values shown after the step count (e.g. loss)."""
        self.postfix.update(stats)
        if self.bar is not None:
            self.bar.set_postfix(**stats)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and self.clock() - self.last >= self.every_s:
            self.write_line()

    def line(self) -> str:
        """The plain progress line: step, share done, postfix values, elapsed and estimated time left."""
        elapsed = self.clock() - self.t0
        done = self.n - self.start_n
        left = elapsed / done * (self.total - self.n) if done > 0 else None
        stats = " ".join(f"{k} {v}" for k, v in self.postfix.items())
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        estimate = f" left ~{format_seconds(left)}" if left is not None else ""
        done = f"{self.desc}{LINE_MARK}{self.n}/{self.total}{share} {stats}"
        return f"{done} elapsed {format_seconds(elapsed)}{estimate}"

    def write_line(self) -> None:
        self.last = self.clock()
        print(" ".join(self.line().split()), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled:
            self.write_line()

    def __enter__(self) -> "Progress":  # noqa: PYI034 (beartype rejects Self on methods)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def last_progress_line(path: Path) -> str | None:
    """The last progress line in a log file (None when there is none yet)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 8192))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    found = [ln for ln in lines if LINE_MARK in ln]
    return found[-1].strip() if found else None


class LogRelay:
    """Relays parallel jobs' progress: `poll` prints, at most every `every_s` seconds, the latest progress
    line of each job whose logs moved on, as `[name] <line>` (the newest of a job's log files is read).

    Args:
        every_s: seconds between relays.
        stream: where to print (default stdout).
        clock: time source (tests pass a fake one).
    """

    def __init__(
        self, *, every_s: float | int = 15.0, stream: Any = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every_s, self.stream, self.clock = every_s, stream, clock
        self.last = clock()
        self.shown: dict[str, str] = {}

    def poll(self, logs: dict[str, Sequence[Path]]) -> None:
        if self.clock() - self.last < self.every_s:
            return
        self.last = self.clock()
        for name, paths in logs.items():
            existing = [p for p in paths if p.exists()]
            line = last_progress_line(max(existing, key=lambda p: p.stat().st_mtime)) if existing else None
            if line and self.shown.get(name) != line:
                self.shown[name] = line
                print(f"[{name}] {line}", file=self.stream or sys.stdout, flush=True)


@contextmanager
def working(what: str, *, every_s: float = 10.0, stream: Any = None, announce: bool = True) -> Iterator[None]:
    """Say what a script is doing: one line now (`what ...`; not when `announce` is False), one every
    `every_s` seconds while the block runs (`what: elapsed 20s`), and the time it took when it took more than
    `every_s`."""
    stream = stream if stream is not None else sys.stdout
    if announce:
        print(f"{what} ...", file=stream, flush=True)
    t0, done = time.monotonic(), threading.Event()

    def beat() -> None:
        while not done.wait(every_s):
            print(f"{what}: elapsed {format_seconds(time.monotonic() - t0)}", file=stream, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    if time.monotonic() - t0 >= every_s:
        print(f"{what}: done in {format_seconds(time.monotonic() - t0)}", file=stream, flush=True)
