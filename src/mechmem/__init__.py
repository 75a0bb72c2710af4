"""mechmem: tiny transformers trained on synthetic memory tasks, taken apart with TransformerLens hooks."""

__version__ = "0.1.0"

from mechmem.errors import CheckpointError, MechmemError

__all__ = ["CheckpointError", "MechmemError", "__version__"]
