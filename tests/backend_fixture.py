"""Write a committed backend fixture: `python tests/backend_fixture.py tests/data/backend_tlN.pt` under each
TransformerLens major version (a small LN + GELU model, weights drawn from seed 0, briefly trained on
`repeats`).

The file also stores, as its metric `probe_logits`, the logits its TransformerLens computed on
`probe_tokens()`; `tests/test_backends.py` loads both files under the TransformerLens at hand and compares.
"""

import sys

import torch
from helpers import train_briefly

from mechmem.checkpoint import save_checkpoint
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.tasks import build_task
from mechmem.tasks.generic import RepeatsConfig

CONFIG = TransformerConfig(
    n_layers=2, d_model=16, n_heads=2, d_vocab=12, n_ctx=16, d_mlp=32, act_fn="gelu", normalization_type="LN"
)


def main(path: str) -> None:
    model = build_transformer(CONFIG, generator=torch.Generator().manual_seed(0))
    task = build_task("repeats", RepeatsConfig.for_model(model))
    train_briefly(model, task, 60, batch_size=32, lr=1e-2, seed=1)
    with torch.no_grad():
        logits = model(probe_tokens())
    save_checkpoint(
        path,
        model=model,
        model_config=CONFIG,
        task_name="repeats",
        task_config=task.config,
        metrics={"probe_logits": logits.flatten().tolist()},
    )


def probe_tokens() -> torch.Tensor:
    """The input whose logits the fixture stores (as written by its TransformerLens)."""
    return torch.randint(CONFIG.d_vocab, (2, CONFIG.n_ctx), generator=torch.Generator().manual_seed(5))


if __name__ == "__main__":
    main(sys.argv[1])
