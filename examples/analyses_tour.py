# %% [markdown]
# # A tour of the analysis toolkit, one library call per cell
#
#     python examples/analyses_tour.py                           # about 1 minute on CPU
#     MECHMEM_EXAMPLE_STEPS=50 python examples/analyses_tour.py  # a smoke run (what the tests do)
#
# Trains (or reuses) a small Task 2 permutation model:
# 2 heads, repeats, so one head can eliminate and one recall.

# %%
import os
from pathlib import Path

import torch

import mechmem
from mechmem.checkpoint import load_checkpoint
from mechmem.training.run import train_preset

torch.set_num_threads(1)
# The repository this mechmem is installed from (src/mechmem -> the repo), so paths hold from any working
# folder (a notebook runs in examples/); MECHMEM_ROOT overrides it.
ROOT = Path(os.environ.get("MECHMEM_ROOT") or Path(mechmem.__file__).resolve().parents[2])
STEPS = int(os.environ.get("MECHMEM_EXAMPLE_STEPS", "6000"))
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or ROOT / "runs" / "examples") / "task2"
if not (OUT / "ckpt.pt").exists():
    print(f"no checkpoint at {OUT / 'ckpt.pt'}; training {STEPS} steps there")
    train_preset("permutation", "task2-quick", out_dir=OUT, steps=STEPS, progress=False)
ckpt = load_checkpoint(OUT / "ckpt.pt")
model, task = ckpt.model, ckpt.task
gen = lambda seed=0: torch.Generator().manual_seed(seed)
print(task.headline(ckpt.metrics))

# %% [markdown]
# ## Head detection: previous-token, duplicate-token and induction scores per layer x head

# %%
from mechmem.analysis import heads

tokens = heads.repeated_random_tokens(256, 4, model.cfg.d_vocab, generator=gen())
scores = heads.detect_heads(model, tokens)
print({name: s.tolist() for name, s in scores.scores.items()})

# %% [markdown]
# ## Activation patching on the task's clean / corrupted pair (denoising: clean into corrupted)

# %%
from mechmem.analysis import patching

pair = task.patching_pair(256, generator=gen(1))
sweeps = patching.run_sweeps(model, pair, ("attn_head_out_all_pos", "resid_pre"))
print("head outputs restored:", sweeps["attn_head_out_all_pos"].normalised().tolist())

# %% [markdown]
# ## Head ablation: zero, mean and resample ablation of each head and layer

# %%
from mechmem.analysis import ablation

toks, metric, desc = ablation.task_metric(task, "loss", 256, generator=gen(2))
result = ablation.ablate_heads(model, toks, metric, metric_name=desc)
print(desc, "baseline", round(result.baseline, 4), "per head:", result.heads.tolist())

# %% [markdown]
# ## Logit lens before and after the MLP

# %%
from mechmem.analysis import logit_lens

batch = task.eval_batch(256, generator=gen(3))
lens = logit_lens.logit_lens(model, batch.tokens, batch.targets, batch.loss_mask)
print({stage: round(v["target_prob"], 3) for stage, v in lens.summary().items()})

# %% [markdown]
# ## Associative-memory probe: does each head's OV circuit copy tokens?

# %%
from mechmem.analysis import probes

for h in range(model.cfg.n_heads):
    ov = model.blocks[0].attn.W_V[h] @ model.blocks[0].attn.W_O[h]
    rate = probes.recall_rate(model.W_E, ov, model.W_U.T, torch.arange(model.cfg.d_vocab))
    print(f"L0H{h} OV copy recall {rate:.2f}")

# %% [markdown]
# ## Head roles (elimination vs recall) and the MLP neurons that write the answer

# %%
from mechmem.analysis import neurons
from mechmem.analysis.roles import head_roles
from mechmem.papers.permutation.run import last_step_groups

roles = head_roles(model, task, n=256, seed=4)  # the classifier the report and the reproduction page use
print("roles:", roles.summary())
g = last_step_groups(task, 256, generator=gen(5))
pos = torch.full((256,), task.seq_len - 1)
effect = neurons.neuron_direct_effect(model, g["tokens"], 0, pos, g["targets"])
print("top neurons by direct effect on the answer:", neurons.rank_neurons(effect, 0).top(3))

# %% [markdown]
# ## Planted circuits: hand-set weights with a known answer

# %%
from mechmem.analysis.planted import planted_induction_model
from mechmem.report import build_report

report = build_report(planted_induction_model(), None, n_samples=64)
print(report.section("circuit").findings["summary"])  # L0H2 previous-token, L1H1 induction
