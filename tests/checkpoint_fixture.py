"""Write a committed checkpoint fixture with the mechmem and TransformerLens that wrote that kind of file.

    cd tests && T=../.venv-tl3/bin/python
    git archive 761c2bd | tar -x -C /tmp/m1     # format 1, with HookedTransformer's buffers
    PYTHONPATH=/tmp/m1/src $T checkpoint_fixture.py data/format1_tl3.pt plain
    git archive 49dfbdd | tar -x -C /tmp/m2     # format 2 before the canonical layout: buffers too
    PYTHONPATH=/tmp/m2/src $T checkpoint_fixture.py data/format2_buffers_tl3.pt plain
    PYTHONPATH=../src $T checkpoint_fixture.py data/gated_tl3.pt gated
    PYTHONPATH=../src $T checkpoint_fixture.py data/parallel_tl3.pt parallel
    PYTHONPATH=../src $T checkpoint_fixture.py data/shortformer_tl3.pt shortformer
    PYTHONPATH=../src $T checkpoint_fixture.py data/unscaled_tl3.pt unscaled

Each is a tiny model (one layer, d_model 8) whose every weight, biases included, is drawn from N(0, 0.5**2),
so a loader that drops or zeroes any of them gives other logits. The file stores, as its metric
`probe_logits`, the logits the writing TransformerLens computed on `probe_tokens()`. Only names every mechmem
release has kept are used (`model_config_from_dict`, `build_model`, `get_task_class`, `save_checkpoint`).
"""

import sys

import torch

from mechmem.checkpoint import save_checkpoint
from mechmem.models.registry import build_model, model_config_from_dict
from mechmem.tasks import get_task_class

BASE = {
    "arch": "transformer",
    "n_layers": 1,
    "d_model": 8,
    "n_heads": 2,
    "d_vocab": 5,
    "n_ctx": 7,
    "d_mlp": 12,
}
KINDS = {
    "plain": {"act_fn": "gelu", "normalization_type": "LN"},
    "gated": {"act_fn": "silu", "normalization_type": "RMS", "gated_mlp": True},
    "parallel": {"act_fn": "gelu", "normalization_type": "LN", "parallel_attn_mlp": True},
    "shortformer": {"act_fn": "relu", "positional_embedding_type": "shortformer"},
    "unscaled": {"act_fn": "relu", "attn_scale": 1.0},
}
"""Architectures by name, on top of `BASE`."""


def probe_tokens() -> torch.Tensor:
    """The input whose logits a fixture stores."""
    return torch.randint(BASE["d_vocab"], (2, BASE["n_ctx"]), generator=torch.Generator().manual_seed(5))


def main(path: str, kind: str) -> None:
    config = model_config_from_dict({**BASE, **KINDS[kind]})
    model = build_model(config, generator=torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
        logits = model(probe_tokens())
    task = get_task_class("permutation")
    save_checkpoint(
        path,
        model=model,
        model_config=config,
        task_name="permutation",
        task_config=task.config_cls.from_dict({"vocab_size": 4}),
        metrics={"probe_logits": logits.flatten().tolist()},
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
