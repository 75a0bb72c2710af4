"""Token names everywhere: a loaded checkpoint's model speaks strings through TransformerLens's own helpers
(both backends), TransformerLens's `detect_head` reads it from a string, figures and the report's heatmaps
label positions with tokens, and the CircuitsVis example builds its input from `to_str_tokens`."""

import runpy
import sys
import warnings

import pytest
import torch
from helpers import ROOT

from mechmem.analysis.frames import position_labels
from mechmem.checkpoint import load_checkpoint, read_payload, save_checkpoint

OLD = ROOT / "tests" / "data" / "format1_tl3.pt"
"""A format-1 checkpoint (no token names) of the permutation task with V = 4."""


@pytest.fixture(scope="module")
def loaded():
    return load_checkpoint(OLD)


def test_an_old_checkpoint_names_its_tokens_from_its_task(loaded):
    names = loaded.task.token_names()
    assert loaded.token_names == names and len(names) == loaded.model.cfg.d_vocab
    ids = torch.tensor([3, 1, 4, 4, 2])
    assert loaded.model.to_str_tokens(ids) == [names[i] for i in ids.tolist()]
    assert loaded.model.to_string(ids) == " ".join(names[i] for i in ids.tolist())
    assert loaded.model.to_tokens(loaded.model.to_string(ids)).tolist() == [ids.tolist()]
    batch = torch.tensor([[1, 2], [4, 3]])
    assert loaded.model.to_string(batch) == ["1 2", "4 3"]


def test_a_saved_checkpoint_carries_the_names_and_its_model_round_trips(loaded, tmp_path):
    path = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=loaded.model,
        model_config=loaded.model_config,
        task_name=loaded.task_name,
        task_config=loaded.task_config,
    )
    assert read_payload(path)["token_names"] == loaded.task.token_names()
    model = load_checkpoint(path).model
    tokens = loaded.task.eval_batch(4, generator=torch.Generator().manual_seed(0)).tokens
    for row in tokens:
        assert model.to_tokens(model.to_string(row))[0].tolist() == row.tolist()
        assert model.to_str_tokens(row) == loaded.model.to_str_tokens(row)


@pytest.mark.parametrize("head", ["previous_token_head", "duplicate_token_head"])
def test_transformer_lens_detect_head_reads_a_string(loaded, head):
    """TransformerLens's own detector on a string equals its definition on the ids named by hand."""
    from transformer_lens.head_detector import detect_head

    model, names = loaded.model, loaded.token_names
    text = "2 1 2 3 1"
    ids = torch.tensor([[names.index(word) for word in text.split()]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = detect_head(model, text, head)
    _, cache = model.run_with_cache(ids)
    n = ids.shape[1]
    earlier = torch.ones(n, n).tril(-1).bool()
    want_pattern = (
        torch.eye(n).roll(-1, dims=1).tril(-1).bool()
        if head == "previous_token_head"
        else earlier & (ids[0][:, None] == ids[0][None, :])
    )
    for layer in range(model.cfg.n_layers):
        pattern = cache["pattern", layer][0]  # head query key
        want = (pattern * want_pattern).sum((1, 2)) / pattern.sum((1, 2))
        torch.testing.assert_close(got[layer].float(), want.float(), rtol=1e-5, atol=1e-6)


def test_patching_heatmaps_label_positions_with_tokens(loaded):
    from mechmem.analysis.logit_lens import logit_lens, plot_logit_lens
    from mechmem.analysis.patching import plot_patching, run_sweeps
    from mechmem.plotting import plt
    from mechmem.report.interactive import sweep_map

    task, model = loaded.task, loaded.model
    pair = task.patching_pair(16, generator=torch.Generator().manual_seed(0))
    labels = position_labels(pair.clean[0], task.token_names())
    names = task.token_names()
    assert labels == [f"{names[t]} (pos{i})" for i, t in enumerate(pair.clean[0].tolist())]
    results = run_sweeps(model, pair, ["resid_pre", "attn_head_out_by_pos"])
    fig = plot_patching(results["resid_pre"], positions=labels)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == labels
    assert list(ax.get_yticks()) == list(range(model.cfg.n_layers))  # one layer: a tick at 0, not +-0.5
    plt.close(fig)
    by_pos = plot_patching(results["attn_head_out_by_pos"], positions=labels)  # positions down the rows
    assert [t.get_text() for t in by_pos.axes[0].get_yticklabels()] == labels
    plt.close(by_pos)
    view = sweep_map(results["attn_head_out_by_pos"], labels)
    assert view["cols"] == labels  # positions drawn across
    with pytest.raises(ValueError, match="tick labels"):
        plot_patching(results["resid_pre"], positions=labels[:-1])
    batch = task.eval_batch(8, generator=torch.Generator().manual_seed(1))
    lens = logit_lens(model, batch.tokens, batch.targets, batch.loss_mask)
    first = position_labels(batch.tokens[0], names)
    fig = plot_logit_lens(lens, positions=first)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == first
    plt.close(fig)


def test_the_circuitsvis_example_passes_to_str_tokens_without_circuitsvis(
    loaded, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "circuitsvis", None)  # as if not installed
    monkeypatch.setenv("MECHMEM_EXAMPLE_CKPT", str(OLD))
    monkeypatch.setenv("MECHMEM_EXAMPLE_OUT", str(tmp_path))
    threads = torch.get_num_threads()
    try:
        ns = runpy.run_path(str(ROOT / "examples" / "circuitsvis_attention.py"))
    finally:
        torch.set_num_threads(threads)
    assert "CircuitsVis is not installed" in capsys.readouterr().out
    tokens, view = ns["tokens"], ns["views"][0]
    assert view["tokens"] == loaded.model.to_str_tokens(tokens[0])
    assert view["tokens"] == [loaded.token_names[i] for i in tokens[0].tolist()]
    _, cache = loaded.model.run_with_cache(tokens)
    torch.testing.assert_close(view["attention"], cache["pattern", 0][0])
    assert list(tmp_path.iterdir()) == []  # nothing written without CircuitsVis
