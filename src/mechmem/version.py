"""The package version (one place; `mechmem.__version__` and checkpoints read it)."""

__version__ = "0.1.0"
