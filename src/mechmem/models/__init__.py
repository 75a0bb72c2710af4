"""Model configs and builders. TransformerLens's model classes are imported only in `backend.py`."""

from mechmem.models import (  # noqa: F401  (each registers its architecture)
    facts,  # "facts": the one-layer fact-memorisation model
    transformer,  # "transformer": TransformerLens models
)
from mechmem.models.registry import build_model, model_config_from_dict, register_architecture

__all__ = ["build_model", "model_config_from_dict", "register_architecture"]
