"""Sweep plumbing: JSONL records are appended once per
cell and finished cells are skipped; fits recover laws."""

import json
import math
import socket
import subprocess
import threading
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from mechmem.cli import run_script
from mechmem.models.facts import FactsModelConfig
from mechmem_papers.memorisation.batched import Schedule
from mechmem_papers.memorisation.figures import plot_scaling
from mechmem_papers.memorisation.fits import fit_scaling
from mechmem_papers.memorisation.scripts import sweep_facts
from mechmem_papers.memorisation.sweep import (
    SearchCell,
    in_progress,
    load_records,
    run_sweep,
    scaling_cells,
    scaling_fits,
    table_cells,
    table_rows,
)
from mechmem_papers.memorisation.trials import snapshot_dir


def test_run_sweep_appends_and_skips(tmp_path):
    cfg = FactsModelConfig(n_in=4, n_out=2, d_model=2, d_mlp=2, mixing="2emb", mlp=False, norms=False)
    cells = [SearchCell(cfg, 0, Schedule(max_epochs=40, patience=10), precision=4)]
    path = tmp_path / "sweep.jsonl"
    first = run_sweep(cells, path, progress=False)
    again = run_sweep(cells, path, progress=False)
    records = load_records(path)
    assert list(first) == [cells[0].key] and again == first and records == list(first.values())
    assert records[0]["key"] == cells[0].key and records[0]["seeds"] == list(range(11))
    assert records[0]["precision"] == 4 and records[0]["bracket"] == "authors"
    assert 0 <= records[0]["all"] <= records[0]["most"] <= records[0]["any"] <= 16
    assert table_rows(records)[0][0] == "2emb (d=2)" and records[0]["facts_device"] == "cpu"
    assert len(table_cells(None, 2, Schedule())) == 108 and len(table_cells("2emb+mlp", 1, Schedule())) == 16


def test_an_interrupted_cell_resumes_after_its_last_finished_training(tmp_path, monkeypatch):
    from mechmem_papers.memorisation import capacity

    cfg = FactsModelConfig(n_in=6, n_out=3, d_model=3, d_mlp=3, mixing="2emb", norms=False)
    cells = [SearchCell(cfg, 0, Schedule(max_epochs=40, patience=10), precision=2)]
    whole = run_sweep(
        cells, tmp_path / "a.jsonl", progress=False, trials=tmp_path / "t.jsonl", snapshot_every=0.0
    )
    trials = []
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    record = whole[cells[0].key]
    assert sorted(int(n) for n in record["successes"]) == sorted(int(json.loads(x)["n"]) for x in lines)
    # The run is cut during its fourth training: three trainings and no cell record were written.
    (tmp_path / "t2.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    real = capacity.train_batched
    monkeypatch.setattr(
        capacity, "train_batched", lambda *a, **k: trials.append(a[2].shape[0]) or real(*a, **k)
    )
    resumed = run_sweep(cells, tmp_path / "b.jsonl", progress=False, trials=tmp_path / "t2.jsonl")[
        cells[0].key
    ]
    assert len(trials) == len(lines) - 3  # only the trainings not finished before
    assert resumed["searches"] == record["searches"] and resumed["successes"] == record["successes"]
    assert resumed["counts_from_earlier_runs"] == 3 and "counts_from_earlier_runs" not in record
    assert len((tmp_path / "t2.jsonl").read_text().splitlines()) == len(lines)  # the cut line was dropped
    # Each training saved its state while it ran (every epoch here) and removed it once its line was written.
    assert snapshot_dir(tmp_path / "t.jsonl").is_dir() and not any(
        snapshot_dir(tmp_path / "t.jsonl").iterdir()
    )


def test_a_running_search_shows_each_criterion_once_its_search_has_ended(tmp_path):
    """`in_progress` on the first k trainings of a finished cell: a criterion's capacity is the finished
    record's exactly when every fact count its search tried is among them, else None (running)."""
    cfg = FactsModelConfig(n_in=6, n_out=3, d_model=3, d_mlp=3, mixing="2emb", norms=False)
    cells = [SearchCell(cfg, 0, Schedule(max_epochs=40, patience=10), precision=2)]
    record = run_sweep(cells, tmp_path / "a.jsonl", progress=False, trials=tmp_path / "t.jsonl")[cells[0].key]
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    tried = {c: {n for n, _ in s["trace"]} for c, s in record["searches"].items()}
    assert len(lines) >= 3 and len({frozenset(t) for t in tried.values()}) >= 2  # criteria end apart
    mixed = set()
    for k in range(len(lines) + 1):
        (tmp_path / "part.jsonl").write_text("".join(f"{x}\n" for x in lines[:k]))
        running = in_progress(tmp_path / "part.jsonl", cells, done=set())
        if k == 0:
            assert running == []
            continue
        (row,) = running
        done = {int(json.loads(x)["n"]) for x in lines[:k]}
        assert row["trainings"] == k and row["key"] == cells[0].key and row["d"] == cfg.d_model
        for crit, counts in tried.items():
            assert row[crit] == (record[crit] if counts <= done else None), (k, crit)
        mixed.add(tuple(row[c] is None for c in tried))
    assert len(mixed) >= 2  # some prefix ends one criterion's search before another's
    assert in_progress(tmp_path / "t.jsonl", cells, done={cells[0].key}) == []  # a finished cell is a record


def test_fits_recover_known_laws():
    ds = [16, 32, 64, 128]
    fit = fit_scaling(ds, [3.0 * d**2 / math.log(d) for d in ds])
    assert math.isclose(fit.a, 3.0, rel_tol=1e-9)
    power = fit_scaling(ds, [0.5 * d**1.8 for d in ds])
    assert math.isclose(power.k, 1.8, rel_tol=1e-9) and math.isclose(power.b, 0.5, rel_tol=1e-9)
    one = fit_scaling([16, 32], [0, 100.0])  # zero capacities are dropped; one point fixes a only
    assert one.d == [32] and math.isclose(one.a, 100 / (32**2 / math.log(32))) and math.isnan(one.k)
    assert len(plot_scaling({"any": fit}).axes) == 1


def test_scaling_fits_group_by_variant_and_criterion():
    recs = [{"variant": "v", "d": d, "any": 2 * d * d, "most": d * d, "all": d} for d in (16, 32, 16)]
    fits = scaling_fits(recs)
    assert set(fits) == {"v any", "v most", "v all"} and fits["v any"].capacity == [512.0, 2048.0]
    assert math.isclose(fits["v most"].k, 2.0)


def test_fact_device_is_part_of_the_key_and_the_simple_scaling_model_is_a_table_cell():
    schedule = Schedule()
    (cpu,), (cuda,) = (table_cells("2emb+mlp/relu", 1, schedule, facts_device=dev) for dev in ("cpu", "cuda"))
    assert cuda.key == cpu.key + "|facts=cuda"
    (nb16,) = scaling_cells("nb", [16], 1, schedule)  # the published simple model: no bias, no norms, ReLU
    assert nb16.key == cpu.key and nb16.config == cpu.config


def test_unavailable_fact_device_is_one_line(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    code = run_script(
        sweep_facts.main,
        [
            "table",
            "--only",
            "2emb+mlp/relu",
            "--facts-device",
            "cuda",
            "--max-epochs",
            "2",
            "--patience",
            "1",
            "--data",
            str(tmp_path / "t.jsonl"),
        ],
    )
    err = capsys.readouterr().err
    assert code != 0 and "cuda" in err and "Traceback" not in err


def test_a_helper_worker_shares_a_cells_trainings_with_the_worker_searching_it(tmp_path, monkeypatch):
    """`help_cells` runs some criteria's searches and writes no record; a whole-cell worker then trains only
    the counts the helper did not, including those the helper finishes while that worker is already running
    (the trials file is read before each training), and its record equals a single worker's."""
    from mechmem_papers.memorisation import capacity
    from mechmem_papers.memorisation.sweep import help_cells

    cfg = FactsModelConfig(n_in=6, n_out=3, d_model=3, d_mlp=3, mixing="2emb", norms=False)
    cells = [SearchCell(cfg, 0, Schedule(max_epochs=40, patience=10), precision=2)]
    alone = run_sweep(cells, tmp_path / "a.jsonl", progress=False, trials=tmp_path / "a_t.jsonl")[
        cells[0].key
    ]
    tried = {c: {n for n, _ in s["trace"]} for c, s in alone["searches"].items()}
    theirs = tried["most"] | tried["all"]
    assert theirs - tried["any"] and tried["any"] - theirs  # each worker has counts of its own

    helped = help_cells(cells, tmp_path / "b.jsonl", ("most", "all"), tmp_path / "helper.jsonl")[cells[0].key]
    assert set(helped["searches"]) == {"most", "all"} and not (tmp_path / "b.jsonl").exists()
    assert all(helped["searches"][c] == alone["searches"][c] for c in ("most", "all"))
    helper_lines = (tmp_path / "helper.jsonl").read_text().splitlines()
    assert {json.loads(x)["n"] for x in helper_lines} == theirs

    # The whole-cell worker starts on an empty trials file; the helper's lines land there during its first
    # training, as if the helper finished them meanwhile.
    trained, real = [], capacity.train_batched

    def train(*args, **kwargs):
        if not trained:
            (tmp_path / "t.jsonl").write_text("".join(f"{x}\n" for x in helper_lines))
        trained.append(args[2].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(capacity, "train_batched", train)
    record = run_sweep(cells, tmp_path / "b.jsonl", progress=False, trials=tmp_path / "t.jsonl")[cells[0].key]
    first = alone["searches"]["any"]["trace"][0][0]
    assert sorted(trained) == sorted({first} | tried["any"] - theirs)
    assert record["searches"] == alone["searches"] and record["successes"] == alone["successes"]
    assert record["counts_from_earlier_runs"] == len(theirs - {first})
    assert load_records(tmp_path / "b.jsonl") == [record]


def test_a_helper_worker_needs_a_trials_file(tmp_path, capsys):
    argv = ["table", "--only", "2emb", "--criteria", "all", "--trials", "none", "--data", str(tmp_path / "x")]
    assert run_script(sweep_facts.main, argv) != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--criteria" in err and not (tmp_path / "x").exists()


@pytest.mark.subprocess
def test_a_claim_is_held_only_by_a_live_process_of_this_host(tmp_path):
    import os

    from mechmem_papers.memorisation.snapshots import Snapshots, claim, claim_path, held_elsewhere, release

    saves = Snapshots(tmp_path / "s" / "x.pt", "key")
    assert not held_elsewhere(saves)  # no claim
    claim(saves)
    assert claim_path(saves).exists() and not held_elsewhere(saves)  # our own
    other = subprocess.Popen(["sleep", "600"])
    ended = subprocess.Popen(["true"])
    ended.wait()
    try:
        for pid, host, held in [
            (other.pid, socket.gethostname(), True),
            (ended.pid, socket.gethostname(), False),
            (other.pid, "elsewhere", False),
        ]:
            claim_path(saves).write_text(json.dumps({"host": host, "pid": pid}))
            assert held_elsewhere(saves) is held, (pid, host)
        claim_path(saves).write_text(json.dumps({"host": socket.gethostname(), "pid": other.pid}))
        release(saves)
        assert claim_path(saves).exists()  # another live worker's claim stays
        claim_path(saves).write_text('{"host": "' + socket.gethostname() + '", "pi')  # cut mid-write
        assert not held_elsewhere(saves)
        claim_path(saves).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        release(saves)
        assert not claim_path(saves).exists()
    finally:
        other.kill()
        other.wait()


class ClaimedCell(NamedTuple):
    """A small cell searched by one worker alone, and a fresh trials file whose first count another live
    process has claimed (`claimed_cell`)."""

    cells: list[SearchCell]
    alone: dict
    """The record of the search by one worker alone."""
    lines: list[str]
    """Its trials lines, in training order."""
    first: int
    """The first count its search trained: the one claimed by the other process."""
    trials: Path
    claim: Path
    trained: list[int]
    """The fact counts trained in this process from here on."""


@pytest.fixture
def claimed_cell(tmp_path, monkeypatch):
    from mechmem_papers.memorisation import capacity
    from mechmem_papers.memorisation import trials as trials_module
    from mechmem_papers.memorisation.snapshots import claim_path

    cfg = FactsModelConfig(n_in=6, n_out=3, d_model=3, d_mlp=3, mixing="2emb", norms=False)
    cells = [SearchCell(cfg, 0, Schedule(max_epochs=40, patience=10), precision=2)]
    alone = run_sweep(cells, tmp_path / "a.jsonl", progress=False, trials=tmp_path / "a_t.jsonl")
    lines = (tmp_path / "a_t.jsonl").read_text().splitlines()
    first, trials = json.loads(lines[0])["n"], tmp_path / "t.jsonl"
    claim = claim_path(trials_module.training_snapshots(trials, cells[0].key, first))
    other = subprocess.Popen(["sleep", "600"])
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"host": socket.gethostname(), "pid": other.pid}))
    monkeypatch.setattr(trials_module, "CLAIM_POLL", 0.05)
    trained, real = [], capacity.train_batched
    monkeypatch.setattr(
        capacity, "train_batched", lambda *a, **k: trained.append(a[2].shape[0]) or real(*a, **k)
    )
    yield ClaimedCell(cells, alone[cells[0].key], lines, first, trials, claim, trained)
    other.kill()
    other.wait()


@pytest.mark.subprocess
def test_a_search_waits_for_a_count_another_worker_is_training(tmp_path, claimed_cell):
    """A count claimed by another live worker is not trained: the search waits until that worker's line
    arrives in the trials file, reads it, and ends as a single worker would; it leaves no claim behind."""
    c = claimed_cell
    finish = threading.Timer(0.5, lambda: c.trials.write_text(c.lines[0] + "\n"))  # the other worker's line
    finish.start()
    try:
        record = run_sweep(c.cells, tmp_path / "b.jsonl", progress=False, trials=c.trials)[c.cells[0].key]
    finally:
        finish.cancel()
    assert c.first not in c.trained and len(c.trained) == len(c.lines) - 1
    assert record["searches"] == c.alone["searches"] and record["successes"] == c.alone["successes"]
    assert list(c.claim.parent.iterdir()) == [c.claim]  # the other worker's claim, and none of ours


@pytest.mark.subprocess
def test_status_shows_each_training_in_progress_as_its_uninterrupted_run_had_it(
    tmp_path, monkeypatch, capsys
):
    """A training stopped after `cut` epochs: `brief` of its snapshot agrees with the uninterrupted training
    (inits stored by then, inits still training, the epoch), and `sweep_facts status` prints it with its
    worker (here a claim whose process has ended)."""

    from mechmem.tasks.facts import generate_facts
    from mechmem_papers.memorisation import batched
    from mechmem_papers.memorisation import trials as trials_module
    from mechmem_papers.memorisation.snapshots import claim_path

    cfg = FactsModelConfig(n_in=8, n_out=4, d_model=3, d_mlp=3, mixing="2emb", norms=False)
    inputs, labels = generate_facts(48, 8, 4)
    schedule, seeds, cut = Schedule(max_epochs=400, patience=400), list(range(6)), 450
    whole = batched.train_batched(cfg, inputs, labels, seeds, schedule)
    epochs, stored = whole.epochs.tolist(), whole.success.tolist()
    # By the cut some inits have stored every fact, some have stopped without, and one trains in phase 2.
    assert {(s, e <= cut) for s, e in zip(stored, epochs)} == {(True, True), (False, True), (True, False)}
    trials = tmp_path / "facts_trials.jsonl"
    saves = trials_module.training_snapshots(trials, "cellkey", 48, every=1e9)
    saves.path.parent.mkdir(parents=True)
    calls, real = [0], batched.loss_grad

    def stop_at_cut(*args, **kwargs):
        calls[0] += 1
        if calls[0] > cut:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(batched, "loss_grad", stop_at_cut)
    with pytest.raises(KeyboardInterrupt):
        batched.train_batched(cfg, inputs, labels, seeds, schedule, snapshots=saves)
    ended = subprocess.Popen(["true"])
    ended.wait()
    claim_path(saves).write_text(json.dumps({"host": socket.gethostname(), "pid": ended.pid}))

    (b,) = trials_module.trainings_in_progress(trials)
    assert b.key == "cellkey|n=48" and b.inits == len(seeds) and b.worker == "ended"
    assert b.stored == sum(s and e <= cut for s, e in zip(stored, epochs))
    assert b.training == sum(e > cut for e in epochs) and (b.phase, b.epoch) == (2, cut - 400)
    assert 0 < b.best < 48 and b.seconds > 0
    assert run_script(sweep_facts.main, ["status", "--trials", str(trials)]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[:5] == ["cellkey", "48", str(b.stored), "of", str(b.inits)] and row[-1] == "ended"
    saves.path.write_bytes(b"PK\x03\x04 cut")
    assert run_script(sweep_facts.main, ["status", "--trials", str(trials)]) != 0
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_next_count_is_the_count_the_search_trains_next(tmp_path):
    """On every prefix of a finished cell's trainings (in the order one worker ran them), `next_count` is the
    count that worker trained next, and None once all were run."""
    from mechmem_papers.memorisation.capacity import next_count

    cfg = FactsModelConfig(n_in=6, n_out=3, d_model=3, d_mlp=3, mixing="2emb", norms=False)
    cells = [SearchCell(cfg, 0, Schedule(max_epochs=40, patience=10), precision=2)]
    run_sweep(cells, tmp_path / "a.jsonl", progress=False, trials=tmp_path / "t.jsonl")
    order = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(order) >= 4
    for k in range(len(order) + 1):
        known = {r["n"]: r["successes"] for r in order[:k]}
        want = order[k]["n"] if k < len(order) else None
        assert next_count(known, 11, 36, 2) == want, k
    assert next_count({}, 11, 36, 2, ("all",)) == order[0]["n"]  # every search starts at the same count


@pytest.mark.subprocess
def test_a_speculating_worker_trains_a_likely_next_count_while_it_waits(tmp_path, claimed_cell):
    """While another live worker trains the count the search needs, a speculating worker trains a count
    the search asks next under some outcome of it; the record is a single worker's, the claimed count
    untrained."""
    from mechmem_papers.memorisation.capacity import next_count

    c, seen = claimed_cell, []

    def deliver():  # the other worker finishes once this one has trained a count of its own (or after 20 s)
        for _ in range(2000):
            if c.trained:
                break
            threading.Event().wait(0.01)
        seen.append(len(c.trained))
        with open(c.trials, "a") as fh:
            fh.write(c.lines[0] + "\n")

    threading.Thread(target=deliver, daemon=True).start()
    record = run_sweep(c.cells, tmp_path / "b.jsonl", progress=False, trials=c.trials, speculate=True)
    assert c.first not in c.trained and seen[0] >= 1  # it trained while the other still trained `first`
    assert c.trained[0] in {next_count({c.first: k}, 11, 36, 2) for k in range(12)}
    assert record[c.cells[0].key]["searches"] == c.alone["searches"]
    assert record[c.cells[0].key]["successes"] == c.alone["successes"]


def test_a_brief_gives_the_phase_and_epoch_of_the_init_furthest_along(tmp_path):
    import torch

    from mechmem_papers.memorisation.snapshots import Snapshots, brief, save_snapshot

    saves = Snapshots(tmp_path / "x.pt", "cell|n=10")
    stack = {
        "ids": torch.tensor([0, 2, 3]),
        "phase": torch.tensor([0, 1, 0]),
        "phase_epoch": torch.tensor([500, 20, 500]),
        "best": torch.tensor([7, 9, 8]),
    }
    save_snapshot(saves, stack, {}, {}, torch.tensor([False, True, False, False]), 12.5)
    b = brief(saves.path)
    assert (b.inits, b.stored, b.training, b.phase, b.epoch, b.best) == (4, 1, 3, 2, 20, 9)
    assert b.seconds == 12.5 and b.worker == "none"
