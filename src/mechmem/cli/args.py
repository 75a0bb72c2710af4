"""Command-line arguments: the parser with one-line errors, range-checked argument types, the flags every
analysis command shares and the names the analysis flags accept.

Nothing here imports torch, so `--help` and usage errors answer at once. Each name list below is the one its
analysis module offers (a test checks them).
"""

import argparse
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from mechmem.config import TrainIntervention
from mechmem.errors import MechmemError

ABLATION_METHODS = ("zero", "mean", "resample")
"""What an ablated head's output z is set to (`mechmem ablate --methods`)."""
CIRCUIT_ABLATIONS = ("corrupted", "mean", "zero")
"""What an ablated edge carries (`mechmem circuit --ablation`)."""
PATCH_DIRECTIONS = ("denoising", "noising")
"""Clean into corrupted, or corrupted into clean (`mechmem patch --direction`)."""
PATCH_METHODS = ("exact", "attribution")
"""Exact patching or its first-order estimate (`mechmem patch --method`)."""
PATCH_SWEEPS = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "attn_head_out_all_pos",
    "attn_head_out_by_pos",
    "attn_head_pattern_all_pos",
    "attn_head_pattern_by_pos",
)
"""The activation patching sweeps (`mechmem patch --sweeps`)."""
DYNAMICS_QUANTITIES = (
    "loss",
    "heads",
    "probes",
    "lens",
    "ablation",
    "patching",
    "composition",
    "circuit",
    "roles",
)
"""What `mechmem dynamics --quantities` can measure over a run's step checkpoints."""


class UsageError(MechmemError):
    """A command-line error: unknown flag, missing argument, value of the wrong type or out of range."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors raise `UsageError` (one line, exit 2 under `run_script`)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


# -- argument types (argparse turns their ArgumentTypeError into "argument --x: ...") ------------------------
def seed_int(text: str) -> int:
    """A seed: an integer in [0, 2**63) (what torch.Generator.manual_seed accepts)."""
    value = _parse(int, text, "an integer")
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"seed {text} is outside [0, 2**63)")
    return value


def device_name(text: str) -> str:
    """A `--device`: auto, cpu, cuda or cuda:N (whether this machine has it is checked once torch is
    imported, before any loading: `mechmem.config.resolve_device`)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"unknown device {text!r} (use auto, cpu, cuda or cuda:N)")
    return text


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
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} must be at least {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} is more than {high}, the largest value it takes")
        return value

    return parse


positive_int = int_range(1)
"""An integer >= 1."""
MAX_SAMPLES = 2**20
"""Most sequences a sample-count flag takes (about a million); the memory estimate of the loaded model
(`mechmem.models.checks.check_n_samples`) bounds it further."""
sample_count = int_range(1, MAX_SAMPLES)
"""A number of sampled sequences in [1, `MAX_SAMPLES`]."""
MAX_STEPS = 10**9
"""Most training steps a step flag takes."""
step_count = int_range(0, MAX_STEPS)
"""A number of training steps (or a step) in [0, `MAX_STEPS`]."""


def share(text: str) -> float:
    """A share of a whole: a number in (0, 1]."""
    value = _parse(float, text, "a number")
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"{text} is outside (0, 1]")
    return value


def intervention_spec(text: str) -> str:
    """A training intervention, L<l>H<h>=OP, HOOK=OP or HOOK[i]=OP (OP zero or mean), as its canonical
    spec string; whether the model has that hook is checked once the model is built."""
    try:
        spec = TrainIntervention.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if spec.op.startswith("fn:"):
        raise argparse.ArgumentTypeError(f"{text!r}: a function intervention is for the library only")
    return str(spec)


def input_path(text: str) -> str:
    """A file or folder that exists (a checkpoint, a run directory, a corpus); checked while parsing."""
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


# -- the shared flags ----------------------------------------------------------------------------------------
def add_analysis_args(
    parser: argparse.ArgumentParser, *, n_samples: int | None = 512
) -> argparse.ArgumentParser:
    """Arguments every analysis shares: CKPT (or --hf NAME_OR_PATH), --out, --device, --seed, --n-samples,
    --threads, --task-module, --allow-nonfinite."""
    parser.add_argument(
        "ckpt",
        metavar="CKPT",
        nargs="?",
        default=None,
        type=input_path,
        help="checkpoint file (or a run directory holding ckpt.pt)",
    )
    parser.add_argument(
        "--hf",
        default=None,
        metavar="NAME_OR_PATH",
        help="analyse a Hugging Face causal LM (Hub name or save_pretrained folder) instead of CKPT",
    )
    parser.add_argument("--out", default=None, help="output directory (default: beside the checkpoint)")
    parser.add_argument("--device", type=device_name, default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument(
        "--seed", type=seed_int, default=0, help="seed for sampled inputs, in [0, 2**63) (default: 0)"
    )
    parser.add_argument(
        "--n-samples",
        type=sample_count,
        default=n_samples,
        help=f"number of sampled sequences, in [1, {MAX_SAMPLES}] (default: "
        f"{n_samples or 'each analysis its own'}; bounded by a memory estimate)",
    )
    add_threads_flag(parser)
    add_task_module_arg(parser)
    add_nonfinite_flag(parser)
    return parser


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """--threads N: torch CPU threads (default: the free CPUs, `mechmem.threads.choose_threads`)."""
    parser.add_argument(
        "--threads",
        type=thread_count,
        default=None,
        help="torch CPU threads, in [1, 4 x the CPUs] (default: $MECHMEM_THREADS, else the CPUs this process "
        "may use less the machine's load, at least 1)",
    )


def analysis_parser(prog: str | None, doc: str, *, n_samples: int | None) -> ArgumentParser:
    """An analysis command's parser: the first line of `doc` describes it; the shared `add_analysis_args`."""
    parser = ArgumentParser(prog=prog, description=doc.split("\n")[0])
    add_analysis_args(parser, n_samples=n_samples)
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
        help="analyse weights holding NaN or inf, or so large that the forward pass overflows, anyway "
        "(default: stop with one line naming them)",
    )


MAX_MEMORY_MB = 2**30
"""Largest memory budget a flag takes (2**30 MB, an exabyte): beyond it the sizes it sets overflow."""


def memory_mb(text: str) -> float:
    """A memory budget in MB: a finite number in [1, `MAX_MEMORY_MB`]."""
    value = _parse(float, text, "a number")
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of MB >= 1")
    if value > MAX_MEMORY_MB:
        raise argparse.ArgumentTypeError(f"{text} MB is more than the {MAX_MEMORY_MB} MB a budget may be")
    return value


def add_memory_flag(parser: argparse.ArgumentParser) -> None:
    """--memory-mb MB: the budget of the batched passes and cached runs (their peak memory follows it)."""
    parser.add_argument(
        "--memory-mb",
        type=memory_mb,
        default=256.0,
        help="memory budget in MB of the batched passes and cached runs of patching and circuits, a finite "
        "number >= 1 (default 256; the peak memory follows it, the time grows as it shrinks)",
    )


def thread_count(text: str) -> int:
    """A number of CPU threads in [1, 4 x the CPUs here] (more only exhausts memory on thread stacks)."""
    value = positive_int(text)
    most = 4 * (os.cpu_count() or 1)
    if value > most:
        raise argparse.ArgumentTypeError(f"{text} is outside [1, {most}] (4 x this machine's CPUs)")
    return value


def parse_quantities(text: str) -> tuple[str, ...]:
    """'heads,probes' -> ('heads', 'probes'); 'all' is every quantity; unknown names are a one-line error."""
    names = (
        DYNAMICS_QUANTITIES
        if text.strip() == "all"
        else tuple(n.strip() for n in text.split(",") if n.strip())
    )
    unknown = [n for n in names if n not in DYNAMICS_QUANTITIES]
    if unknown or not names:
        raise MechmemError(
            f"unknown quantities {unknown or [text]} (choose from {', '.join(DYNAMICS_QUANTITIES)} or all)"
        )
    return names
