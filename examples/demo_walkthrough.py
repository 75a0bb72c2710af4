# %% [markdown]
# # A demo model, from its checkpoint to its circuit report: one analysis per cell
#
#     make demo && python examples/demo_walkthrough.py           # uses runs/demo/permutation-task2
#     MECHMEM_EXAMPLE_STEPS=50 python examples/demo_walkthrough.py   # a smoke run (what the tests do)
#
# Opens the `make demo` checkpoint of the permutation Task 2 model (two heads; with repeats, one head can
# eliminate used answers and one recall a repeated one). Without it, trains the same preset here for
# `MECHMEM_EXAMPLE_STEPS` steps (a few thousand give the trained behaviour; about a minute on CPU). As a
# notebook, figures show inline.

# %%
import os
from pathlib import Path

import torch

import mechmem

# In Jupyter, the magic below (a comment in the script) shows figures inline.
# %matplotlib inline
torch.set_num_threads(1)
STEPS = int(os.environ.get("MECHMEM_EXAMPLE_STEPS", "4000"))
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or Path.cwd() / "runs" / "examples")
# `make demo` writes runs/demo/ in the repository; a notebook runs in examples/, one folder below it.
DEMOS = [Path(folder) / "runs" / "demo" / "permutation-task2" / "ckpt.pt" for folder in (".", "..")]
found = [p for p in DEMOS if p.exists() and "MECHMEM_EXAMPLE_OUT" not in os.environ]
path = found[0] if found else OUT / "walkthrough" / "ckpt.pt"
if not path.exists():
    print(
        f"no demo checkpoint at {DEMOS[0]} (make demo writes it); training {STEPS} steps into {path.parent}"
    )
    mechmem.train_preset("permutation", "task2-quick", out_dir=path.parent, steps=STEPS, progress=False)
ckpt = mechmem.load_checkpoint(path)
model, task = ckpt.model, ckpt.task
gen = lambda seed=0: torch.Generator().manual_seed(seed)
print(path, "|", task.headline(ckpt.metrics))

# %% [markdown]
# ## Head detection: previous-token, duplicate-token and induction scores per layer x head
# (on the task's own sequences; `.to_dataframe()` gives the scores as a table)

# %%
scores = mechmem.detect_heads(model, task.eval_batch(256, generator=gen()).tokens)
fig = mechmem.plot(scores, title="head scores")

# %% [markdown]
# ## Exact activation patching: which head outputs carry the clean answer (denoising)

# %%
pair = task.patching_pair(256, generator=gen(1))
exact = mechmem.run_sweeps(model, pair, ["attn_head_out_by_pos"])["attn_head_out_by_pos"]
fig = mechmem.plot(exact)

# %% [markdown]
# ## Attribution patching: the same sweep from one forward and one backward pass per run

# %%
approx = mechmem.attribute_sweeps(model, pair, ["attn_head_out_by_pos"])["attn_head_out_by_pos"]
print("agreement with exact patching:", approx.check)

# %% [markdown]
# ## Head ablation: mean ablation of each head, effect on the task loss

# %%
batch = task.eval_batch(256, generator=gen(2))
reference = task.eval_batch(256, generator=gen(3)).tokens
loss = lambda logits: task.loss(logits, batch)
fig = mechmem.plot(mechmem.ablate_heads(model, batch.tokens, loss, methods=("mean",), reference=reference))

# %% [markdown]
# ## Logit lens: the answer's probability after each block

# %%
fig = mechmem.plot(mechmem.logit_lens(model, batch.tokens, batch.targets, batch.loss_mask))

# %% [markdown]
# ## The circuit report: every analysis above, with each head's role named from the evidence

# %%
report = mechmem.build_report(model, task, title=str(path.parent.name), n_samples=256)
circuit = report.section("circuit")
print(circuit.findings["summary"])
for line in circuit.lines:
    print("-", line)
