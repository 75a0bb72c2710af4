"""The memorisation reproduction's spec: its variants, the experiments each runs, and `make_spec`.

    python analyses/reproduce.py memorisation --variant table --set max_epochs=150 --set patience=50

Every option is a field of `MemorisationSpec`, parsed by `mechmem.config.apply_options`.
"""

from dataclasses import dataclass, fields, replace

from mechmem.config import apply_options
from mechmem.errors import MechmemError
from mechmem_papers.executor import check_executor
from mechmem_papers.memorisation.constructions.evaluators import EVALUATORS

VARIANTS = ("committed", "quick", "table", "scaling", "constructions", "paper")
RUNS = {
    "committed": (),
    "quick": ("table", "scaling", "constructions"),
    "table": ("table",),
    "scaling": ("scaling",),
    "constructions": ("constructions",),
    "paper": ("table", "scaling"),
}


@dataclass(frozen=True)
class MemorisationSpec:
    """What one reproduction run does; options from `--set key=value` override these fields."""

    variant: str = "committed"
    """One of VARIANTS: which experiments run before the record is collected."""
    data: str = "docs/reproductions/data"
    """Folder of the sweep and constructions files (read and appended to)."""
    max_epochs: int = 150
    """Sweep schedule: epochs per lr phase (published 50,000)."""
    patience: int = 50
    """Sweep schedule: epochs without improvement (published 5,000)."""
    grow_epochs: bool = False
    """Scaling: multiply the epoch cap by d / 16 at each d (the authors' E7: 50,000 x 1, 2, 4, 8)."""
    repeats: int = 1
    """Sweep repeats (fresh init seeds each; published 4)."""
    d: int = 16
    """Width of the 54-variant table (n_in = 2d)."""
    ds: tuple[int, ...] = (16, 32)
    """Scaling widths, and the constructions' widths."""
    modes: tuple[str, ...] = tuple(EVALUATORS)
    """Constructions modes to (re)compute."""
    tag: str = "full"
    """Constructions files: full or quick (small grids)."""
    device: str = "cpu"
    """Torch device for the sweeps (cpu, cuda, auto), resolved where each cell runs."""
    facts_device: str = "cpu"
    """Device of the facts' permutation (the published runs drew it on cuda: another fact set)."""
    executor: str = "local"
    """Where sweep cells run: local (this process) or ray (`mechmem_papers.executor`)."""
    address: str = ""
    """Ray cluster to join (auto or host:port); empty: a local Ray instance."""


def make_spec(variant: str, options: dict[str, str]) -> MemorisationSpec:
    """The spec of a variant, with options applied (unknown variant or option: `MechmemError`)."""
    if variant not in VARIANTS:
        raise MechmemError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    base = MemorisationSpec(variant=variant)
    if variant == "quick":
        base = replace(
            base, data="runs/memorisation_quick", max_epochs=60, patience=20, d=4, ds=(8, 16), tag="quick"
        )
    elif variant == "paper":
        base = replace(
            base,
            max_epochs=50_000,
            patience=5_000,
            grow_epochs=True,
            repeats=4,
            ds=(16, 32, 64, 128),
            device="auto",
        )
    names = [f.name for f in fields(base) if f.name != "variant"]
    out = apply_options(base, options, names)
    unknown_modes = [m for m in out.modes if m not in EVALUATORS]
    if unknown_modes:
        raise MechmemError(f"unknown mode {unknown_modes[0]!r} (known: {', '.join(EVALUATORS)})")
    check_executor(out.executor, out.address or None)
    return out
