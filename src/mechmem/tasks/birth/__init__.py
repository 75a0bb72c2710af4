"""The triggered-bigram task of Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint".

`corpus` reads the bigram statistics of a character corpus (the shipped counts are
`tinyshakespeare_stats.json`), `data` samples triggered sequences from them, `models` builds the simplified
and full models, `probes` measures the associative memories, `task` is the task "birth" and its presets.
"""
