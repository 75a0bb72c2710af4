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
from mechmem import plotting  # noqa: F401  (selects a non-interactive backend for scripts)
from mechmem.checkpoint import load_checkpoint
from mechmem.training.run import train_preset

# In Jupyter, the magic below (a comment in the script) shows figures inline.
# %matplotlib inline
torch.set_num_threads(1)
# The repository this mechmem is installed from (src/mechmem -> the repo), so paths hold from any working
# folder (a notebook runs in examples/); MECHMEM_ROOT overrides it.
ROOT = Path(os.environ.get("MECHMEM_ROOT") or Path(mechmem.__file__).resolve().parents[2])
STEPS = int(os.environ.get("MECHMEM_EXAMPLE_STEPS", "4000"))
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or ROOT / "runs" / "examples")
DEMO = ROOT / "runs" / "demo" / "permutation-task2" / "ckpt.pt"
path = DEMO if DEMO.exists() and "MECHMEM_EXAMPLE_OUT" not in os.environ else OUT / "walkthrough" / "ckpt.pt"
if not path.exists():
    print(f"no demo checkpoint at {DEMO} (make demo writes it); training {STEPS} steps into {path.parent}")
    train_preset("permutation", "task2-quick", out_dir=path.parent, steps=STEPS, progress=False)
ckpt = load_checkpoint(path)
model, task = ckpt.model, ckpt.task
gen = lambda seed=0: torch.Generator().manual_seed(seed)
print(path, "|", task.headline(ckpt.metrics))

# %% [markdown]
# ## Head detection: previous-token, duplicate-token and induction scores per layer x head

# %%
from mechmem.analysis import heads

scores = heads.detect_heads(model, heads.repeated_random_tokens(256, 4, model.cfg.d_vocab, generator=gen()))
fig = heads.plot_head_scores(scores, title="head scores")

# %% [markdown]
# ## Exact activation patching: which head outputs carry the clean answer (denoising)

# %%
from mechmem.analysis import patching

pair = task.patching_pair(256, generator=gen(1))
exact = patching.Patcher(model, pair.clean, pair.corrupted, pair=pair).sweep("attn_head_out_by_pos")
fig = patching.plot_patching(exact)

# %% [markdown]
# ## Attribution patching: the same sweep from one forward and one backward pass per run

# %%
from mechmem.analysis.patching import attribution

approx = attribution.Attributor(model, pair.clean, pair.corrupted, pair=pair).sweep("attn_head_out_by_pos")
print("agreement with exact patching:", attribution.agreement(approx, exact))

# %% [markdown]
# ## Head ablation: mean ablation of each head, effect on the task loss

# %%
from mechmem.analysis import ablation

toks, metric, desc = ablation.task_metric(task, "loss", 256, generator=gen(2))
fig = ablation.plot_ablation(ablation.ablate_heads(model, toks, metric, metric_name=desc))

# %% [markdown]
# ## Logit lens: the answer's probability after each block

# %%
from mechmem.analysis import logit_lens

batch = task.eval_batch(256, generator=gen(3))
fig = logit_lens.plot_logit_lens(logit_lens.logit_lens(model, batch.tokens, batch.targets, batch.loss_mask))

# %% [markdown]
# ## The circuit report: every analysis above, with each head's role named from the evidence

# %%
from mechmem.report import build_report

report = build_report(model, task, title=str(path.parent.name), n_samples=256)
circuit = report.section("circuit")
print(circuit.findings["summary"])
for line in circuit.lines:
    print("-", line)
