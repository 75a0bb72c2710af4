"""The permutation reproduction's spec: its variants, its `--set` options and their parsers, and `make_spec`.

    python analyses/reproduce.py permutation --variant quick --set workers=2 --set task1_seeds=0,1

The `run` module holds the spec dataclass, `ReproConfig`, beside the experiments that read it.
"""

from mechmem.config import apply_options
from mechmem.errors import MechmemError
from mechmem.tasks.permutation import SCALE_PRESET_NAMES
from mechmem_papers.executor import check_executor
from mechmem_papers.permutation.run import ReproConfig

VARIANTS = ("full", "quick", "paper")
"""full: 5 seeds per CPU model (the default); quick: 2 Task 1 and 3 Task 2 seeds; paper: the published
schedules."""


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise MechmemError(f"seeds must be comma-separated integers, got {text!r}") from None
    if not seeds:
        raise MechmemError("give at least one seed")
    return seeds


def _workers(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise MechmemError(f"workers must be a positive integer, got {text!r}")
    return int(text)


def _scale_presets(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")
    unknown = [n for n in names if n not in SCALE_PRESET_NAMES]
    if unknown:
        raise MechmemError(
            f"unknown scale preset {unknown[0]!r} (known: {', '.join(SCALE_PRESET_NAMES)}, none)"
        )
    return names


def _device(text: str) -> str:
    if text not in ("cpu", "cuda"):
        raise MechmemError(f"device must be cpu or cuda, got {text!r}")
    return text


def _executor(text: str) -> str:
    check_executor(text)
    return text


OPTIONS = {
    "runs": str,
    "workers": _workers,
    "device": _device,
    "task1_seeds": _seeds,
    "task2_seeds": _seeds,
    "executor": _executor,
    "address": str,
    "scale_presets": _scale_presets,
}
"""`--set` options and their parsers."""


def make_spec(variant: str, options: dict[str, str]) -> ReproConfig:
    """The `ReproConfig` of a variant, with `--set` options (runs=DIR, workers=N, device=cpu|cuda,
    task1_seeds=0,1,2, task2_seeds=0,1,2, executor=local|ray, address=auto|HOST:PORT,
    scale_presets=v10-quick,v15-quick or none) applied by `config.apply_options`; unknown variants
    and options, and a bad executor or address, raise `MechmemError`."""
    if variant not in VARIANTS:
        raise MechmemError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    kind = "paper" if variant == "paper" else "quick"
    few = variant == "quick"
    base = ReproConfig(
        task1_preset=f"task1-{kind}",
        task2_preset=f"task2-{kind}",
        task1_seeds=(0, 1) if few else (0, 1, 2, 3, 4),
        task2_seeds=(0, 1, 2) if few else (0, 1, 2, 3, 4),
        scale_presets=(f"v10-{kind}", f"v15-{kind}"),
        variant=variant,
    )
    spec = apply_options(base, options, OPTIONS, OPTIONS)
    check_executor(spec.executor, spec.address or None)
    return spec
