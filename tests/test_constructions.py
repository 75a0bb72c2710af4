"""The challenge model, the published construction,
Appendix A, our key-value table and the capacity search."""

import math

import pytest
import torch
from helpers import assert_no_hooks

from mechmem.checkpoint import load_checkpoint, save_checkpoint
from mechmem.errors import MechmemError
from mechmem.tasks.facts import generate_facts
from mechmem_papers.memorisation.capacity import CapacityResult
from mechmem_papers.memorisation.constructions.appendix_a import appendix_a
from mechmem_papers.memorisation.constructions.assignment import assign_neurons, max_overlap, overlap_feasible
from mechmem_papers.memorisation.constructions.experiments import capacity_of, fit_ratio, mode_fit, shared_ds
from mechmem_papers.memorisation.constructions.keyvalue import keyvalue_construction
from mechmem_papers.memorisation.constructions.model import ChallengeConfig, ChallengeMLP
from mechmem_papers.memorisation.constructions.published import published_construction, published_embeddings
from mechmem_papers.memorisation.constructions.training import (
    ChallengeTrainConfig,
    full_score,
    hidden_activations,
    stacked_accuracy,
    train_full,
    train_unembedding,
    unembedding_score,
)
from mechmem_papers.memorisation.search import SearchResult


def naive_logits(E1, E2, U, inputs):
    """One fact at a time, one neuron at a time."""
    E1, E2, U = E1.detach(), E2.detach(), U.detach()
    out = torch.zeros(len(inputs), U.shape[1])
    for f, (a, b) in enumerate(inputs.tolist()):
        for i in range(E1.shape[1]):
            h = max(0.0, float(E1[a, i] + E2[b, i]))
            out[f] += h * U[i]
    return out


def naive_accuracy(E1, E2, U, inputs, labels):
    logits = naive_logits(E1, E2, U, inputs)
    correct = 0
    for row, y in zip(logits.tolist(), labels.tolist()):
        correct += row.index(max(row)) == y  # first maximum, as torch.argmax
    return correct / len(labels)


# ----------------------------------------------------------------------------- model


def test_model_forward_matches_naive_loop_and_hooks():
    cfg = ChallengeConfig(n_in=6, d_mlp=5, n_out=4, n_models=3)
    model = ChallengeMLP(cfg, generator=torch.Generator().manual_seed(1))
    inputs = torch.tensor([[0, 1], [5, 5], [3, 2]])
    logits, cache = model.run_with_cache(inputs)
    assert logits.shape == (3, 3, 4)
    for m in range(3):
        torch.testing.assert_close(logits[m], naive_logits(model.E1[m], model.E2[m], model.U[m], inputs))
    assert set(cache.keys()) == {"hook_embed1", "hook_embed2", "mlp.hook_pre", "mlp.hook_post", "hook_logits"}
    torch.testing.assert_close(
        cache["mlp.hook_post"], torch.relu(cache["hook_embed1"] + cache["hook_embed2"])
    )
    assert_no_hooks(model)


def test_checkpoint_round_trip(tmp_path):
    cfg = ChallengeConfig(n_in=8, d_mlp=9, n_out=8, output_bias=True)
    inputs, labels = generate_facts(64, 8, 8)
    E1, E2, U, _ = appendix_a(inputs, labels, 8, 8)
    model = ChallengeMLP(cfg).set_weights(
        E1[None, :, :9], E2[None, :, :9], U[None, :9], torch.arange(8.0)[None]
    )
    path = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=model,
        model_config=cfg,
        task_name="facts",
        task_config={"n_facts": 64, "n_in": 8, "n_out": 8, "seed": 42},
    )
    ckpt = load_checkpoint(path)
    assert ckpt.model_config == cfg and isinstance(ckpt.model, ChallengeMLP)
    torch.testing.assert_close(ckpt.model(inputs), model(inputs))


def test_bad_config_and_input_raise():
    with pytest.raises(MechmemError):
        ChallengeConfig(n_in=0, d_mlp=4, n_out=4)
    with pytest.raises((MechmemError, TypeError)):  # jaxtyping's check fires first under pytest
        ChallengeMLP(ChallengeConfig(4, 4, 4))(torch.zeros(3, 3, dtype=torch.long))


# ----------------------------------------------------------------------------- published construction


@pytest.mark.parametrize(
    "d_mlp,n_out,s,strict",
    [
        (16, 16, 3, True),
        (16, 16, 4, True),
        (8, 8, 2, True),
        (32, 32, 5, False),
        (16, 16, 7, False),
        (8, 8, 8, False),
    ],
)
def test_assignment_invariants(d_mlp, n_out, s, strict):
    conn = assign_neurons(d_mlp, n_out, s, generator=torch.Generator().manual_seed(0))
    assert conn.shape == (d_mlp, n_out)
    assert (conn.sum(0) == s).all()
    loads = conn.sum(1)
    # Strict cases are far from the pair-packing bound: perfectly balanced and overlap <= 1. Near or past the
    # bound the local search may leave a load spread of 2 or an overlap of 2 (the authors' code also
    # "ideally").
    assert int(loads.max() - loads.min()) <= (1 if strict else 2)
    assert overlap_feasible(d_mlp, n_out, s) or not strict
    assert max_overlap(conn) <= (1 if strict else max(2, s * s // d_mlp + 2))


def test_published_embedding_rule():
    """Guard neurons are silent on their labels' facts, so the true logit is exactly 0 and all logits <= 0."""
    inputs, labels = generate_facts(96, 32, 16)
    E1, E2, U = published_construction(
        inputs, labels, 32, 16, 16, 3, 0.2, generator=torch.Generator().manual_seed(0)
    )
    assert set(E1.unique().tolist()) <= {-1.0, 0.0, 1.0} and set(E2.unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert set(U.unique().tolist()) == {-2.0, 0.0} and ((U == -2).sum(0) == 3).all()
    logits = hidden_activations(E1[None], E2[None], inputs)[0] @ U
    assert (logits.gather(1, labels[:, None]) == 0).all() and (logits <= 0).all()


def test_published_top_fraction_counts():
    """k = max(1, int(n_unique * top_fraction)) tokens per position get -1 on each guard neuron."""
    inputs, labels = generate_facts(200, 32, 16)
    conn = torch.zeros(4, 16, dtype=torch.long)
    conn[0, :4] = 1  # neuron 0 guards labels 0..3; other neurons guard nothing
    E1, E2 = published_embeddings(inputs, labels, conn, 32, 0.25, generator=torch.Generator().manual_seed(0))
    guarded = labels < 4
    for E, pos in ((E1, 0), (E2, 1)):
        n_unique = inputs[guarded, pos].unique().numel()
        assert int((E[:, 0] == -1).sum()) == max(1, int(n_unique * 0.25))
        assert (E[:, 1:] == 1).all()
    pre = E1[inputs[guarded, 0], 0] + E2[inputs[guarded, 1], 0]
    assert (pre <= 0).all()


def test_stacked_accuracy_matches_naive_loop():
    inputs, labels = generate_facts(80, 32, 16)
    built = [
        published_construction(inputs, labels, 32, 16, 16, s, 0.1, generator=torch.Generator().manual_seed(s))
        for s in (2, 3)
    ]
    E1, E2, U = (torch.stack(t) for t in zip(*built))
    fast = stacked_accuracy(hidden_activations(E1, E2, inputs) @ U, labels)
    for m in range(2):
        assert fast[m].item() == pytest.approx(naive_accuracy(E1[m], E2[m], U[m], inputs, labels))


# ----------------------------------------------------------------------------- Appendix A and key-value table


@pytest.mark.parametrize("n_in", [8, 16, 32])
@pytest.mark.parametrize("output_bias", [False, True])
def test_appendix_a_stores_all_facts(n_in, output_bias):
    n_out = n_in
    inputs, labels = generate_facts(n_in * n_in, n_in, n_out)
    E1, E2, U, b = appendix_a(inputs, labels, n_in, n_out, output_bias=output_bias)
    assert E1.shape[1] == (n_in if output_bias else n_in + 1)
    cfg = ChallengeConfig(n_in, E1.shape[1], n_out, output_bias=output_bias)
    model = ChallengeMLP(cfg).set_weights(E1[None], E2[None], U[None], None if b is None else b[None])
    with torch.no_grad():
        assert stacked_accuracy(model(inputs), labels).item() == 1.0
    # Exactly two neurons (selector and bias) fire per fact without the output bias.
    if not output_bias:
        active = (hidden_activations(E1[None], E2[None], inputs)[0] > 0).sum(1)
        assert (active <= 2).all()


def test_appendix_a_naive_check_small():
    inputs, labels = generate_facts(16, 4, 3)
    E1, E2, U, _ = appendix_a(inputs, labels, 4, 3)
    assert naive_accuracy(E1, E2, U, inputs, labels) == 1.0


def test_keyvalue_exact_below_rank_limit():
    """Every value token in at most d - 1 facts: the per-token linear systems are solved exactly -> 100%."""
    d = 16
    inputs, labels = generate_facts(200, 2 * d, d)
    assert int(torch.bincount(inputs[:, 1]).max()) <= d - 3
    E1, E2, U = keyvalue_construction(
        inputs, labels, 2 * d, d, d, 7, generator=torch.Generator().manual_seed(0), transpose=False
    )
    h = hidden_activations(E1[None], E2[None], inputs)[0]
    assert stacked_accuracy((h @ U)[None], labels).item() == 1.0
    # Each fact opens exactly its first token's key (7 selectors) plus the always-on neuron.
    assert ((h > 0).sum(1) == 8).all()
    # The summed selector activation minus k*C is the label + 1, up to float error.
    on = float(E1[:, :-1].max())
    torch.testing.assert_close(h[:, :-1].sum(1) - 7 * on, labels.float() + 1, atol=1e-3, rtol=0)


def test_keyvalue_transpose_matches_naive():
    d = 8
    inputs, labels = generate_facts(60, 2 * d, d)
    E1, E2, U = keyvalue_construction(
        inputs, labels, 2 * d, d, d, 3, generator=torch.Generator().manual_seed(1), transpose=True
    )
    fast = stacked_accuracy(hidden_activations(E1[None], E2[None], inputs) @ U, labels).item()
    assert fast == pytest.approx(naive_accuracy(E1, E2, U, inputs, labels))


# ----------------------------------------------------------------------------- training and capacity


def test_stacked_training_equals_separate_runs():
    """Adam is elementwise, so training two models stacked equals training each alone."""
    inputs, labels = generate_facts(40, 8, 4)
    cfg = ChallengeTrainConfig(max_epochs=25, patience=1000)
    model = ChallengeMLP(ChallengeConfig(8, 4, 4, n_models=2), generator=torch.Generator().manual_seed(3))
    best, (E1, _, _) = train_full(model.E1, model.E2, model.U, inputs, labels, cfg)
    for m in range(2):
        b1, (e1, _, _) = train_full(
            model.E1[m : m + 1], model.E2[m : m + 1], model.U[m : m + 1], inputs, labels, cfg
        )
        assert b1.item() == best[m].item()
        torch.testing.assert_close(e1[0], E1[m], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("patience", [3, 8, 1000])
def test_scores_equal_the_best_of_the_whole_stack(patience):
    """The searches' scores drop stopped models and end at the first perfect one: the same best accuracy as
    training the whole stack to the end, exactly, with models stopping at many different epochs."""
    inputs, labels = generate_facts(30, 8, 4)
    cfg = ChallengeTrainConfig(max_epochs=60, patience=patience)
    model = ChallengeMLP(ChallengeConfig(8, 4, 4, n_models=12), generator=torch.Generator().manual_seed(5))
    best, _ = train_full(model.E1, model.E2, model.U, inputs, labels, cfg)
    assert full_score(model.E1, model.E2, model.U, inputs, labels, cfg) == best.max().item()
    hidden = hidden_activations(model.E1.detach(), model.E2.detach(), inputs)
    for n in (30, 6):  # 6 facts: some U is perfect before the others stop
        reached, _ = train_unembedding(
            hidden[:, :n], labels[:n], 4, cfg, generator=torch.Generator().manual_seed(1)
        )
        score = unembedding_score(
            hidden[:, :n], labels[:n], 4, cfg, generator=torch.Generator().manual_seed(1)
        )
        assert score == reached.max().item()


def test_hybrid_learns_appendix_features():
    """Hybrid mode: with Appendix A features a linear readout exists; the trained U reaches high accuracy."""
    inputs, labels = generate_facts(16, 4, 2)
    E1, E2, _, _ = appendix_a(inputs, labels, 4, 2)
    best, U = train_unembedding(
        hidden_activations(E1[None], E2[None], inputs),
        labels,
        2,
        ChallengeTrainConfig(),
        generator=torch.Generator().manual_seed(0),
    )
    assert best.item() == 1.0
    assert stacked_accuracy(hidden_activations(E1[None], E2[None], inputs) @ U, labels).item() >= 0.9


def test_authors_hybrid_grid_is_their_s_sweep():
    """S values of the authors' hybrid search (`S_sweep_for` in their hc2_hybrid_capacity_search.py)."""
    from mechmem_papers.memorisation.constructions.evaluators import authors_s_values

    assert authors_s_values(16) == tuple(range(1, 11))
    assert authors_s_values(32) == (*range(1, 12), 13)
    assert authors_s_values(64) == tuple(range(1, 17))
    assert authors_s_values(256) == tuple(range(1, 25))
    assert authors_s_values(6) == tuple(range(1, 7))  # clipped to d


def test_hybrid_on_the_authors_grid_is_the_best_draw(monkeypatch):
    """One draw equals the plain hybrid on the same grid; several draws give the best of the draws computed
    by hand (draw a > 0: tie-breaks and U's initialisation from seed + a, label columns permuted); the draws
    stop at the first that stores every fact."""
    from dataclasses import replace

    from mechmem_papers.memorisation.constructions import evaluators as ev

    d, seed = 6, 3
    train = ChallengeTrainConfig(max_epochs=30, patience=10)
    grid = ev.SweepGrid(top_fractions=(0.0, 0.2), train=train, authors_attempts=1)
    same = replace(grid, hybrid_s_values=ev.authors_s_values(d), hybrid_top_fractions=grid.top_fractions)
    n, draws = 40, 3
    assert ev.published_hybrid_authors_evaluator(d, grid, seed)(n) == ev.published_hybrid_evaluator(
        d, same, seed
    )(n)
    settings = [(s, tf) for s in ev.authors_s_values(d) for tf in grid.top_fractions]

    def by_hand(n: int) -> list[float]:
        inputs, labels = generate_facts(n, 2 * d, d, seed=42)
        out = []
        for a in range(draws):
            g = torch.Generator().manual_seed(seed + a)
            columns = torch.randperm(d, generator=g) if a else None
            E1, E2, _ = ev.published_stack(n, d, settings, seed + a, columns)
            reached, _ = train_unembedding(hidden_activations(E1, E2, inputs), labels, d, train, generator=g)
            out.append(float(reached.max()))  # the whole stack trained to the end
        return out

    several = replace(grid, authors_attempts=draws)
    accs = by_hand(n)
    assert max(accs) < 1.0 and len(set(accs)) > 1  # the draws differ and none stores all 40
    assert ev.published_hybrid_authors_evaluator(d, several, seed)(n) == max(accs)
    small = by_hand(6)
    assert small.index(1.0) < draws - 1  # a later draw stores them all: the last is never trained
    calls = []
    real = ev.unembedding_score
    monkeypatch.setattr(ev, "unembedding_score", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert ev.published_hybrid_authors_evaluator(d, several, seed)(6) == 1.0
    assert len(calls) == small.index(1.0) + 1


def test_int8_rounding_keeps_the_constructions_and_errs_by_half_a_step():
    from mechmem_papers.memorisation.constructions.int8 import int8_rounded

    w = torch.randn(50, 7, generator=torch.Generator().manual_seed(0)) * 3
    q, step = int8_rounded(w), float(w.abs().max()) / 127
    assert float((q - w).abs().max()) <= step / 2 + 1e-6
    assert torch.unique(torch.round(q / step)).numel() <= 255
    assert float(q.abs().max()) == pytest.approx(float(w.abs().max()))
    assert torch.equal(int8_rounded(torch.zeros(3)), torch.zeros(3))
    inputs, labels = generate_facts(20, 8, 4)
    built = published_construction(
        inputs, labels, 8, 4, 4, 2, 0.2, generator=torch.Generator().manual_seed(0)
    )
    assert all(torch.equal(int8_rounded(t), t) for t in built)  # values {+1, 0, -1} and {0, -2}: exact


def test_int8_check_rebuilds_the_weights_the_search_judged():
    """The int8 check's accuracy before rounding is the evaluator's for the constructions (the same weights),
    and at most the best reached during training for the trained mode (it judges the final weights)."""
    from mechmem_papers.memorisation.constructions import evaluators as ev
    from mechmem_papers.memorisation.constructions.int8 import int8_row

    grid = ev.SweepGrid(
        n_inits=2,
        s_values=(1, 2),
        top_fractions=(0.0, 0.2),
        retries=2,
        key_retries=2,
        train=ChallengeTrainConfig(max_epochs=40, patience=10),
    )
    d = 6
    for mode, n in (("published_hand", 10), ("keyvalue_hand", 30), ("trained", 30)):
        row = int8_row(mode, d, "1", n, grid)
        searched = ev.EVALUATORS[mode](d, grid)(n)
        assert row["accuracy"] == searched if mode != "trained" else row["accuracy"] <= searched
        assert 0.0 <= row["accuracy_int8"] <= 1.0


def test_capacity_table_helpers_match_hand_computation():
    """capacity_of / mode_fit / fit_ratio on hand-made results:
    ratios of a d^2/ln d fits over shared sizes."""

    def result(mode, d, cap1, cap9):
        scores = {cap1: 1.0, cap9: 0.9}
        searches = {"1": SearchResult(cap1, [(cap1, True)]), "0.9": SearchResult(cap9, [(cap9, True)])}
        return CapacityResult(mode, d, searches, scores, 0.0, "accuracy")

    results = [
        result("trained", 16, 400, 800),
        result("trained", 32, 1600, 3200),
        result("published_hand", 16, 40, 80),
        result("published_hand", 32, 160, 320),
        result("published_hand", 64, 640, 1280),
    ]
    assert (
        capacity_of(results, "trained", 32, "0.9") == 3200
        and capacity_of(results, "trained", 64, "1") is None
    )
    assert shared_ds(results, "trained", "published_hand") == [16, 32]
    assert fit_ratio(results, "trained", "published_hand", "0.9") == pytest.approx(10.0)
    a = mode_fit(results, "published_hand", "1").a
    assert a == pytest.approx(
        math.exp(sum(math.log(c / (d * d / math.log(d))) for d, c in [(16, 40), (32, 160), (64, 640)]) / 3)
    )


def test_script_rejects_bad_mode(capsys):
    from mechmem.cli import run_script
    from mechmem_papers.memorisation.scripts import reproduce_constructions as module

    assert run_script(module.main, ["--modes", "nonsense"]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_script_end_to_end(tmp_path):
    """The --quick constructions run writes its data files,
    and the capacities it reports retrace (minutes: slow)."""
    import json

    from mechmem_papers.memorisation.scripts import reproduce_constructions as module

    assert module.main(["--quick", "--data", str(tmp_path)]) == 0
    caps = json.loads((tmp_path / "constructions_capacity_quick.json").read_text())
    misc = json.loads((tmp_path / "constructions_misc_quick.json").read_text())
    assert {r["variant"] for r in caps["results"]} >= {"trained", "published_hand", "keyvalue_hand"}
    assert set(misc) >= {"appendix_a", "sweep", "grid", "histograms"}


def test_a_stopped_search_resumes_after_its_last_finished_evaluation(tmp_path):
    """Each finished fact count is appended to the records file; a search killed part-way asks only for the
    counts it had not finished and ends where the uninterrupted search ends."""
    from mechmem_papers.memorisation.capacity import accuracy_criteria, measure_capacity
    from mechmem_papers.memorisation.constructions.experiments import recorded

    def score(n: int) -> float:  # a capacity of 300 facts at acc = 1 and 420 at acc >= 0.9
        return 1.0 if n <= 300 else 0.95 if n <= 420 else 0.5

    search = {"name": "m", "d": 16, "precision": 8, "bracket": "doubling", "start": 16, "score": "accuracy"}
    whole = measure_capacity(score, accuracy_criteria(), 1024, **search)
    asked: list[int] = []

    def stops_at_the_fifth(n: int) -> float:
        asked.append(n)
        if len(asked) == 5:
            raise KeyboardInterrupt
        return score(n)

    path = tmp_path / "evaluations.jsonl"
    with pytest.raises(KeyboardInterrupt):
        measure_capacity(recorded(stops_at_the_fifth, path, "m|d=16"), accuracy_criteria(), 1024, **search)
    first = list(asked)
    asked.clear()
    resumed = measure_capacity(
        recorded(lambda n: asked.append(n) or score(n), path, "m|d=16"), accuracy_criteria(), 1024, **search
    )
    assert 300 - 8 < whole["1"] <= 300 and 420 - 8 < whole["0.9"] <= 420
    assert (resumed["1"], resumed["0.9"]) == (whole["1"], whole["0.9"])
    assert resumed.scores == whole.scores
    assert not set(asked) & set(first[:4]) and len(asked) + 4 == len(whole.scores)
    other = recorded(lambda n: -1.0, path, "other|d=16")  # another cell's counts are not read
    assert other(first[0]) == -1.0


def test_score_benchmark_runs_both_sides_on_the_authors_grid(capsys):
    """The benchmark's two sides agree (it refuses to print a ratio otherwise), at a count stored and not."""
    from mechmem_papers.memorisation.benchmarks import construction_scores

    assert construction_scores.main(["--d", "6", "--n-facts", "6", "40"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["6", "40"] and rows[0][2] == "1.0000" and float(rows[1][2]) < 1


def test_finished_searches_leave_the_evaluations_file_and_others_stay(tmp_path):
    """At the end of a run its searches' evaluations go; a search another run stopped part-way keeps its
    own."""
    from mechmem_papers.memorisation.constructions.experiments import forget, recorded

    path = tmp_path / "evaluations.jsonl"
    for cell in ("a|d=16|prec=8", "b|d=32|prec=8"):
        evaluate = recorded(lambda n: n / 100, path, cell)
        evaluate(16), evaluate(32)
    forget(path, {"a|d=16|prec=8", "spot|d=64|n=8"})
    assert recorded(lambda n: -1.0, path, "b|d=32|prec=8")(32) == 0.32  # read back, not recomputed
    assert recorded(lambda n: -1.0, path, "a|d=16|prec=8")(32) == -1.0
    forget(path, {"a|d=16|prec=8", "b|d=32|prec=8"})
    assert not path.exists()
