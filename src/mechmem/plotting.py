"""Matplotlib for the toolkit's figures: pyplot as it is, with no backend forced on import.

A notebook keeps its inline backend and a desktop session its window backend; a machine without a display
gets matplotlib's own non-interactive fallback. The scripts select the non-interactive Agg backend
themselves (`mechmem.cli.run_script`), since they only ever write figures to files.
"""

import matplotlib.pyplot as plt

__all__ = ["plt"]
