"""Command-line scripts of the memorisation paper, each run as a module:

python -m mechmem_papers.memorisation.scripts.max_facts --mixing 2emb --no-mlp --no-norms   # one capacity
python -m mechmem_papers.memorisation.scripts.sweep_facts table --max-epochs 150 --patience 50  # the table
python -m mechmem_papers.memorisation.scripts.reproduce_constructions --quick --data runs/constructions_quick
"""
