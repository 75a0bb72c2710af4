"""End-to-end reproductions of published experiments, built on mechmem's tasks, trainer and analyses."""
