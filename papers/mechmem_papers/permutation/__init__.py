"""Permutation memory ("Can a Tiny Transformer Learn to Remember?"): the task, its experiments and its page.

Importing `plugin` (as `mechmem.plugins.load_papers` does) registers the "permutation" task (`task`) and the
paper "permutation" (`mechmem.plugins.Paper`) from the parts every paper folder has (docs/papers.md): `spec`
(variants and `--set` options), `run` (trains and measures; the run record), `page` and `figures` (the page),
`published.json` (the published values with their sources), `scripts/` and `benchmarks/` (none yet), and the
demo models (in `plugin`). `planted` holds a hand-set model with a known elimination / recall circuit.

    python analyses/reproduce.py permutation --variant quick            # CPU minutes
"""
