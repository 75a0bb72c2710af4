"""Benchmarks of the birth paper, each run as a module:

python -m mechmem_papers.birth.benchmarks.data --batch 512 --seq-len 256     # triggered-bigram data speed
"""
