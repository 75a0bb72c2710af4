"""Analyses that run on any mechmem checkpoint: patching, ablation, logit lens, head detection, probes."""
