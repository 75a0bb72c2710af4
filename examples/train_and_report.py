# %% [markdown]
# # Train a tiny model, open its checkpoint, write a circuit report
#
# A notebook in percent format: run it cell by cell in an
# editor that understands `# %%`, or as a plain script:
#
#     python examples/train_and_report.py                        # about 1 minute on CPU
#     MECHMEM_EXAMPLE_STEPS=50 python examples/train_and_report.py   # a smoke run (what the tests do)
#
# Outputs go to `$MECHMEM_EXAMPLE_OUT` (default `runs/examples` under the folder you run it from).

# %%
import os
from pathlib import Path

import torch

import mechmem

torch.set_num_threads(1)
STEPS = int(os.environ.get("MECHMEM_EXAMPLE_STEPS", "4000"))
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or Path.cwd() / "runs" / "examples")
print(f"outputs go to {OUT}")

# %% [markdown]
# ## Train
# The `task1-quick` preset of the permutation task: one layer, one head, no repeats. A few thousand steps are
# enough for it to find the elimination strategy (each answer is uniform over the y's not used yet).

# %%
result = mechmem.train_preset(
    "permutation", "task1-quick", out_dir=OUT / "task1", steps=STEPS, progress=False
)
print({k: round(v, 4) for k, v in result.summary.items() if isinstance(v, float)})

# %% [markdown]
# ## Open the checkpoint
# A checkpoint rebuilds the model and its task from the configs stored in it.

# %%
ckpt = mechmem.load_checkpoint(OUT / "task1" / "ckpt.pt")
task = ckpt.task
print(ckpt.task_name, ckpt.model_config)
print(task.headline(ckpt.metrics))

# %% [markdown]
# ## Report
# `report_checkpoint` runs every analysis that fits the model
# and task, names each head's role from the evidence, and writes report.md, report.html and report.json.

# %%
report, paths = mechmem.report_checkpoint(
    ckpt, OUT / "task1" / "report", n_samples=256, title="task1 example"
)
circuit = report.section("circuit")
print(circuit.findings["summary"])
for line in circuit.lines:
    print("-", line)
print("open", paths["html"])

# %% [markdown]
# In a notebook the report itself displays inline: the same interactive page as report.html (attention
# explorer, patching heatmaps, circuit graph).

# %%
report  # noqa: B018 - a notebook cell shows its last expression
