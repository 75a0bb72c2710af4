"""The analyses' fixed sizes and thresholds, importing nothing heavy (the command line reads its defaults
before torch is imported)."""

ABLATION_METRICS = ("loss", "accuracy", "logit_diff")
"""The metric an ablation changes (`mechmem.analysis.ablation.task_metric`)."""
ABLATION_BUDGET = 512
"""Sequences of ablation's last look: `mechmem ablate --n-samples`'s default and the report's."""
CIRCUIT_BUDGET = 512
"""Prompts of the circuit verdict's last look (docs/decisions.md)."""
HEAD_BUDGET = 1000
"""Sequences per probe of head naming's last look (`mechmem heads`, the report, `head_roles`)."""
PATCH_BUDGET = 512
"""Pairs of activation patching's last look: `mechmem patch --n-samples`'s default and the report's."""
