# %% [markdown]
# # A tour of the analysis toolkit, one library call per cell
#
#     python examples/analyses_tour.py                           # minutes on CPU: see `mechmem train --list`
#     MECHMEM_EXAMPLE_STEPS=50 python examples/analyses_tour.py  # a smoke run (what the tests do)
#
# Trains (or reuses) a small Task 2 permutation model, the `task2-quick` preset for its whole 20,000 steps:
# 2 heads, repeats, so one head can eliminate and one recall (a run stopped at 6,000 steps named both heads
# elimination; at its end the roles separate: one recall head, one elimination head).
#
# Every call is a name of `mechmem`; each result turns into a table with `.to_dataframe()` and into a figure
# with `mechmem.plot(result)`.

# %%
import os
from pathlib import Path

import torch

import mechmem

torch.set_num_threads(1)
STEPS = int(os.environ["MECHMEM_EXAMPLE_STEPS"]) if "MECHMEM_EXAMPLE_STEPS" in os.environ else None
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or Path.cwd() / "runs" / "examples") / "task2"
if not (OUT / "ckpt.pt").exists():
    print(f"no checkpoint at {OUT / 'ckpt.pt'}; training there ({STEPS or 'the preset'} steps)")
    mechmem.train_preset("permutation", "task2-quick", out_dir=OUT, steps=STEPS, progress=False)
ckpt = mechmem.load_checkpoint(OUT / "ckpt.pt")
model, task = ckpt.model, ckpt.task
gen = lambda seed=0: torch.Generator().manual_seed(seed)
print(task.headline(ckpt.metrics))

# %% [markdown]
# ## Head detection: previous-token, duplicate-token and induction scores per layer x head

# %%
scores = mechmem.detect_heads(model, task.eval_batch(256, generator=gen()).tokens)
print({name: s.tolist() for name, s in scores.scores.items()})

# %% [markdown]
# ## Activation patching on the task's clean / corrupted pair (denoising: clean into corrupted)

# %%
pair = task.patching_pair(256, generator=gen(1))
sweeps = mechmem.run_sweeps(model, pair, ("attn_head_out_all_pos", "resid_pre"))
print("head outputs restored:", sweeps["attn_head_out_all_pos"].normalised().tolist())

# %% [markdown]
# ## Head ablation: zero, mean and resample ablation of each head and layer

# %%
batch = task.eval_batch(256, generator=gen(2))
reference = task.eval_batch(256, generator=gen(3)).tokens
result = mechmem.ablate_heads(
    model, batch.tokens, lambda logits: task.loss(logits, batch), reference=reference
)
print("loss baseline", round(result.baseline, 4), "per head:", result.heads.tolist())

# %% [markdown]
# ## The intervention engine: one batched call for many interventions
# Each variant is a list of interventions applied together (an empty list is the clean run); here every MLP
# neuron of layer 0 zero-ablated on its own, measured by the task loss.

# %%
neurons = [
    [mechmem.Intervention("blocks.0.mlp.hook_post", (slice(None), i), mechmem.zero())]
    for i in range(model.cfg.d_mlp)
]
losses = mechmem.intervene(model, batch.tokens, [[], *neurons], lambda logits: task.loss(logits, batch))
top = (losses[1:] - losses[0]).topk(3)
print("neurons whose ablation raises the loss most:", top.indices.tolist(), top.values.tolist())

# %% [markdown]
# ## Logit lens before and after the MLP

# %%
lens = mechmem.logit_lens(model, batch.tokens, batch.targets, batch.loss_mask)
print({stage: round(v["target_prob"], 3) for stage, v in lens.summary().items()})

# %% [markdown]
# ## Associative-memory probes: does each head's OV circuit copy tokens?

# %%
probes = mechmem.builtin_probes(model)
print({p.name: round(p.recall, 2) for p in probes.probes})

# %% [markdown]
# ## Head roles: elimination vs recall, from the measured evidence

# %%
roles = mechmem.head_roles(model, task)  # the report's call: the classifier the report and the pages use
print("roles:", roles.summary())

# %% [markdown]
# ## Planted circuits: hand-set weights with a known answer

# %%
report = mechmem.build_report(mechmem.planted_induction_model(), None, n_samples=64)
print(report.section("circuit").findings["summary"])  # L0H2 previous-token, L1H1 induction
