"""The birth paper as a mechmem plugin: importing this module registers its `Paper` (the entry point
`mechmem.papers` names this module; the package `__init__` stays free of torch so the scripts answer --help
at once).
"""

from mechmem.plugins import Paper, register_paper
from mechmem_papers.birth import page, run, spec

PAPER = register_paper(
    Paper(
        name="birth",
        title=page.TITLE,
        spec=spec.make_spec,
        variants=spec.VARIANTS,
        run=run.run,
        page=page.page,
        references=page.attach_references,
        tasks=("birth",),
    )
)
