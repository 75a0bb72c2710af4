"""The names the memorisation scripts accept on the command line, in a module that imports nothing heavy.

`scripts/` build their parsers from these before torch is imported, so `--help` and every usage error answer
at once. `models` reads MIXINGS and ACTS from here; a test checks that `constructions.evaluators.EVALUATORS`
and `sweep.SCALING_VARIANTS` offer exactly the names below.
"""

MIXINGS = ("attn", "uniform", "2emb")
"""How the two input tokens are mixed: learned attention, uniform attention, or two embeddings (2Emb)."""
ACTS = ("gelu", "relu")
"""MLP activations."""
EVALUATORS = (
    "trained",
    "rand_emb",
    "published_hand",
    "published_hybrid",
    "keyvalue_hand",
    "keyvalue_hybrid",
)
"""The constructions' capacity evaluators (`constructions.evaluators.EVALUATORS`)."""
SCALING_VARIANTS = ("full", "reduced", "nb")
"""The models of the d-scaling sweep (`sweep.SCALING_VARIANTS`)."""
