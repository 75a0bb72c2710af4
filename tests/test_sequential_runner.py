"""Same seed, same decisions: the three decided analyses (patching, ablation, circuit) give exactly the
decisions, verdicts, intervals and round counts stored in `data/decisions_before.json`, which
`decisions_fixture.py` recorded with each harness's own loop before the three shared one runner."""

import json
import math
from pathlib import Path
from typing import Any

import pytest
from decisions_fixture import CASES, record

STORED = json.loads((Path(__file__).parent / "data" / "decisions_before.json").read_text())


def assert_same(ours: Any, theirs: Any, where: str = "") -> None:
    """Equal structure, decisions, verdicts and counts; floats to 1e-5 (float32 kernels differ between CPUs:
    on the no-behaviour model, whose effects are noise of size 1e-6, by up to a few 1e-6)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]")
    elif isinstance(theirs, float) and not isinstance(ours, bool | str):
        assert math.isclose(ours, theirs, rel_tol=1e-5, abs_tol=1e-5), (where, ours, theirs)
    else:
        assert ours == theirs, (where, ours, theirs)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_same_seed_gives_the_stored_decisions(name):
    assert_same(json.loads(json.dumps(record(name))), STORED[name], name)
