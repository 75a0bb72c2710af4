"""Permutation memory ("Can a Tiny Transformer Learn to Remember?"): the task, its experiments and its page.

Importing the package registers the "permutation" task (`task`) and the paper (`mechmem.plugins.Paper`).
"""

from mechmem.papers.permutation import task  # noqa: F401  (registers the task)
