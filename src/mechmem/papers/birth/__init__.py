"""Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint": triggered-bigram data, the simplified
and full models, memory probes and the experiments of the reproduction.

Importing the package registers the "birth" task (`task`) and the paper (`mechmem.plugins.Paper`).
"""

from mechmem.papers.birth import task  # noqa: F401  (registers the task)
