"""Side check of one unknown of the seed page: the authors' model class, written in plain PyTorch modules.

    # CPU: a few minutes per Task 1 seed
    python -m mechmem_papers.permutation.scripts.model_check --preset task1-paper --model encoder \
        --seeds 0 1 2 --out docs/reproductions/data/permutation_encoder_task1.json

The seed page constructs `MinimalCausalTransformer(vocab_size=V, max_seq_len=9, d_model=32, nhead=2,
num_layers=1)` and never prints the class. TransformerLens cannot express two readings of it, so this check
trains them as PyTorch modules, outside mechmem's models, on the preset's task, schedule, batch and optimiser:

- `plain`: the page's drawing (token and position `nn.Embedding`, one causal `nn.MultiheadAttention`, a ReLU
  FFN d -> 2d -> d, residual adds, no norm, a `nn.Linear` unembedding) at PyTorch's default initialisation;
- `encoder`: the same embeddings and unembedding around `nn.TransformerEncoderLayer(d, nhead, 2d)`, whose
  argument names the constructor shares: a LayerNorm after each sublayer and dropout 0.1 while training.

It measures what `batch_check` measures (the Bayes table per answer step, the probe) on the same evaluation
sequences. The rule that judges it is in docs/record/2026-12-07-permutation-sources.md, written before its
first run. Resumable: the file is rewritten after every seed and a seed already in it is not trained again.
"""

if __name__ == "__main__":  # first of all: a stop signal from here on ends the run in one line
    from mechmem.io import catch_stop_signals

    catch_stop_signals()

import json
from pathlib import Path
from typing import Any

from mechmem.cli import ArgumentParser, check_out_dir, positive_int, run_script, write_json
from mechmem.errors import MechmemError

MODELS = {
    "plain": "PyTorch modules as the page draws them (no norm, no dropout, PyTorch's default initialisation)",
    "encoder": "PyTorch's nn.TransformerEncoderLayer (a LayerNorm after each sublayer, dropout 0.1)",
}


def build_model(kind: str, d_vocab: int, n_ctx: int, d: int, heads: int) -> Any:
    """The `kind` reading of the authors' class (`MODELS`): tokens [batch pos] -> logits [batch pos vocab]."""
    from torch import arange, nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(d_vocab, d), nn.Embedding(n_ctx, d)
            if kind == "encoder":
                self.block = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, batch_first=True)
            else:
                self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
                self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
            self.unembed = nn.Linear(d, d_vocab)

        def forward(self, tokens: Any) -> Any:
            n = tokens.shape[1]
            x = self.tok(tokens) + self.pos(arange(n, device=tokens.device))
            mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
            if kind == "encoder":
                return self.unembed(self.block(x, src_mask=mask, is_causal=True))
            x = x + self.attn(x, x, x, attn_mask=mask, is_causal=True, need_weights=False)[0]
            return self.unembed(x + self.ffn(x))

    return Model()


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=("task1-paper", "task2-paper"), required=True, help="the preset")
    parser.add_argument("--model", choices=sorted(MODELS), required=True, help="which reading of the class")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    parser.add_argument("--steps", type=positive_int, help="optimiser steps (default: the preset's)")
    args = parser.parse_args(argv)
    check_out_dir(Path(args.out).parent, flag="--out")
    import torch  # torch is imported from here on, after every check the flags alone decide

    from mechmem.tasks import build_task, get_preset
    from mechmem_papers.permutation.run import side_check_run

    torch.set_num_threads(1)
    preset = get_preset("permutation", args.preset)
    cfg, train = preset.model, preset.train
    steps = args.steps or train.steps
    task = build_task("permutation", preset.task)
    out = Path(args.out)
    head = {
        "preset": args.preset,
        "batch_size": train.batch_size,
        "steps": steps,
        "model": MODELS[args.model],
    }
    done = json.loads(out.read_text()) if out.exists() else {**head, "runs": []}
    if {k: done.get(k) for k in head} != head:
        raise MechmemError(f"{out} holds runs of another preset or model: give another --out")
    runs = done["runs"]
    for seed in sorted(set(args.seeds) - {r["seed"] for r in runs}):
        torch.manual_seed(seed)  # the initialisation and the dropout masks
        model = build_model(args.model, cfg.d_vocab, cfg.n_ctx, cfg.d_model, cfg.n_heads)
        opt = torch.optim.Adam(model.parameters(), lr=train.lr, betas=train.betas)
        data = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            batch = task.train_batch(train.batch_size, generator=data)
            logits = model(batch.tokens)
            per_token = torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), batch.targets, reduction="none"
            )
            loss = (per_token * batch.loss_mask).sum() / batch.loss_mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        runs.append(side_check_run(model.eval(), task, seed=seed, train_loss=loss.item()))
        print(f"seed {seed}: last-batch loss {runs[-1]['train_loss']}, probe {runs[-1]['probe']}", flush=True)
        runs.sort(key=lambda r: r["seed"])
        write_json(out, {**head, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script(main))
