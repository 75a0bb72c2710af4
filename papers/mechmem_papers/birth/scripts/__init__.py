"""Command-line scripts of the birth paper, each run as a module:

python -m mechmem_papers.birth.scripts.scale --statements two_layer_fixed --max-rung R0   # the scale ladder
python -m mechmem_papers.birth.scripts.eval_spread --out runs/birth_eval_spread.json   # the metric's spread
python -m mechmem_papers.birth.scripts.corpus_stats corpus.txt --out runs/stats.json      # corpus counts
"""
