"""Model configs and builders. TransformerLens model classes are touched only in `adapter.py`."""

from mechmem.models import adapter  # noqa: F401  (registers the TransformerLens architecture, "transformer")
from mechmem.models.registry import build_model, model_config_from_dict, register_architecture

__all__ = ["build_model", "model_config_from_dict", "register_architecture"]
