"""The memorisation paper as a plugin: importing this module registers its task(s) and its `Paper`
(`mechmem.plugins.load_papers` imports it; the package `__init__` stays free of torch so the paper's scripts
answer --help at once).
"""

from mechmem.papers.memorisation import (
    models,  # noqa: F401  (registers the facts architectures)
    page,
    run,
    spec,
    task,  # noqa: F401  (registers the "facts" task)
)
from mechmem.papers.memorisation.constructions import model  # noqa: F401  (registers "challenge_mlp")
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
