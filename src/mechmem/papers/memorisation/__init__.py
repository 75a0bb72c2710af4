"""Fact memorisation in one-layer models (Linsefors & Bushnaq): the paper as one plugin.

A *fact* maps an ordered pair of input tokens (t1, t2) to one of n_out labels. The question is how many random
facts a small model of a given architecture can store with 100% (or 90%) argmax accuracy. Importing the package
registers the "facts" task (`task`), the facts architectures (`models`), the challenge model "challenge_mlp"
(`constructions.model`) and the paper "memorisation" (`paper`: variants, spec, run; `page`: the page).

Layout: `data` (the published facts), `models` + `batched` (the 54 variants, trained 11 inits at once),
`search` (the one capacity search), `capacity` (the one result type, `find_capacity`), `fits` (the one scaling
fit), `sweep` (resumable JSONL sweeps), `summary` (table comparisons), `constructions/` (the challenge model,
the published and our constructions, their evaluators), `records` (the run record from the data files),
`page` + `page_constructions` + `plots` (the page).
"""

from mechmem.papers.memorisation import (
    models,  # noqa: F401  (registers the facts architectures)
    task,  # noqa: F401  (registers the "facts" task)
)
from mechmem.papers.memorisation.constructions import model  # noqa: F401  (registers "challenge_mlp")
from mechmem.papers.memorisation.data import generate_facts
from mechmem.papers.memorisation.page import TITLE, page
from mechmem.papers.memorisation.paper import VARIANTS, run, spec
from mechmem.plugins import Paper, register_paper

PAPER = register_paper(
    Paper(
        name="memorisation", title=TITLE, spec=spec, variants=VARIANTS, run=run, page=page, tasks=("facts",)
    )
)

__all__ = ["PAPER", "generate_facts"]
