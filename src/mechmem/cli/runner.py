"""Running a script: one-line errors, interrupts, and the output folders it claims.

Every script has `def main(argv: list[str] | None = None) -> int` and ends with
`raise SystemExit(run_script(main))`. Its first lines, before any other import, are

    from mechmem.io import catch_stop_signals

    catch_stop_signals()  # a stop signal from here on ends the run in one line, exit status 130
"""

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from mechmem.errors import MechmemError, one_line
from mechmem.io import STOP_SIGNALS, catch_stop_signals, describe_os_error, output_dir


def run_script(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a script's `main`; every error a user or the machine causes ends in one `error:` line on stderr.

    `MechmemError` (bad input) exits 2, `OSError` 1, a stop signal (SIGINT, SIGTERM, SIGHUP:
    `mechmem.io.catch_stop_signals`) 130. Claimed output folders (`claim_out`) are unlocked when it ends and
    removed when it failed in a folder it created.
    """
    if argv is None:
        install_interrupt_hook()
        catch_stop_signals()
        use_file_backend_when_loaded()
        tolerant_streams()
    try:
        with _claimed_outputs():
            return int(main(argv) or 0)
    except MechmemError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {describe_os_error(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    finally:
        if argv is None and threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)


def install_interrupt_hook() -> None:
    """Make an uncaught KeyboardInterrupt print one `error: interrupted` line, not a traceback (once)."""
    if getattr(sys.excepthook, "mechmem_interrupt_hook", False):
        return
    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            print("error: interrupted", file=sys.stderr)
            return
        previous(kind, value, tb)

    hook.mechmem_interrupt_hook = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def tolerant_streams() -> None:
    """Let stdout and stderr print any text: a character their encoding lacks (the ASCII of a C locale without
    UTF-8 mode) is written as a backslash escape, never a UnicodeEncodeError. Files are written as UTF-8."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def use_file_backend_when_loaded() -> None:
    """Select matplotlib's Agg backend through MPLBACKEND (read when matplotlib is first imported)."""
    os.environ["MPLBACKEND"] = "Agg"


_CLAIMS: list[ExitStack] = []
"""The output folders of the scripts `run_script` is running (innermost last)."""


@contextmanager
def _claimed_outputs() -> Iterator[None]:
    with ExitStack() as stack:
        _CLAIMS.append(stack)
        try:
            yield
        finally:
            _CLAIMS.pop()


def claim_out(path: str | os.PathLike) -> Path:
    """Create the output folder and hold its lock (`mechmem.io.output_dir`) until the script ends.

    Outside `run_script` (a library call) the folder is only created.
    """
    path = Path(path)
    if _CLAIMS:
        return _CLAIMS[-1].enter_context(output_dir(path))
    path.mkdir(parents=True, exist_ok=True)
    return path
