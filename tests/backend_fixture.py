"""Write a committed backend fixture: `python tests/backend_fixture.py tests/data/backend_tlN.pt` under each
TransformerLens major version (a small LN + GELU model, weights drawn from seed 0, briefly trained on
`repeats`).

The file also stores, as its metric `probe_logits`, the logits its TransformerLens computed on
`probe_tokens()`; `tests/test_backends.py` loads both files under the TransformerLens at hand and compares.
"""

import sys

import torch

from mechmem.checkpoint import save_checkpoint
from mechmem.models.adapter import TransformerConfig, build_transformer
from mechmem.tasks import build_task
from mechmem.tasks.generic import RepeatsConfig

CONFIG = TransformerConfig(
    n_layers=2, d_model=16, n_heads=2, d_vocab=12, n_ctx=16, d_mlp=32, act_fn="gelu", normalization_type="LN"
)


def main(path: str) -> None:
    model = build_transformer(CONFIG, generator=torch.Generator().manual_seed(0))
    task = build_task("repeats", RepeatsConfig.for_model(model))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for _ in range(60):
        batch = task.train_batch(32, generator=gen)
        loss = task.loss(model(batch.tokens), batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
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
