"""Shared fixtures: determinism, and small config builders with overridable defaults."""

import os
import random

import pytest
import torch

# Two pytest-xdist workers share two cores: one intra-op thread each avoids oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def reproducible():
    """Every test starts from the same global RNG state (library code itself never seeds globally)."""
    random.seed(0)
    torch.manual_seed(0)
    yield


def build_transformer_cfg(**overrides):
    """A small TransformerConfig; pass keyword arguments to change any field."""
    from mechmem.models.adapter import TransformerConfig

    defaults = dict(n_layers=2, d_model=16, n_heads=2, d_vocab=6, n_ctx=9, d_mlp=32)
    defaults.update(overrides)
    return TransformerConfig(**defaults)
