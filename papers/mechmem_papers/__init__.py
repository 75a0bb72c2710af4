"""The reproductions of the three memory works, one sub-package per work, each a mechmem paper plugin.

- `permutation`: "Can a Tiny Transformer Learn to Remember?" (permutation memory, elimination vs recall
  heads);
- `birth`: Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint" (induction-head birth);
- `memorisation`: Linsefors & Bushnaq, fact memorisation in one-layer models and hand-coded constructions.

The tasks and models they train live in mechmem (`mechmem.tasks`, `mechmem.models.facts`); mechmem finds each
`plugin` module through the entry points of the group "mechmem.papers" (papers/pyproject.toml).
"""
