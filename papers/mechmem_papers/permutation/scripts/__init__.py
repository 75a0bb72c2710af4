"""Command-line scripts of the permutation paper: none beyond `analyses/reproduce.py permutation`, which runs
its whole reproduction (the folder exists so every paper has the same skeleton; docs/papers.md)."""
