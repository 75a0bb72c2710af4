"""Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint": triggered-bigram data, the simplified
and full models, memory probes, the experiments of the reproduction and its page.

Importing the package registers the "birth" task (`task`) and the paper "birth" (`mechmem.plugins.Paper`) from
the parts every paper folder has (docs/papers.md): `spec` (variants and `--set` options), `run` (trains and
measures; the run record), `page` and `figures` (the page), `scripts/` (the scale ladder, its metric's spread,
the corpus counts), `benchmarks/` (data-generation speed) and the demo model below. The shipped corpus counts
are `tinyshakespeare_stats.json`, read through `corpus.load_stats`.

    python analyses/reproduce.py birth --variant quick       # CPU sizes, about 15 runs of a few minutes each
    python analyses/reproduce.py birth --page-only           # the page again from the committed record
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
        tasks=("birth",),
        demo=(DemoModel("birth", "birth", "quick", 3.0, save_every=50),),
    )
)
