"""Capacity in bits per parameter, the unit of Allen-Zhu & Li's knowledge-capacity law (ICLR 2025).

A fact is a pair (t1, t2) with a label drawn uniformly from n_out, so the labels of N facts hold N log2 n_out
bits. A model that recalls all N at argmax (the capacity searches' criterion) determines them: it stores at
least that many bits. A model that recalls a fraction a of them stores at least N (log2 K - H(a) - (1 - a)
log2(K - 1)) bits (Fano's inequality, K = n_out). Allen-Zhu & Li count bits from the model's loss; the record
keeps accuracies only, so these are the accuracy-based lower bounds.
"""

import math
from typing import Any

from mechmem.models.facts import FactsModelConfig, param_specs


def trainable_parameters(config: dict[str, Any]) -> int:
    """Parameters a facts variant trains (the published ones: `param_specs`)."""
    return sum(math.prod(shape) for shape, _, _ in param_specs(FactsModelConfig(**config)).values())


def stored_bits(n_facts: int, n_labels: int, accuracy: float = 1.0) -> float:
    """Lower bound on the bits about the labels that a model recalling `accuracy` of `n_facts` stores."""
    a = min(max(accuracy, 0.0), 1.0)
    entropy = 0.0 if a in (0.0, 1.0) else -(a * math.log2(a) + (1 - a) * math.log2(1 - a))
    wrong = (1 - a) * math.log2(n_labels - 1) if n_labels > 1 else 0.0
    return n_facts * max(0.0, math.log2(n_labels) - entropy - wrong)


def bits_per_parameter(n_facts: float, config: dict[str, Any]) -> float:
    """Bits stored per trainable parameter at full recall of `n_facts` facts."""
    return stored_bits(round(n_facts), config["n_out"]) / trainable_parameters(config)
