"""Model configs and builders. TransformerLens model classes are touched only in `adapter.py`."""

from mechmem.models import (  # noqa: F401  (each registers its architecture)
    adapter,  # "transformer": TransformerLens models
    facts,  # "facts": the one-layer fact-memorisation model
)
from mechmem.models.registry import build_model, model_config_from_dict, register_architecture

__all__ = ["build_model", "model_config_from_dict", "register_architecture"]
