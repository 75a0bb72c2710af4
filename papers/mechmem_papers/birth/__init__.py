"""Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint": triggered-bigram data, the simplified
and full models, memory probes, the experiments of the reproduction and its page.

Importing `plugin` (as `mechmem.plugins.load_papers` does) registers the "birth" task (`task`) and the paper
"birth" (`mechmem.plugins.Paper`) from the parts every paper folder has (docs/papers.md): `spec` (variants and
`--set` options), `run` (trains and measures; the run record), `page` and `figures` (the page), `scripts/`
(the scale ladder, its metric's spread, the corpus counts), `benchmarks/` (data-generation speed) and the demo
model (in `plugin`). The shipped corpus counts are `tinyshakespeare_stats.json`, read through
`corpus.load_stats`.

    python analyses/reproduce.py birth --variant quick       # CPU sizes, about 15 runs of a few minutes each
    python analyses/reproduce.py birth --page-only           # the page again from the committed record
"""
