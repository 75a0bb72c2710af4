"""Output files that are never half-written, never written through a link, never written by two at once.

Every file mechmem writes goes through here; JSON is strict (NaN and +-inf become null):

    write_json(path, obj)             strict JSON, written atomically

    atomic_write(path, data)          bytes or str -> a temporary file in the target folder, fsync, rename
    atomic_write(path, writer=fn)     fn(binary file) writes the content (torch.save, savefig)
    with OutputSet(out) as files:     files that appear together: staged as temporary files and renamed
        files.add("report.md", text)  into place when the block ends without an error (a failed or interrupted
        files.add_dir("figures", {})  block leaves the old set untouched and no temporary file behind)
    with output_dir(out):             creates `out` if needed, holds `out/.lock` (a second writer is refused),
        ...                           removes the lock when it ends, and the folders it created if it failed;
                                      taking the lock removes what a killed writer left staged there
    catch_stop_signals()              a script's first line: SIGINT, SIGTERM, SIGHUP end it in one line, 130,
                                      never inside an import

A rename replaces a link at the target instead of writing through it; a linked folder inside the output
folder is refused. Files opened in place go through `open_nofollow`. Files get mode 0666 minus the umask.
"""

import errno
import fcntl
import json
import math
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import IO, Any

from mechmem.errors import MechmemError

LOCK = ".lock"
"""The lock file a writer holds in its output folder while it writes (removed when it ends)."""


def strict_json(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None, so it serialises as strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


def jsonable(obj: Any) -> Any:
    """A `json.dumps` default: tensors and arrays as lists (`tolist`), records through their `to_dict`, any
    other object as its `str`."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return str(obj)


def plain_json(obj: Any) -> Any:
    """`obj` as plain strict-JSON values (`jsonable` for what json cannot write, then `strict_json`)."""
    return strict_json(json.loads(json.dumps(obj, default=jsonable)))


def nesting_depth(text: bytes) -> int:
    """Deepest bracket nesting in JSON `text`, counted before parsing it (brackets inside strings overcount,
    which errs on the side of refusing)."""
    depth = deepest = 0
    for byte in text:
        depth += 1 if byte in b"[{" else -1 if byte in b"]}" else 0
        deepest = max(deepest, depth)
    return deepest


def dumps(obj: Any, **kwargs: Any) -> str:
    """`json.dumps` of `strict_json(obj)`; never writes NaN or Infinity."""
    return json.dumps(strict_json(obj), allow_nan=False, **kwargs)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Write strict JSON (NaN/inf -> null) atomically (`atomic_write`)."""
    return atomic_write(path, dumps(obj, indent=2) + "\n")


def _mode(bits: int = 0o666) -> int:
    """`bits` minus the process's umask (the mode of a new file or, with 0o777, a new folder)."""
    mask = os.umask(0)
    os.umask(mask)
    return bits & ~mask


def open_nofollow(path: str | os.PathLike, flags: int = os.O_RDONLY) -> int:
    """`os.open` that never follows a link at `path` and opens only a plain file; else `MechmemError`."""
    if flags & (os.O_WRONLY | os.O_RDWR):
        check_held_folder(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, _mode())
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MechmemError(f"{path} is a symbolic link; refusing to follow it (remove it)") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise MechmemError(f"{path} is not a plain file (a FIFO, device or socket); remove it first")
    return fd


def open_in_place(path: str | os.PathLike, mode: str = "r") -> IO[str]:
    """A text file opened with `open_nofollow`: mode "r" (read), "a" (append, created if missing) or "w"
    (truncate or create)."""
    flags = {"r": os.O_RDONLY, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "w": os.O_WRONLY | os.O_CREAT}
    fd = open_nofollow(path, flags[mode])
    if mode == "w":
        os.ftruncate(fd, 0)
    return os.fdopen(fd, mode, encoding="utf-8")


def refuse_linked_folder(folder: Path, root: Path) -> None:
    """Raise `MechmemError` when a folder below `root`, down to `folder`, is a link (`root` itself may be)."""
    folder, root = Path(folder), Path(root)
    for part in [p for p in [folder, *folder.parents] if p != root and root in p.parents]:
        if part.is_symlink():
            raise MechmemError(f"{part} is a symbolic link; refusing to write through it (remove it first)")


def atomic_write(
    path: str | os.PathLike,
    data: bytes | str | None = None,
    *,
    writer: Callable[[IO[bytes]], Any] | None = None,
    root: str | os.PathLike | None = None,
) -> Path:
    """Write `data` (or what `writer` writes) to a temporary file beside `path`, then rename it into place.

    A link at `path` is replaced, not followed; a linked folder below `root` is refused. On any error (a full
    disk, an interrupt) the temporary file is removed and `path` keeps its old content.
    """
    with _writing():
        tmp = _stage(Path(path), data, writer, root)
        try:
            check_held_folder(path)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return Path(path)


_HELD: dict[Path, os.stat_result] = {}
"""The output folders this process holds (`output_dir`): absolute path -> its identity when taken."""


def check_held_folder(path: str | os.PathLike) -> None:
    """Raise `MechmemError` when `path` lies in an output folder this process holds (`output_dir`) and that
    folder was moved, removed or replaced since it was taken, or a folder between it and `path` is a link."""
    target = Path(os.path.abspath(path))
    for root, identity in _HELD.items():
        if root != target and root not in target.parents:
            continue
        try:
            now = os.lstat(root)
        except FileNotFoundError:
            now = None
        if now is None or not os.path.samestat(now, identity):
            raise MechmemError(
                f"{root} was moved, removed or replaced while this process wrote into it; nothing more is "
                "written (the files written so far stay where the folder went)"
            )
        refuse_linked_folder(target.parent, root)


def _stage(path: Path, data: bytes | str | None, writer: Any, root: Any) -> Path:
    """The content written to a new temporary file beside `path` (flushed to disk); the caller renames it."""
    if root is not None:
        refuse_linked_folder(path.parent, Path(root))
    check_held_folder(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        with deferred_interrupts():  # an interrupt lands once the clean-up below knows the staged name
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=STAGING_SUFFIX, dir=path.parent)
            tmp, fh = Path(name), os.fdopen(fd, "wb")
        with fh:
            os.fchmod(fh.fileno(), _mode())
            if writer is not None:
                writer(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if not isinstance(exc, KeyboardInterrupt) and isinstance(exc.__context__, KeyboardInterrupt):
            # an interrupt masked by the writer's own clean-up failing (torch.save's zip writer)
            raise exc.__context__ from None
        raise
    return tmp


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a run (Ctrl-C, `kill PID`, a closed terminal); `catch_stop_signals` handles each the
same way: one `error: interrupted` line on stderr and exit status 130."""

STAGING_SUFFIX = ".mechmem.tmp"
"""The end of every name a file or folder is staged under (`atomic_write`, `OutputSet`), so that what a killed
writer left is told apart from anyone else's file."""
MOVED_ASIDE_SUFFIX = ".mechmem.old"
"""The end of the name an old file is moved aside to while `OutputSet` renames the new set into place."""

_WRITERS = [0]
"""How many of this module's writers (`output_dir`, `OutputSet`, `atomic_write`) are running now."""


@contextmanager
def _writing() -> Iterator[None]:
    _WRITERS[0] += 1
    try:
        yield
    finally:
        _WRITERS[0] -= 1


def writing() -> bool:
    """True while an output folder is held or a file is staged or renamed (`output_dir`, `OutputSet`,
    `atomic_write`): a stop signal must then unwind through their clean-up."""
    return _WRITERS[0] > 0


def catch_stop_signals() -> None:
    """Make each of `STOP_SIGNALS` stop the process in one line, whenever it comes (main thread only; a signal
    the parent ignores, as under `nohup`, stays ignored). Every entry point calls this first.

    The signal becomes a `KeyboardInterrupt` (`run_script` turns it into `error: interrupted`, exit
    status 130; a writer's clean-up runs, a training keeps what it saved), except inside an import, where an
    interrupt can break the module half-way and fail in unrelated ways (an ImportError, a RecursionError, or
    the interrupt caught by the library being imported, the run going on): there, while nothing is written
    (`writing()` False: start-up's heavy imports) the process ends at once (stdout flushed, the same line,
    130, nothing to undo); while a writer runs, the interrupt is raised once the import has finished.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_stop_signal)


def _on_stop_signal(signum: int, frame: Any) -> None:
    if not _importing(frame):
        raise KeyboardInterrupt
    if not writing():
        end_interrupted()
    again = threading.Timer(0.05, os.kill, (os.getpid(), signum))  # ask again once the import is done
    again.daemon = True
    again.start()


def _importing(frame: Any) -> bool:
    """True when `frame` or a frame that called it runs Python's import machinery."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def end_interrupted() -> None:
    """End the process now: stdout flushed, one `error: interrupted` line on stderr, exit status 130."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a stream closed, or interrupted inside its own write
            stream.flush()
    with suppress(OSError):
        os.write(2, b"error: interrupted\n")
    os._exit(130)


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold the `STOP_SIGNALS` back while the block runs (a few renames), then deliver the first one; off the
    main thread, no-op."""
    got: list[Any] = []
    previous: dict[int, Any] = {}
    try:
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, lambda *a: got.append(a))
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if got:
            sig, handler = got[0][0], previous[got[0][0]]
            if callable(handler):
                handler(*got[0])
            elif handler == signal.SIG_DFL and sig == signal.SIGINT:
                raise KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), sig)


class OutputSet:
    """Files that appear together in `out`: staged on `add`, renamed into place when the `with` block ends.

    The folder holds either the whole new set or the whole old one; a block that fails removes every staged
    file.
    """

    def __init__(self, out: str | os.PathLike) -> None:
        self.out = Path(out)
        self.staged: list[tuple[Path, Path]] = []

    def __enter__(self) -> "OutputSet":  # noqa: PYI034 - typing.Self needs Python 3.11; 3.10 is supported
        _WRITERS[0] += 1
        return self

    def add(self, name: str, data: bytes | str | None = None, *, writer: Any = None) -> Path:
        """Stage file `name` (bytes, text, or what `writer(binary file)` writes); returns its final path."""
        path = self.out / name
        self.staged.append((_stage(path, data, writer, self.out), path))
        return path

    def add_dir(self, name: str, files: dict[str, bytes]) -> Path:
        """Stage folder `name` holding `files` (name -> bytes); it replaces an old folder (or link) `name`."""
        target = self.out / name
        refuse_linked_folder(target.parent, self.out)
        target.parent.mkdir(parents=True, exist_ok=True)
        with deferred_interrupts():  # an interrupt lands once the staged folder is listed for `_discard`
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=STAGING_SUFFIX, dir=target.parent))
            self.staged.append((tmp, target))
        os.chmod(tmp, _mode(0o777))
        for file_name, data in files.items():
            atomic_write(tmp / file_name, data)
        return target

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        try:
            if kind is not None:
                self._discard()
                return
            with deferred_interrupts():
                self._commit()
        finally:
            _WRITERS[0] -= 1

    def _commit(self) -> None:
        moved: list[tuple[Path, Path | None]] = []  # (target, where its old version went)
        try:
            check_held_folder(self.out / ".")
            for tmp, target in self.staged:
                old = None
                if target.is_symlink() or target.exists():
                    old = target.with_name(f".{target.name}.{os.getpid()}{MOVED_ASIDE_SUFFIX}")
                    os.replace(target, old)
                moved.append((target, old))
                os.replace(tmp, target)
        except BaseException:
            for target, old in reversed(moved):  # put the old set back
                _remove(target)
                if old is not None:
                    os.replace(old, target)
            self._discard()
            raise
        for _, old in moved:
            if old is not None:
                _remove(old)

    def _discard(self) -> None:
        for tmp, _ in self.staged:
            _remove(tmp)


def _remove(path: Path) -> None:
    """Remove a file, a link (never followed) or a folder with its contents; a missing path is no error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def output_dir(out: str | os.PathLike, *, lock: bool = True) -> Iterator[Path]:
    """Create `out` (and missing parents) and hold `out/.lock` while the block writes into it.

    A second writer stops with the holder's pid. Once the lock is held, what a killed writer left staged in
    `out` is removed (`remove_staged`). On failure the empty folders this call created are removed.
    """
    out = Path(out)
    created = []
    probe = out
    while not probe.exists() and not probe.is_symlink():
        created.append(probe)
        probe = probe.parent
    try:
        with _writing():
            out.mkdir(parents=True, exist_ok=True)
            with _locked(out) if lock else nullcontext():
                if lock:
                    remove_staged(out)
                yield out
    except BaseException:
        for folder in created:  # innermost first
            try:
                folder.rmdir()
            except OSError:
                break
        raise


STAGED = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(STAGING_SUFFIX))
"""The names this module stages under (`tempfile`'s 8 random characters): `.report.md.k3j9x_2a.mechmem.tmp`
beside report.md, a folder `.figures.k3j9x_2a.mechmem.tmp/` beside figures/."""
MOVED_ASIDE = re.compile(r"\.(.+)\.[0-9]+" + re.escape(MOVED_ASIDE_SUFFIX))
"""The name of an old file moved aside while `OutputSet` renames the new set into place
(`.report.md.PID.mechmem.old`)."""
STAGED_DEPTH = 2
"""How far below a held folder `remove_staged` looks: writers stage at most two folders down
(`checkpoints/step_N.pt`, `analysis/NAME/x.json`)."""


def remove_staged(out: str | os.PathLike, depth: int = STAGED_DEPTH) -> list[Path]:
    """Remove what a killed writer left staged in `out` and its subfolders down to `depth`; returns what was
    removed.

    Only plain files and folders named like this module's staging (`STAGED`) go; an old file moved aside by
    an unfinished `OutputSet` (`MOVED_ASIDE`) goes back to its name when that name is free (else it goes
    too). Links are never followed or removed, other names are never touched, and a subfolder holding a
    `.lock` is another writer's folder, left to it. Call it holding `out`'s lock (`output_dir` does).
    """
    removed = []
    with os.scandir(out) as entries:
        entries = list(entries)
    for entry in entries:
        path, is_dir = Path(entry.path), entry.is_dir(follow_symlinks=False)
        if not is_dir and not entry.is_file(follow_symlinks=False):
            continue  # a link, FIFO or socket: not ours
        old = MOVED_ASIDE.fullmatch(entry.name)
        if STAGED.fullmatch(entry.name) or old:
            target = path.with_name(old[1]) if old else None
            if target is not None and not (target.is_symlink() or target.exists()):
                os.replace(path, target)
            else:
                _remove(path)
                removed.append(path)
        elif is_dir and depth > 0 and not (path / LOCK).exists() and not (path / LOCK).is_symlink():
            removed += remove_staged(path, depth - 1)
    return removed


@contextmanager
def _locked(out: Path) -> Iterator[None]:
    path = out / LOCK
    while True:
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise MechmemError(
                f"{out} is being written by another process (pid {holder}); wait or use another --out"
            ) from None
        with suppress(FileNotFoundError):  # the holder before us may have removed the file after we opened it
            if os.path.samestat(os.fstat(fd), os.lstat(path)):  # we lock the file at the path
                break
        os.close(fd)
    if os.fstat(fd).st_nlink != 1:  # a hard link to another file would carry our pid there
        os.close(fd)
        raise MechmemError(f"{path} is a hard link to another file; refusing to write it (remove it first)")
    root = Path(os.path.abspath(out))
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[root] = os.lstat(root)
        yield
    finally:
        _HELD.pop(root, None)
        with suppress(FileNotFoundError):  # only the lock file we hold: the folder may have moved since
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
                os.unlink(path)
        os.close(fd)  # closing releases the lock (so does the process ending, kill -9 included)


def describe_os_error(exc: OSError) -> str:
    """One line for an error the machine caused: "cannot write runs/x/a.json: no space left on device"."""
    reason = os.strerror(exc.errno).lower() if exc.errno else (str(exc) or type(exc).__name__)
    return f"{exc.filename}: {reason}" if exc.filename else reason
