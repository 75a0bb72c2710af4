"""Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint": triggered-bigram data, the simplified
and full models, memory probes, the experiments of the reproduction and its page.

Importing the package registers the "birth" task (`task`) and the paper "birth" (`mechmem.plugins.Paper`):
`reproduce.make_spec` / `reproduce.run` train and measure, `page.page` turns the run record into the page.

    python analyses/reproduce.py birth --variant quick       # CPU sizes, about 15 runs of a few minutes each
    python analyses/reproduce.py birth --page-only           # the page from docs/reproductions/data/birth.json
"""

from mechmem.papers.birth import page, reproduce, task  # noqa: F401  (task: registers the task)
from mechmem.plugins import Paper, register_paper

PAPER = register_paper(
    Paper(
        name="birth",
        title=page.TITLE,
        spec=reproduce.make_spec,
        variants=("quick", "default", "paper"),
        run=reproduce.run,
        page=page.page,
        tasks=("birth",),
    )
)
