"""The permutation paper as a plugin: importing this module registers its task(s) and its `Paper`
(`mechmem.plugins.load_papers` imports it; the package `__init__` stays free of torch so the paper's scripts
answer --help at once).
"""

from mechmem.papers.permutation import page, run, spec, task  # noqa: F401  (task: registers the task)
from mechmem.plugins import DemoModel, Paper, register_paper

PAPER = register_paper(
    Paper(
        name="permutation",
        title=page.TITLE,
        spec=spec.make_spec,
        variants=spec.VARIANTS,
        run=run.run,
        page=page.build_page,
        references=page.attach_published_schedule,
        tasks=("permutation",),
        demo=(
            DemoModel("permutation-task1", "permutation", "task1-demo", 0.3),
            DemoModel("permutation-task2", "permutation", "task2-quick", 2.0, save_every=1000),
        ),
    )
)
