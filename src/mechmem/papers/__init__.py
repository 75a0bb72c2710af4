"""Built-in paper plugins, one folder per reproduced work (see `mechmem.plugins`).

- `permutation`: "Can a Tiny Transformer Learn to Remember?" (permutation memory, elimination vs recall
  heads);
- `birth`: Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint" (induction-head birth);
- `memorisation`: Linsefors & Bushnaq, fact memorisation in one-layer models and hand-coded constructions.

Nothing here is imported by the core by name: `mechmem.plugins.load_papers` discovers the sub-packages.
"""
