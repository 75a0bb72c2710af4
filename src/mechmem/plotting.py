"""Matplotlib set-up: a non-interactive backend, so scripts and tests never need a display."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

__all__ = ["plt"]
