"""Benchmarks of the permutation paper: none yet (the generic ones are in the repository's `benchmarks/`)."""
