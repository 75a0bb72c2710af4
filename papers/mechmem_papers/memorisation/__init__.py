"""Fact memorisation in one-layer models (Linsefors & Bushnaq): the paper as one plugin.

A *fact* maps an ordered pair of input tokens (t1, t2) to one of n_out labels. The question is how many random
facts a small model of a given architecture can store with 100% (or 90%) argmax accuracy. Importing its
`plugin` module registers the "facts" task (`task`), the facts architectures (`models`), the challenge model
"challenge_mlp" (`constructions.model`) and the paper "memorisation".

The parts every paper folder has (docs/papers.md): `spec` (variants and `--set` options), `run` (the variant's
sweeps, then the record), `page` + `page_constructions` and `figures` (the page), `scripts/` (capacity search,
sweeps, constructions), `benchmarks/` (training speed, the published schedule) and the demo model (in
`plugin`). The rest: `data` (the published facts), `models` + `batched` (the 54 variants, trained 11 inits at
once; `heap` keeps their freed memory mapped), `search` (the one capacity search), `capacity` (the one result
type, `find_capacity`), `fits` (the one scaling fit), `sweep` (resumable JSONL sweeps), `summary` (table
comparisons), `constructions/` (the challenge model, the published and our constructions, their evaluators),
`records` (the run record from the data files).
"""
