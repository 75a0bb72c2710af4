"""The decisions of the three decided entry points (patching, ablation, circuit) on small fixed models and
seeds, as plain JSON. `cd tests && python decisions_fixture.py data/decisions_before.json` wrote the stored
file with the three harnesses' own loops, before they shared one runner; `test_sequential_runner.py`
recomputes every case with the current code and compares."""

import dataclasses
import json
import math
import sys
from typing import Any

import torch
from helpers import build_model

import mechmem
from mechmem.analysis.circuits.decided import decided_circuit
from mechmem.analysis.stats import DecisionPolicy


def _plain(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return _plain(x.tolist())
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def _decision(d: Any) -> dict[str, Any]:
    return {"looks": list(d.looks), "stopped": d.stopped, "families": d.to_dict()["families"]}


PLANTED = mechmem.planted_induction_model()
REPEATS = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
SMALL = DecisionPolicy(first=16, budget=64)
SWEEPS = ["attn_head_out_all_pos", "resid_pre"]


def patching(method: str) -> dict[str, Any]:
    found = mechmem.decided_patching(PLANTED, REPEATS, SWEEPS, seed=2, policy=SMALL, method=method)
    return _decision(found.decision) | {
        s: {"values": r.values, "lower": r.lower, "upper": r.upper, "method": r.method, "check": r.check}
        for s, r in found.results.items()
    }


def ablation(**kwargs: Any) -> dict[str, Any]:
    result = mechmem.decided_ablation(PLANTED, REPEATS, seed=4, policy=SMALL, **kwargs)
    return {
        "decision": result.decision.to_dict(),
        "heads": result.heads,
        "attn_layers": result.attn_layers,
        "baseline": result.baseline,
        "info": {k: v for k, v in result.info.items() if k != "timings"},
    }


def circuit(model: Any, **kwargs: Any) -> dict[str, Any]:
    found, source = decided_circuit(model, None, seed=6, policy=SMALL, **kwargs)
    return {
        "source": source,
        "verdict": found.verdict,
        "kept": found.kept,
        "exact": found.exact,
        "joint": found.joint,
        "method": found.method,
        "scores": found.scores,
        "stderr": found.stderr,
        "values": found.values,
        "prompt_values": found.prompt_values,
        "n": found.n,
        "discovery_n": found.discovery_n,
        "criteria": _decision(found.decision),
        "edges": _decision(found.edge_decision),
        "edge_info": found.edge_decision.info,
        "left_out": [dataclasses.astuple(head) for head in found.left_out],
        "pruning": found.pruning,
    }


CASES = {
    "patching_exact": lambda: patching("exact"),
    "patching_attribution": lambda: patching("attribution"),
    "ablation_loss": lambda: ablation(methods=("mean", "zero")),
    "ablation_estimate": lambda: ablation(estimate=True),
    "ablation_accuracy": lambda: ablation(metric="accuracy"),
    "circuit_screened": lambda: circuit(PLANTED, max_exact=4, heads=["L0H0", "L1H1"]),
    "circuit_no_behaviour": lambda: circuit(build_model(seed=1), heads=["L0H0"]),
}
"""Each case's record: every decision, verdict, interval and round count it produced."""


def record(name: str) -> Any:
    """The case's record as plain JSON values (NaN and infinities as strings)."""
    return _plain(CASES[name]())


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump({name: record(name) for name in CASES}, f, indent=1, sort_keys=True)
