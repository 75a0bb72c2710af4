"""Build step only (the project is declared in pyproject.toml): the wheel ships `examples/` and `analyses/`
as package data under `mechmem/bundled/`, which `mechmem examples DIR` copies out."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = {"examples": ("*.py", "*.ipynb"), "analyses": ("*.py",)}
"""Folders of the checkout put into the wheel, and their files (as `mechmem.cli.examples.FOLDERS`)."""


class BuildWithExamples(build_py):
    """`build_py`, then the bundled folders copied into the built package."""

    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for folder, patterns in BUNDLED.items():
            target = Path(self.build_lib) / "mechmem" / "bundled" / folder
            self.mkpath(str(target))
            for pattern in patterns:
                for source in sorted((root / folder).glob(pattern)):
                    self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildWithExamples})
