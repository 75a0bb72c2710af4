"""Benchmarks of the memorisation paper, each run as a module:

python -m mechmem_papers.memorisation.benchmarks.facts_training --epochs 20   # batched vs per-init
python -m mechmem_papers.memorisation.benchmarks.facts_schedule --max-epochs 150 --patience 50 --n-facts 256
"""
