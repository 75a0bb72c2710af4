"""Shared plumbing for the scripts in `analyses/`.

Every script has `def main(argv: list[str] | None = None) -> int` and ends with
`raise SystemExit(run_script(main))`. Errors a user can cause (`MechmemError`, including `CheckpointError`,
and command-line errors from `ArgumentParser`) become one `error: ...` line on stderr and exit status 2;
errors of the machine (`OSError`: a full disk) exit 1 and an interrupt 130, also in one line; the output
folder is left as it was. The contract, as helpers a script calls:

    parser = ArgumentParser(description=...)            # usage errors: one line, exit 2
    add_analysis_args(parser)                           # CKPT, --out, --device, --seed, --n-samples, ...
    parser.add_argument("--top-k", type=int_range(1))   # every number is range-checked by its type
    args = parser.parse_args(argv)                      # no torch yet: --help and usage errors answer at once
    ckpt, out = load_for_analysis(args)                 # checks --out, then loads task modules, checkpoint,
                                                        # the task against the model, finite weights
    from mechmem.analysis.x import ...                  # heavy imports after the checks (a fast start)
    check_out_dir(path); claim_out(path)                # before any work: usable; then created and locked
    return skip(reason, out / "x.json")                 # does not apply: `skipped: REASON`, exit 0
    write_outputs(out, {"x.json": obj, "x.png": fig})   # staged, then renamed together (mechmem.io)

This module imports nothing heavy (argparse and the standard library; torch only inside the functions that
load), so a script's parser, built from it and from light name lists (`mechmem.analysis.options`), answers
before torch or TransformerLens is imported (docs/analyses.md, "Start-up").

Strict JSON: every JSON file mechmem writes is valid JSON (RFC 8259); non-finite floats become `null`. The
JSON writers live in `mechmem.io` (below checkpoints and training, which write JSON too) and `one_line` in
`mechmem.errors`; both are re-exported here for the scripts.

Long because it is the one set of conventions every script shares: the common flags with their valid ranges,
one-line errors and interrupts, the output folder's lock, and loading a checkpoint or a Hugging Face model.
"""

import argparse
import math
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NoReturn

from mechmem.errors import MechmemError, one_line
from mechmem.io import OutputSet, atomic_write, describe_os_error, dumps, output_dir, strict_json, write_json

MEMORY_BUDGET_MB = 8192.0
"""Largest activation memory an analysis may plan for; --n-samples above the matching bound is refused."""


class UsageError(MechmemError):
    """A command-line error: unknown flag, missing argument, value of the wrong type or out of range."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: a usage error raises `UsageError` (one line, exit 2 under
    `run_script`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def run_script(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Run a script's `main`; every error a user or the machine causes ends in one `error:` line on stderr.

    `MechmemError` (bad input) exits 2, `OSError` (a full disk, a read-only file) 1, an interrupt 130. The
    output folders the script claimed (`claim_out`) are unlocked when it ends and removed when it failed in a
    folder it created. Run as a program (`argv` None), a Ctrl-C while the interpreter shuts down is ignored.
    """
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
            signal.signal(signal.SIGINT, signal.SIG_IGN)


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

    Under `run_script` a second writer to the same folder is refused, and a folder created here is removed
    again when the script fails. Outside `run_script` (a library call) the folder is only created.
    """
    path = Path(path)
    if _CLAIMS:
        return _CLAIMS[-1].enter_context(output_dir(path))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _interrupt_hook(kind: type, value: BaseException, tb: Any) -> None:
    """An interrupt while a script still imports (before `run_script` runs) is one line, not a traceback."""
    if issubclass(kind, KeyboardInterrupt):
        print("error: interrupted", file=sys.stderr)
        return
    _previous_hook(kind, value, tb)


_previous_hook = sys.excepthook
sys.excepthook = _interrupt_hook


# -- argument types (argparse turns their ArgumentTypeError into "argument --x: ...") ------------------------
def seed_int(text: str) -> int:
    """A seed: an integer in [0, 2**63) (what torch.Generator.manual_seed accepts)."""
    value = _parse(int, text, "an integer")
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed {text} is outside [0, 2**63)")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _parse(int, text, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = _parse(int, text, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (nan, inf, 0 and negatives are refused)."""
    value = _parse(float, text, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


def positive_int_list(text: str) -> list[int]:
    """Comma-separated integers >= 1, e.g. 4,8,16 (empty items are skipped; at least one is needed)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r} names no integer")
    return [positive_int(item) for item in items]


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (high None: no upper bound); the range is in the error."""

    def parse(text: str) -> int:
        value = _parse(int, text, "an integer")
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(
                f"{text} is outside [{low}, {high}]" if high is not None else f"{text} must be at least {low}"
            )
        return value

    return parse


def input_path(text: str) -> str:
    """A file or folder that exists (a checkpoint, a run directory, a corpus); checked while parsing, before
    anything heavy is imported."""
    if not Path(text).exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


def input_file(text: str) -> str:
    """A file that exists (a task module, a rules file)."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(
            f"{text}: no such file" if not Path(text).exists() else f"{text}: not a file"
        )
    return text


def _parse(kind: type, text: str, what: str) -> Any:
    try:
        return kind(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


# -- checks that run before any work -------------------------------------------------------------------------
def check_out_dir(path: str | os.PathLike, *, flag: str = "--out") -> Path:
    """Refuse an output directory that names a file or cannot be created/written; creates nothing."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MechmemError(f"{flag} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise MechmemError(f"{flag} {path}: {probe} is a file, not a directory")
    try:  # os.access alone is not enough (root, read-only file systems): try to create a file
        if not os.access(probe, os.W_OK | os.X_OK):
            raise PermissionError
        fd, tmp = tempfile.mkstemp(prefix=".mechmem-write-test.", dir=probe)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        reason = "permission denied on" if isinstance(exc, PermissionError) else "cannot create a file in"
        raise MechmemError(f"{flag} {path}: not writable ({reason} {probe})") from None
    return path


def estimate_mb_per_sequence(model: Any) -> float:
    """Rough activation memory (MB, float32) of one sequence through `model` with a full cache.

    Counts per position: every layer's attention pattern and scores (2 n_heads n_ctx), residual, attention and
    MLP activations (6 d_model + 2 d_mlp), and the logits with their softmax (2 d_vocab_out).
    """
    cfg = getattr(model, "cfg", None)
    get = lambda name, default: int(getattr(cfg, name, None) or default)
    n_ctx, layers = get("n_ctx", 64), get("n_layers", 1)
    per_pos = layers * (2 * get("n_heads", 1) * n_ctx + 6 * get("d_model", 64) + 2 * get("d_mlp", 0))
    per_pos += 2 * get("d_vocab_out", get("d_vocab", 64))
    return n_ctx * per_pos * 4 / 2**20


def check_n_samples(
    n: int, model: Any, *, minimum: int = 1, budget_mb: float = MEMORY_BUDGET_MB, flag: str = "--n-samples"
) -> int:
    """Refuse `n` below `minimum` or above what `budget_mb` allows for `model` (the bound is in the
    message)."""
    if n < minimum:
        raise MechmemError(f"{flag} must be at least {minimum}, got {n}")
    per_seq = estimate_mb_per_sequence(model)
    bound = max(minimum, int(budget_mb / per_seq))
    if n > bound:
        raise MechmemError(
            f"{flag} {n} needs about {n * per_seq:.0f} MB for this model; the bound is {bound} "
            f"({budget_mb:.0f} MB at {per_seq * 1024:.1f} KB per sequence)"
        )
    return n


# -- loading -------------------------------------------------------------------------------------------------
def add_analysis_args(parser: argparse.ArgumentParser, *, n_samples: int = 512) -> argparse.ArgumentParser:
    """The arguments every analysis script shares: CKPT, --out, --device, --seed, --n-samples,
    --task-module."""
    parser.add_argument(
        "ckpt",
        metavar="CKPT",
        nargs="?",
        default=None,
        type=input_path,
        help="checkpoint file (or a run directory holding ckpt.pt)",
    )
    add_hf_arg(parser)
    parser.add_argument("--out", default=None, help="output directory (default: beside the checkpoint)")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument(
        "--seed", type=seed_int, default=0, help="seed for sampled inputs, in [0, 2**63) (default: 0)"
    )
    parser.add_argument(
        "--n-samples",
        type=positive_int,
        default=n_samples,
        help=f"number of sampled sequences, at least 1 (default: {n_samples}; bounded by a memory estimate)",
    )
    add_task_module_arg(parser)
    add_nonfinite_flag(parser)
    return parser


def add_task_module_arg(parser: argparse.ArgumentParser) -> None:
    """--task-module FILE (repeatable): a Python file that registers the user's own tasks."""
    parser.add_argument(
        "--task-module",
        action="append",
        default=[],
        metavar="FILE",
        type=input_file,
        help="a Python file that registers your own task (with mechmem.tasks.register_task); repeatable",
    )


def add_nonfinite_flag(parser: argparse.ArgumentParser) -> None:
    """--allow-nonfinite: analyse a checkpoint with NaN or infinite weights instead of stopping."""
    parser.add_argument(
        "--allow-nonfinite",
        action="store_true",
        help="analyse weights holding NaN or inf anyway (default: stop with one line naming them)",
    )


def check_finite_weights(model: Any, *, allow: bool = False, what: str = "the checkpoint") -> None:
    """Raise `MechmemError` naming the weights that hold NaN or inf (a blown-up run), unless `allow`.

    Buffers that are infinite by design (TransformerLens's attention mask constant `IGNORE`) are not weights.
    """
    import torch

    from mechmem.models.adapter import canonical_parameters  # weights under their canonical names

    bad = [
        name
        for name, tensor in canonical_parameters(model).items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad and not allow:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise MechmemError(
            f"{what}: weights hold NaN or inf ({shown}); every result would be meaningless "
            "(--allow-nonfinite analyses them anyway)"
        )


def skip(reason: str, path: str | os.PathLike, record: dict[str, Any] | None = None) -> int:
    """An analysis that does not apply: print `skipped: REASON`, write `{"skipped": REASON, ...}` to `path`,
    and return exit status 0."""
    print(f"skipped: {reason}")
    write_json(path, {"skipped": reason, **(record or {})})
    return 0


def memory_mb(text: str) -> float:
    """A memory budget in MB: a finite number >= 1."""
    value = _parse(float, text, "a number")
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of MB >= 1")
    return value


def add_hf_arg(parser: argparse.ArgumentParser) -> None:
    """`--hf NAME_OR_PATH`: a Hugging Face model instead of a checkpoint (CKPT is then left out)."""
    parser.add_argument(
        "--hf",
        default=None,
        metavar="NAME_OR_PATH",
        help="analyse a Hugging Face causal LM (Hub name or save_pretrained folder) instead of CKPT",
    )


def load_source(args: argparse.Namespace, *, device: Any, load: Callable[..., Any]) -> Any:
    """The checkpoint named by CKPT, or the Hugging Face model named by --hf (exactly one of them)."""
    hf = getattr(args, "hf", None)
    if (args.ckpt is None) == (hf is None):
        raise MechmemError("give a checkpoint (CKPT) or --hf NAME_OR_PATH, not both or neither")
    if hf is None:
        return load(args.ckpt, device=device)
    from mechmem.pretrained import pretrained_checkpoint

    return pretrained_checkpoint(hf, device=device)


def load_for_analysis(args: argparse.Namespace, *, min_samples: int = 1) -> tuple[Any, Path]:
    """Check the flags, load task modules and the checkpoint named by `args.ckpt`; return it and the out dir.

    In this order, before any work: --n-samples >= `min_samples`, --out is usable (both before torch is
    imported, as are the checks of the parser's types: CKPT exists, each number in range), user task modules
    import, the checkpoint loads and its task fits its model, --n-samples fits the memory budget. Only then is
    --out created.
    """
    n = getattr(args, "n_samples", None)
    if n is not None and n < min_samples:
        raise MechmemError(f"--n-samples must be at least {min_samples}, got {n}")
    if args.out:
        check_out_dir(args.out)
    # torch and TransformerLens are imported from here on, after every check the flags alone decide
    from mechmem.checkpoint import load_checkpoint
    from mechmem.tasks import load_task_module
    from mechmem.training.trainer import resolve_device

    for module in getattr(args, "task_module", None) or []:
        load_task_module(module)
    ckpt = load_source(args, device=resolve_device(args.device), load=load_checkpoint)
    out = check_out_dir(args.out) if args.out else check_out_dir(ckpt.path.parent)
    if n is not None:
        check_n_samples(n, ckpt.model, minimum=min_samples)
    check_finite_weights(ckpt.model, allow=getattr(args, "allow_nonfinite", False), what=str(ckpt.path))
    return ckpt, claim_out(out)


# -- writing -------------------------------------------------------------------------------------------------
def figure_png(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes (and closed)."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure as PNG atomically and close it."""
    return atomic_write(path, figure_png(fig))


def write_outputs(out: str | os.PathLike, files: dict[str, Any]) -> list[Path]:
    """Write a script's outputs into `out` together (`mechmem.io.OutputSet`): a value whose name ends in .png
    is a matplotlib figure, any other is written as strict JSON. Every file is staged first and all are
    renamed into place at the end, so a failure leaves the previous outputs as they were."""
    with OutputSet(out) as staged:
        for name, value in files.items():
            staged.add(name, figure_png(value) if name.endswith(".png") else dumps(value, indent=2) + "\n")
    return [Path(out) / name for name in files]


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> str:
    """A plain-text table with right-aligned numbers."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [
        max(len(str(h)), *(len(r[i]) for r in body)) if body else len(str(h)) for i, h in enumerate(headers)
    ]
    line = "  ".join(str(h).rjust(w) for h, w in zip(headers, widths))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line, sep, *("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body)])


def print_table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *, floatfmt: str = ".4f") -> None:
    print(format_table(rows, headers, floatfmt=floatfmt))


__all__ = ["dumps", "one_line", "strict_json", "write_json"]  # re-exported: scripts use them through `cli`
