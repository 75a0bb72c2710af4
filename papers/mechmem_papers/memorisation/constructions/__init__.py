"""Hand-coded memorisation in the fact-challenge model of Linsefors & Bushnaq.

`model` (the hookable two-embedding ReLU model, registered as "challenge_mlp"), `assignment` and `published`
(their construction), `appendix_a` (the d_mlp = n_in + 1 lookup table), `keyvalue` (our challenge entry),
`training` (the four modes), `evaluators` (fact count -> best accuracy per mode), `experiments` (Appendix A,
the sweep, capacities through the shared `memorisation.capacity`) and `reproduce` (the runs, written as data
files).
"""

from mechmem_papers.memorisation.constructions.appendix_a import appendix_a
from mechmem_papers.memorisation.constructions.assignment import assign_neurons, max_overlap
from mechmem_papers.memorisation.constructions.keyvalue import keyvalue_construction
from mechmem_papers.memorisation.constructions.model import ChallengeConfig, ChallengeMLP
from mechmem_papers.memorisation.constructions.published import published_construction

__all__ = [
    "ChallengeConfig",
    "ChallengeMLP",
    "appendix_a",
    "assign_neurons",
    "keyvalue_construction",
    "max_overlap",
    "published_construction",
]
