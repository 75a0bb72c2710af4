"""Permutation memory ("Can a Tiny Transformer Learn to Remember?"): the task, its experiments and its page.

Importing the package registers the "permutation" task (`task`) and the paper "permutation"
(`mechmem.plugins.Paper`) from the parts every paper folder has (docs/papers.md): `spec` (variants and
`--set` options), `run` (trains and measures; the run record), `page` and `figures` (the page),
`published.json` (the published values with their sources), `scripts/` and `benchmarks/` (none yet), and the
demo models below.
`planted` holds a hand-set model with a known elimination / recall circuit.

    python analyses/reproduce.py permutation --variant quick            # CPU minutes
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
        tasks=("permutation",),
        demo=(
            DemoModel("permutation-task1", "permutation", "task1-quick", 1.5),
            DemoModel("permutation-task2", "permutation", "task2-quick", 2.0, save_every=1000),
        ),
    )
)
