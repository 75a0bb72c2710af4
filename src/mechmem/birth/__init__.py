"""Bietti et al. (2023), "Birth of a Transformer: A Memory Viewpoint": triggered-bigram data, the simplified
and full models, memory probes and the experiments of `analyses/reproduce_birth.py`."""
