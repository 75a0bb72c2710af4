# %% [markdown]
# # A mechmem model in TransformerLens's own tools: tokens, `run_with_cache`, CircuitsVis
#
#     pip install "mechmem[notebook]"                               # Jupyter and CircuitsVis
#     python examples/circuitsvis_attention.py                      # about 1 minute on CPU
#     MECHMEM_EXAMPLE_STEPS=50 python examples/circuitsvis_attention.py   # a smoke run (what the tests do)
#
# A loaded checkpoint's model carries its task's token names as a tokenizer, so TransformerLens's string
# helpers (`to_str_tokens`, `to_string`, `to_tokens`) and everything built on them (CircuitsVis,
# `transformer_lens.head_detector`) work on it unchanged. Outputs go to `$MECHMEM_EXAMPLE_OUT` (default
# `runs/examples`); `$MECHMEM_EXAMPLE_CKPT` names a checkpoint to use instead of training one.

# %%
import os
from pathlib import Path

import torch

import mechmem

torch.set_num_threads(1)
STEPS = int(os.environ.get("MECHMEM_EXAMPLE_STEPS", "4000"))
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or Path.cwd() / "runs" / "examples") / "task1"
CKPT = Path(os.environ.get("MECHMEM_EXAMPLE_CKPT") or OUT / "ckpt.pt")
if not CKPT.exists():
    print(f"no checkpoint at {CKPT}; training {STEPS} steps there")
    mechmem.train_preset("permutation", "task1-quick", out_dir=OUT, steps=STEPS, progress=False)
ckpt = mechmem.load_checkpoint(CKPT)
model, task = ckpt.model, ckpt.task

# %% [markdown]
# ## Tokens as strings
# One sequence of the task; the model names its tokens with the task's names (`ckpt.token_names`).

# %%
tokens = task.eval_batch(1, generator=torch.Generator().manual_seed(0)).tokens
str_tokens = model.to_str_tokens(tokens[0])
print("tokens:", str_tokens)
print("as text:", model.to_string(tokens[0]), "->", model.to_tokens(model.to_string(tokens[0])).tolist())

# %% [markdown]
# ## Every activation of one forward pass, by TransformerLens's hook names

# %%
logits, cache = model.run_with_cache(tokens)
patterns = {layer: cache["pattern", layer][0] for layer in range(model.cfg.n_layers)}  # head query key
print({layer: tuple(p.shape) for layer, p in patterns.items()})

# %% [markdown]
# ## The attention patterns in CircuitsVis
# What CircuitsVis is given: the tokens as strings and one layer's patterns.

# %%
views = {layer: {"tokens": str_tokens, "attention": p} for layer, p in patterns.items()}
try:
    import circuitsvis as cv
except ImportError:
    cv = None
    print("CircuitsVis is not installed: pip install 'mechmem[notebook]' (or circuitsvis) to draw these")
if cv is not None:
    html = cv.attention.attention_patterns(**views[0])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "attention.html").write_text(str(html))
    print(f"wrote {OUT / 'attention.html'}")
html if cv is not None else None  # noqa: B018 - shown inline in a notebook
