"""Fact memorisation in one-layer models (Linsefors & Bushnaq).

A *fact* maps an ordered pair of input tokens (t1, t2) to one of n_out labels. The question is how many random
facts a small model of a given architecture can store with 100% (or 90%) argmax accuracy; `capacity` answers it
by a binary search over the fact count, training 11 initialisations at once (`batched`).
"""

from mechmem.papers.memorisation import task  # noqa: F401  (registers the "facts" task)
from mechmem.papers.memorisation.constructions import model  # noqa: F401  (registers "challenge_mlp")
from mechmem.papers.memorisation.data import generate_facts
from mechmem.papers.memorisation import models  # noqa: F401  (registers the facts architectures)

__all__ = ["generate_facts"]
