# %% [markdown]
# # Train a tiny model, open its checkpoint, write a circuit report
#
# A notebook in percent format: run it cell by cell in an
# editor that understands `# %%`, or as a plain script:
#
#     python examples/train_and_report.py                        # about 1 minute on CPU
#     MECHMEM_EXAMPLE_STEPS=50 python examples/train_and_report.py   # a smoke run (what the tests do)
#
# Outputs go to `$MECHMEM_EXAMPLE_OUT` (default `runs/examples` in the repository, from any working folder).

# %%
import os
from pathlib import Path

import torch

import mechmem
from mechmem.checkpoint import load_checkpoint
from mechmem.report import build_report, write_report
from mechmem.training.run import train_preset

torch.set_num_threads(1)
# The repository this mechmem is installed from (src/mechmem -> the repo), so paths hold from any working
# folder (a notebook runs in examples/); MECHMEM_ROOT overrides it.
ROOT = Path(os.environ.get("MECHMEM_ROOT") or Path(mechmem.__file__).resolve().parents[2])
STEPS = int(os.environ.get("MECHMEM_EXAMPLE_STEPS", "4000"))
OUT = Path(os.environ.get("MECHMEM_EXAMPLE_OUT") or ROOT / "runs" / "examples")
print(f"outputs go to {OUT}")

# %% [markdown]
# ## Train
# The `task1-quick` preset of the permutation task: one layer, one head, no repeats. A few thousand steps are
# enough for it to find the elimination strategy (each answer is uniform over the y's not used yet).

# %%
result = train_preset("permutation", "task1-quick", out_dir=OUT / "task1", steps=STEPS, progress=False)
print({k: round(v, 4) for k, v in result.summary.items() if isinstance(v, float)})

# %% [markdown]
# ## Open the checkpoint
# A checkpoint rebuilds the model and its task from the configs stored in it.

# %%
ckpt = load_checkpoint(OUT / "task1" / "ckpt.pt")
task = ckpt.task
print(ckpt.task_name, ckpt.model_config)
print(task.headline(ckpt.metrics))

# %% [markdown]
# ## Report
# `build_report` runs every analysis that fits the model
# and task and names each head's role from the evidence.

# %%
report = build_report(ckpt.model, task, title="task1 example", n_samples=256)
circuit = report.section("circuit")
print(circuit.findings["summary"])
for line in circuit.lines:
    print("-", line)
paths = write_report(report, OUT / "task1" / "report")
print("open", paths["html"])
