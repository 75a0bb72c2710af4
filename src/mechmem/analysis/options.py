"""The names the analyses accept on the command line, in a module that imports nothing heavy.

The scripts in `analyses/` build their parsers from these before torch or TransformerLens is imported, so
`--help` and every usage error answer at once (docs/analyses.md, "Start-up"). Each name list is the one its
analysis module uses: `ablation.METHODS` and `dynamics.QUANTITIES` read theirs from here, and a test checks
that the patching and circuit modules offer exactly the names below.
"""

from mechmem.errors import MechmemError

ABLATION_METHODS = ("zero", "mean", "resample")
"""What an ablated head's output z is set to (`mechmem.analysis.ablation`)."""
ABLATION_METRICS = ("loss", "accuracy", "logit_diff")
"""The metric an ablation changes (`mechmem.analysis.ablation.task_metric`)."""
ABLATION_BUDGET = 512
"""Sequences of ablation's last look: `mechmem ablate --n-samples`'s default and the report's."""
CIRCUIT_ABLATIONS = ("corrupted", "mean", "zero")
"""What an ablated edge carries (`mechmem.analysis.circuits.ABLATIONS`)."""
CIRCUIT_BUDGET = 512
"""Prompts of the circuit verdict's last look (docs/decisions.md)."""
HEAD_BUDGET = 1000
"""Sequences per probe of head naming's last look: `mechmem heads --n-samples`'s default, the report's
`role_samples` and `head_roles`' `n`."""
PATCH_BUDGET = 512
"""Pairs of activation patching's last look: `mechmem patch --n-samples`'s default and the report's."""
PATCH_DIRECTIONS = ("denoising", "noising")
"""Clean into corrupted, or corrupted into clean (`mechmem.analysis.patching.DIRECTIONS`)."""
PATCH_METHODS = ("exact", "attribution")
"""Exact patching or its first-order estimate (`mechmem.analysis.patching.tables.METHODS`)."""
PATCH_SWEEPS = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
    "attn_head_out_all_pos",
    "attn_head_out_by_pos",
    "attn_head_pattern_all_pos",
    "attn_head_pattern_by_pos",
)
"""The activation patching sweeps (`mechmem.analysis.patching.SWEEPS`)."""
DYNAMICS_QUANTITIES = ("loss", "heads", "probes", "lens", "ablation", "patching", "roles")
"""What `mechmem.analysis.dynamics` can measure over a run's step checkpoints."""


def parse_quantities(text: str) -> tuple[str, ...]:
    """'heads,probes' -> ('heads', 'probes'); 'all' is every quantity; unknown names are a one-line error."""
    names = (
        DYNAMICS_QUANTITIES
        if text.strip() == "all"
        else tuple(n.strip() for n in text.split(",") if n.strip())
    )
    unknown = [n for n in names if n not in DYNAMICS_QUANTITIES]
    if unknown or not names:
        raise MechmemError(
            f"unknown quantities {unknown or [text]} (choose from {', '.join(DYNAMICS_QUANTITIES)} or all)"
        )
    return names
