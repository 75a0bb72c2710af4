"""The published facts rule, checked by hand on a small case and by invariants on the paper's sizes."""

import pytest
import torch

from mechmem.errors import MechmemError
from mechmem.tasks.facts import fact_sequence, generate_facts


def test_small_case_by_hand():
    # randperm(4) with a CPU generator seeded 42 is [2, 3, 0, 1]; pairs in lexicographic order are
    # (0,0) (0,1) (1,0) (1,1), so the first three picks are (1,0) (1,1) (0,0) with labels 0 1 0.
    assert torch.randperm(4, generator=torch.Generator().manual_seed(42)).tolist() == [2, 3, 0, 1]
    inputs, labels = generate_facts(3, n_in=2, n_out=2)
    assert inputs.tolist() == [[1, 0], [0, 0], [1, 1]]
    assert labels.tolist() == [0, 0, 1]


@pytest.mark.parametrize("n_facts", [1, 17, 208, 1000, 1024])
def test_paper_sizes_invariants(n_facts):
    inputs, labels = generate_facts(n_facts, n_in=32, n_out=16)
    assert inputs.shape == (n_facts, 2) and labels.shape == (n_facts,)
    assert torch.all(labels[1:] >= labels[:-1])
    assert len({tuple(p) for p in inputs.tolist()}) == n_facts
    counts = torch.bincount(labels, minlength=16)
    assert counts.max() - counts.min() <= 1
    # Same (pair, label) set as the unsorted published assignment; the ordering comes from argsort(labels).
    perm = torch.randperm(1024, generator=torch.Generator().manual_seed(42))[:n_facts]
    pairs = torch.stack([perm // 32, perm % 32], dim=1)
    raw = torch.arange(n_facts) % 16
    order = torch.argsort(raw)
    assert torch.equal(inputs, pairs[order]) and torch.equal(labels, raw[order])


def test_prefix_property():
    # Fewer facts are the first picks of the same shuffle, so the capacity search sees nested sets.
    big, big_labels = generate_facts(64, n_in=32, n_out=16)
    small, small_labels = generate_facts(32, n_in=32, n_out=16)
    big_set = {(tuple(p), l) for p, l in zip(big.tolist(), big_labels.tolist())}
    assert {(tuple(p), l) for p, l in zip(small.tolist(), small_labels.tolist())} <= big_set


def test_fact_sequence_prefixes_are_the_fact_sets():
    inputs, labels = fact_sequence(200, n_in=32, n_out=16)
    for n in (1, 17, 64, 200):
        sorted_inputs, sorted_labels = generate_facts(n, n_in=32, n_out=16)
        prefix = {(tuple(p), l) for p, l in zip(inputs[:n].tolist(), labels[:n].tolist())}
        assert prefix == {(tuple(p), l) for p, l in zip(sorted_inputs.tolist(), sorted_labels.tolist())}


def test_too_many_facts():
    with pytest.raises(MechmemError, match="distinct facts"):
        generate_facts(1025, n_in=32, n_out=16)
    with pytest.raises(MechmemError):
        generate_facts(0, n_in=32, n_out=16)


def test_generator_device_option():
    # The published runs drew the permutation on CUDA; the device is an option, CPU by default.
    default = generate_facts(50, n_in=32, n_out=16)
    on_cpu = generate_facts(50, n_in=32, n_out=16, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip(default, on_cpu))
    if torch.cuda.is_available():
        inputs, labels = generate_facts(50, n_in=32, n_out=16, device="cuda")
        assert inputs.device.type == "cpu" and len({tuple(p) for p in inputs.tolist()}) == 50
        assert torch.equal(labels, default[1])
    else:
        with pytest.raises(MechmemError, match="device 'cuda'"):
            generate_facts(50, n_in=32, n_out=16, device="cuda")
