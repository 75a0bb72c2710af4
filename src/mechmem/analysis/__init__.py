"""Analyses that run on any mechmem checkpoint.

Patching, ablation, logit lens, head detection, memory probes.
"""
