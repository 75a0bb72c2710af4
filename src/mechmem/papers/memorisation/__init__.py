"""Fact memorisation in one-layer models (Linsefors & Bushnaq): the paper as one plugin.

A *fact* maps an ordered pair of input tokens (t1, t2) to one of n_out labels. The question is how many random
facts a small model of a given architecture can store with 100% (or 90%) argmax accuracy. Importing the
package registers the "facts" task (`task`), the facts architectures (`models`), the challenge model
"challenge_mlp" (`constructions.model`) and the paper "memorisation".

The parts every paper folder has (docs/papers.md): `spec` (variants and `--set` options), `run` (the variant's
sweeps, then the record), `page` + `page_constructions` and `figures` (the page), `scripts/` (capacity search,
sweeps, constructions), `benchmarks/` (training speed, the published schedule) and the demo model below.
The rest: `data` (the published facts), `models` + `batched` (the 54 variants, trained 11 inits at once;
`heap` keeps their freed memory mapped), `search` (the one capacity search), `capacity` (the one result type,
`find_capacity`), `fits` (the one scaling fit), `sweep` (resumable JSONL sweeps), `summary` (table
comparisons), `constructions/` (the challenge model, the published and our constructions, their evaluators),
`records` (the run record from the data files).
"""

from mechmem.papers.memorisation import (
    models,  # noqa: F401  (registers the facts architectures)
    page,
    run,
    spec,
    task,  # noqa: F401  (registers the "facts" task)
)
from mechmem.papers.memorisation.constructions import model  # noqa: F401  (registers "challenge_mlp")
from mechmem.papers.memorisation.data import generate_facts
from mechmem.plugins import DemoModel, Paper, register_paper

PAPER = register_paper(
    Paper(
        name="memorisation",
        title=page.TITLE,
        spec=spec.make_spec,
        variants=spec.VARIANTS,
        run=run.run,
        page=page.page,
        tasks=("facts",),
        demo=(DemoModel("facts", "facts", "quick", 0.5),),
    )
)

__all__ = ["PAPER", "generate_facts"]
