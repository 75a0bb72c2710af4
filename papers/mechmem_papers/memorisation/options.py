"""The names the memorisation scripts accept on the command line, in a module that imports nothing heavy.

`scripts/` build their parsers from these before torch is imported, so `--help` and every usage error answer
at once. A test checks that `mechmem.models.facts` (MIXINGS, ACTS), `constructions.evaluators.EVALUATORS`
and `sweep.SCALING_VARIANTS` offer exactly the names below.
"""

import argparse

from mechmem import cli

MIXINGS = ("attn", "uniform", "2emb")
"""How the two input tokens are mixed: learned attention, uniform attention, or two embeddings (2Emb)."""
ACTS = ("gelu", "relu")
"""MLP activations."""
EVALUATORS = (
    "trained",
    "trained_authors",
    "rand_emb",
    "published_hand",
    "published_hybrid",
    "published_hybrid_authors",
    "keyvalue_hand",
    "keyvalue_hybrid",
)
"""The constructions' capacity evaluators (`constructions.evaluators.EVALUATORS`)."""
INT8_MODES = ("trained", "published_hand", "published_hybrid", "keyvalue_hand")
"""The constructions' modes whose weights the int8 check rebuilds (`constructions.int8`)."""
SCALING_VARIANTS = ("full", "reduced", "nb")
"""The models of the d-scaling sweep (`sweep.SCALING_VARIANTS`)."""


def add_schedule_args(parser: argparse.ArgumentParser) -> None:
    """The capacity search's flags shared by `max_facts` and `sweep_facts`: the accuracy that counts as stored
    and the training schedule (epochs per lr phase, patience), with the published values as defaults."""
    parser.add_argument(
        "--acc", type=float, choices=[1.0, 0.9], default=1.0, help="accuracy that counts as stored"
    )
    parser.add_argument(
        "--max-epochs",
        type=cli.positive_int,
        default=50_000,
        help="epochs per lr phase, >= 1 (published 50,000)",
    )
    parser.add_argument(
        "--patience", type=cli.positive_int, default=5_000, help="epochs without gain, >= 1 (published 5,000)"
    )
