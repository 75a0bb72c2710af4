"""The birth paper as a plugin: importing this module registers its task(s) and its `Paper`
(`mechmem.plugins.load_papers` imports it; the package `__init__` stays free of torch so the paper's scripts
answer --help at once).
"""

from mechmem.papers.birth import page, run, spec, task  # noqa: F401  (task: registers the task)
from mechmem.plugins import DemoModel, Paper, register_paper

PAPER = register_paper(
    Paper(
        name="birth",
        title=page.TITLE,
        spec=spec.make_spec,
        variants=spec.VARIANTS,
        run=run.run,
        page=page.page,
        references=page.attach_spread,
        tasks=("birth",),
        demo=(DemoModel("birth", "birth", "demo", 0.8, save_every=25),),
    )
)
