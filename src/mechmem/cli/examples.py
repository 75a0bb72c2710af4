"""Copy the example notebooks (with their scripts) and the analysis scripts out of the installed package.

    mechmem examples my-mechmem          # my-mechmem/examples/*.ipynb, *.py and my-mechmem/analyses/*.py
    cd my-mechmem && jupyter lab examples/train_and_report.ipynb     # pip install "mechmem[notebook]"

The wheel ships them as package data (`mechmem/bundled/`, put there when the wheel is built); a source
checkout uses its own `examples/` and `analyses/`. Files already in DIR are kept unless --overwrite.
"""

from pathlib import Path

from mechmem import cli
from mechmem.errors import MechmemError

FOLDERS = {"examples": ("*.py", "*.ipynb"), "analyses": ("*.py",)}
"""The folders copied out, and the files of each."""


def bundled_root() -> Path:
    """The folder holding `examples/` and `analyses/`: the wheel's `mechmem/bundled/`, or the checkout's
    root (this file is src/mechmem/cli/examples.py there)."""
    package = Path(__file__).resolve().parents[1]
    for root in (package / "bundled", package.parents[1]):
        if all((root / folder).is_dir() for folder in FOLDERS):
            return root
    raise MechmemError(f"no examples found beside {package} (the installation is incomplete)")


def bundled_files() -> list[Path]:
    """Every file copied out, relative to `bundled_root()` (examples/..., analyses/...)."""
    root = bundled_root()
    return sorted(
        path.relative_to(root)
        for folder, patterns in FOLDERS.items()
        for pattern in patterns
        for path in (root / folder).glob(pattern)
    )


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    parser = cli.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("dir", help="folder to copy into (created if missing)")
    parser.add_argument("--overwrite", action="store_true", help="replace files of the same name in DIR")
    args = parser.parse_args(argv)
    out = cli.check_out_dir(args.dir, flag="DIR")
    root, files = bundled_root(), bundled_files()
    clashes = [str(f) for f in files if (out / f).exists()]
    if clashes and not args.overwrite:
        raise MechmemError(
            f"{out} already holds {len(clashes)} of the files (e.g. {clashes[0]}); --overwrite replaces them"
        )
    from mechmem.io import atomic_write

    for f in files:
        (out / f).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out / f, (root / f).read_bytes())
    print(f"copied {len(files)} files to {out}: {', '.join(sorted(FOLDERS))}")
    print(f"next: cd {out} && jupyter lab examples/    (pip install 'mechmem[notebook]')")
    return 0
