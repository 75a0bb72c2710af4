"""The analyses' fixed sizes and thresholds, in a module that imports nothing heavy, so the command line
(`mechmem.cli`, which also holds the names each flag accepts) reads its defaults before torch is imported.
"""

ABLATION_METRICS = ("loss", "accuracy", "logit_diff")
"""The metric an ablation changes (`mechmem.analysis.ablation.task_metric`)."""
ABLATION_DELTA = 0.05
"""A component matters when the corrected interval of the change of the task loss on ablating it lies outside
(-0.05, 0.05) nats (`mechmem.analysis.ablation.decided`); fixed before the rule's first run
(docs/decisions.md)."""
ABLATION_THRESHOLDS = {"loss": ABLATION_DELTA, "accuracy": 0.05, "logit_diff": 0.1}
"""Per metric, the size of change that makes a component matter: 0.05 nats of loss, five points of accuracy,
0.1 logits of logit difference (a tenth of `MIN_GAP`); fixed before each rule's first run
(docs/decisions.md, "Ablation" and "Ablation on the other metrics")."""
ABLATION_FIRST = 64
"""Sequences of ablation's first look (docs/decisions.md)."""
ABLATION_BUDGET = 512
"""Sequences of ablation's last look: `mechmem ablate --n-samples`'s default and the report's."""
CIRCUIT_PROMPTS = 64
"""Prompts of the circuit's pair (`mechmem.report.circuit_graph.N_PROMPTS`): the first look of the circuit's
sequential verdict (`mechmem.analysis.sequential.CIRCUIT_POLICY`)."""
CIRCUIT_BUDGET = 512
"""Prompts of the circuit verdict's last look (docs/decisions.md)."""
EDGE_SHARE = 0.05
"""An edge is in the decided circuit when the corrected interval of its share of the gap lies outside
(-0.05, 0.05) (`mechmem.analysis.circuits.decided`); fixed before the rule's first run (docs/decisions.md)."""
HEAD_FIRST = 64
"""Sequences per probe of head naming's first look (docs/decisions.md)."""
HEAD_BUDGET = 1000
"""Sequences per probe of head naming's last look: `mechmem heads --n-samples`'s default, the report's
`role_samples` and `head_roles`' `n`."""
MIN_GAP = 1.0
"""A behaviour is there when the corrected interval of its clean - corrupted gap (the task's metric, e.g. the
logit difference) lies outside (-1, 1): the circuit's behaviour criterion and patching's gap test
(docs/decisions.md)."""
PATCH_SHARE = 0.1
"""A patched cell matters when the corrected interval of its share of the gap lies outside (-0.1, 0.1)
(`mechmem.analysis.patching.decided`); fixed before the rule's first run (docs/decisions.md)."""
PATCH_FIRST = 64
"""Pairs of activation patching's first look (docs/decisions.md)."""
PATCH_BUDGET = 512
"""Pairs of activation patching's last look: `mechmem patch --n-samples`'s default and the report's."""
