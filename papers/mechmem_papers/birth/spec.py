"""The birth reproduction's spec: its variants (one `Scale` each), its `--set` options and `make_spec`.

    python analyses/reproduce.py birth --variant quick --set only=freezing,ffn --set preset=0

Every option is a field of `BirthSpec`, parsed by `mechmem.config.apply_options`.
"""

from dataclasses import dataclass, replace
from pathlib import Path

from mechmem.config import apply_options
from mechmem.errors import MechmemError
from mechmem_papers.birth.experiments import SCALES, Scale
from mechmem_papers.executor import check_executor

VARIANTS = ("quick", "default", "paper")
"""quick: CPU minutes per run; default: the sizes of the task's `quick` preset; paper: the published sizes."""
GROUPS = ("freezing", "ffn", "data", "depth")
OPTIONS = {
    "runs": "directory of the runs (default runs/birth_repro/VARIANT; finished runs are reused)",
    "only": "comma-separated experiments to run: freezing, ffn, data, depth (default: all)",
    "seed": "seed of every run (default 0)",
    "corpus": "text corpus or statistics JSON (default: the shipped tiny Shakespeare counts)",
    "preset": "1: also train the task's `quick` preset and detect its heads (default 1)",
    "speed": "1: measure data-generation speed (default 1)",
    "references": "folder of birth_authors_code.json and the scale ladder (default docs/reproductions/data)",
    "threads": "torch CPU threads (default 1)",
    "executor": "where the runs train: local (this process) or ray (one Ray task per run; default local)",
    "address": "Ray cluster to join (auto or host:port; `runs` must be a shared folder); default: local",
    "workers": "runs at once on a local Ray instance (default 2)",
}


@dataclass(frozen=True)
class BirthSpec:
    """One reproduction: which runs, at which scale, and what else the record includes."""

    variant: str
    """Name of the scale ("quick", "default", "paper")."""
    scale: Scale
    """Sizes of every run."""
    runs: Path
    """Directory holding one sub-directory per run."""
    only: tuple[str, ...] = GROUPS
    """Experiments to run (the others are recorded as not run)."""
    seed: int = 0
    """Seed of every run, of the held-out data and of the sampled sequences."""
    corpus: str | None = None
    """Corpus statistics of the runs (None: tiny Shakespeare)."""
    preset: bool = True
    """Train (or reuse) the `quick` preset run; record its metrics, head scores and attention maps."""
    speed: bool = True
    """Measure data-generation speed."""
    references: Path = Path("docs/reproductions/data")
    """Folder of the published-values and authors'-code data files."""
    threads: int = 1
    """torch CPU threads."""
    executor: str = "local"
    """Where the runs train: local or ray (`mechmem_papers.executor`)."""
    address: str = ""
    """Ray cluster to join; empty: a local instance."""
    workers: int = 2
    """Runs at once on a local Ray instance."""
    command: str = ""
    """The command line that reproduces this spec."""


def _groups(text: str) -> tuple[str, ...]:
    only = tuple(g for g in text.split(",") if g)
    if not only or set(only) - set(GROUPS):
        raise MechmemError(f"only={text!r}: experiments are {', '.join(GROUPS)}")
    return only


def make_spec(variant: str, options: dict[str, str]) -> BirthSpec:
    """The spec of `variant` with `options` (see `OPTIONS`; read by `config.apply_options`); unknown names and
    bad values raise `MechmemError`."""
    if variant not in SCALES:
        raise MechmemError(f"unknown variant {variant!r} (known: {', '.join(SCALES)})")
    base = BirthSpec(variant=variant, scale=SCALES[variant], runs=Path(f"runs/birth_repro/{variant}"))
    spec = apply_options(base, options, OPTIONS, {"only": _groups})
    check_executor(spec.executor, spec.address or None)
    command = " ".join(
        [f"python analyses/reproduce.py birth --variant {variant}"]
        + [f"--set {k}={v}" for k, v in options.items()]
    )
    return replace(spec, command=command)
