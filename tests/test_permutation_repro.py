"""The permutation reproduction: Bayes table and probe against brute-force enumeration and a Bayes oracle,
role probes and key sets, and the whole pipeline (train, measure, build and write the page) on tiny presets:
the page's tables equal the record, the hand check is computed, and page.py types in no numbers."""

import copy
import itertools
import json
import math
import re
import shutil
from pathlib import Path
from statistics import mean, stdev

import pytest
import torch
from helpers import ROOT, assert_records_close, load_script

from mechmem.analysis.stats import format_mean_sd
from mechmem.config import Preset, TrainConfig
from mechmem.errors import MechmemError
from mechmem.report.document import read_prose, write_page
from mechmem.tasks.permutation import PermutationConfig, PermutationTask, bayes_posterior
from mechmem_papers.permutation import page
from mechmem_papers.permutation.run import (
    ReproConfig,
    bayes_table,
    last_step_groups,
    probe_stats,
    run_reproduction,
)
from mechmem_papers.permutation.spec import make_spec

DOCS = ROOT / "docs" / "reproductions"
V = 4


def brute_force_posterior(tokens: list[int], v: int) -> list[list[float]]:
    """Posterior of every answer by enumerating all v! permutations consistent with the pairs before it."""
    perms = list(itertools.permutations(range(1, v + 1)))
    out = []
    for k in range(0, len(tokens), 2):
        seen = [(tokens[i], tokens[i + 1]) for i in range(0, k, 2)]
        ok = [p for p in perms if all(p[x - 1] == y for x, y in seen)]
        row = [0.0] * (v + 1)
        for p in ok:
            row[p[tokens[k] - 1]] += 1.0 / len(ok)
        out.append(row)
    return out


class BayesOracle(torch.nn.Module):
    """Outputs log p_Bayes at the answer positions (a perfect model), or a fixed distortion of it."""

    def __init__(self, v: int, mix: float = 0.0):
        super().__init__()
        self.v, self.mix = v, mix
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, tokens):
        post = bayes_posterior(tokens, self.v)
        post = (1 - self.mix) * post + self.mix / (self.v + 1)
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], self.v + 1)
        logits[:, 0::2] = post.clamp_min(1e-12).log()
        return logits


@pytest.fixture(scope="module")
def task():
    return PermutationTask(PermutationConfig(vocab_size=V, repeat_ratio=0.5))


def test_posterior_matches_enumeration(task):
    seq, repeat = task.sequences(60, generator=torch.Generator().manual_seed(0), split="test")
    assert repeat.any() and not repeat.all()
    post = bayes_posterior(seq[:, :-1], V)
    for i in range(len(seq)):
        torch.testing.assert_close(post[i], torch.tensor(brute_force_posterior(seq[i, :-1].tolist(), V)))


def test_bayes_table_against_a_naive_loop(task):
    model = BayesOracle(V, mix=0.3)
    rows = bayes_table(model, task, 200, generator=torch.Generator().manual_seed(1))
    seq, repeat = task.sequences(200, generator=torch.Generator().manual_seed(1), split="test")
    steps = [str(k + 1) for k in range(V)] + [f"{V} elimination", f"{V} memorisation"]
    assert [r["step"] for r in rows] == steps
    for row in rows:
        k = int(row["step"].split()[0]) - 1
        keep = [
            i
            for i in range(200)
            if "elim" not in row["step"]
            and "memo" not in row["step"]
            or ("elim" in row["step"]) != bool(repeat[i])
        ]
        errs, cands, losses = [], [], []
        for i in keep:
            exact = brute_force_posterior(seq[i, :-1].tolist(), V)[k]
            model_p = [0.7 * e + 0.3 / (V + 1) for e in exact]
            errs += [abs(a - b) for a, b in zip(model_p, exact)]
            cands.append(sum(e > 0 for e in exact))
            losses.append(-math.log(model_p[seq[i, 2 * k + 1]]))
        assert row["n"] == len(keep)
        assert row["mae"] == pytest.approx(sum(errs) / len(errs), abs=1e-5)
        assert row["max_err"] == pytest.approx(max(errs), abs=1e-5)
        assert row["bayes_acc"] == pytest.approx(sum(1 / c for c in cands) / len(cands), abs=1e-5)
        assert row["loss"] == pytest.approx(sum(losses) / len(losses), abs=1e-4)
    perfect = bayes_table(BayesOracle(V), task, 200, generator=torch.Generator().manual_seed(1))
    assert all(r["mae"] < 1e-6 and r["loss"] == pytest.approx(r["bayes_loss"], abs=1e-5) for r in perfect)
    assert perfect[-1]["acc"] == 1.0 and perfect[-2]["acc"] == 1.0  # both final-step subgroups are certain


def test_probe_of_the_bayes_oracle_recalls(task):
    stats = probe_stats(BayesOracle(V), task, 100, generator=torch.Generator().manual_seed(2))
    assert stats["p_recall"] == pytest.approx(1.0) and stats["p_elimination"] < 1e-6
    assert stats["argmax_recall"] == 1.0


def test_role_probes_are_valid_and_change_the_answer(task):
    recall, elimination = task.role_probes(100, generator=torch.Generator().manual_seed(3))
    assert (recall.role, elimination.role) == ("recall", "elimination")
    for pair in (recall.pair, elimination.pair):
        assert (pair.correct != pair.incorrect).all()
        for tokens, answer in ((pair.clean, pair.correct), (pair.corrupted, pair.incorrect)):
            post = bayes_posterior(tokens, V)[:, -1]
            # every input is a prefix of some permutation, and its answer is certain under the posterior
            assert torch.allclose(post[torch.arange(100), answer], torch.ones(100))
    assert (recall.pair.clean[:, :-1] == recall.pair.corrupted[:, :-1]).all()  # only the last x differs
    assert (elimination.pair.clean[:, 0::2] == elimination.pair.corrupted[:, 0::2]).all()  # same x's
    matched = recall.pair.clean[recall.keys][0::2].view(100)  # keys: the matching x and its y, in order
    assert (matched == recall.pair.clean[:, -1]).all()


def test_key_sets_partition_the_prefix_on_repeats(task):
    g = last_step_groups(task, 100, generator=torch.Generator().manual_seed(4))
    total = sum(g[k].long() for k in ("match", "bound", "other_y", "other_x", "self"))
    assert (total[g["repeat"]] == 1).all()
    assert (g["match"][g["repeat"]].sum(-1) == 1).all() and (g["match"][~g["repeat"]].sum(-1) == 0).all()
    matched = g["tokens"][g["match"]]
    assert (matched == g["tokens"][g["repeat"]][:, -1]).all()


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    """A real run record from tiny presets (30 training steps each):
    two Task 2 seeds, one 2-layer V=10 run."""
    from mechmem.models.transformer_config import TransformerConfig

    def tiny(v, heads, ratio, layers=1):
        model = TransformerConfig(
            n_layers=layers,
            d_model=8 * heads,
            n_heads=heads,
            d_mlp=16 * heads,
            d_vocab=v + 1,
            n_ctx=2 * v - 1,
        )
        return Preset(
            model,
            PermutationConfig(vocab_size=v, repeat_ratio=ratio),
            TrainConfig(steps=30, batch_size=32, eval_every=30, eval_samples=64),
        )

    mp = pytest.MonkeyPatch()
    presets = dict(PermutationTask.presets)
    presets.update({"tiny1": tiny(5, 1, 0.0), "tiny2": tiny(5, 2, 0.3), "tiny10": tiny(10, 2, 0.3, layers=2)})
    mp.setattr(PermutationTask, "presets", presets)
    cfg = ReproConfig(
        task1_preset="tiny1",
        task2_preset="tiny2",
        task1_seeds=(0,),
        task2_seeds=(0, 1),
        scale_presets=("tiny10",),
        n_eval=100,
        n_analysis=60,
        role_samples=64,
        runs=str(tmp_path_factory.mktemp("runs")),
        workers=1,
    )
    try:
        yield run_reproduction(cfg, log=lambda msg: None)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def built(record):
    """The page of the tiny record, built once (its figures take a few seconds)."""
    return page.build_page(record)


def test_pipeline_writes_every_section_and_figure(record, built, tmp_path):
    assert [r["seed"] for r in record["task2"]] == [0, 1] and record["scale"][0]["vocab_size"] == 10
    assert len(record["scale"][0]["circuit_attention"]["previous_token"]) == 2  # [layer][head]
    assert record["published"] == page.load_published()  # the record keeps a copy
    report = built
    keys = [s.key for s in report.sections]
    assert keys == ["published", "setup", "bayes", "probe", "roles", "rescue", "scale", "formation"]
    # the formation data is a reference attached when the page is built (`attach_references`)
    assert [s.key for s in report.sections if s.skipped] == ["formation"]
    md = write_page(report, tmp_path / "permutation.md", prose=DOCS / "prose" / "permutation.md")
    names = {p.name for p in (tmp_path / "figures").glob("permutation_*.png")}
    assert (
        names == {f"permutation_{s.key}-{n}.png" for s in report.sections for n in s.figures}
        and len(names) == 7
    )
    assert all(f"figures/{n}" in md.read_text() for n in names)


def test_prose_blocks_match_section_keys(built):
    prose = read_prose(DOCS / "prose" / "permutation.md")
    assert set(prose) - {"intro"} <= {s.key for s in built.sections}


def _expected_published_rows(record):
    """The published table's rows from the record by hand: each published key read off the record by name."""
    published = page.load_published()["values"]
    tol = published["seed_tolerance"]["value"]

    def bayes(run, step, metric):
        return next(r[metric] for r in run["bayes"] if r["step"] == step)

    def probe(run, answer):  # the median probe where the record keeps it
        return run["probe"].get(f"median_p_{answer}", run["probe"][f"p_{answer}"])

    t1, t2 = record["task1"], record["task2"]
    ours = {"elimination_floor": [record["floor"]]}
    for group, runs in (("task1", t1), ("task2", t2)):
        ours[f"{group}_plateau"] = [r["losses"]["train"] for r in runs]
        ours[f"{group}_probe_elimination_p"] = [probe(r, "elimination") for r in runs]
        ours[f"{group}_probe_recall_p"] = [probe(r, "recall") for r in runs]
    for metric in ("acc", "mae", "max_err"):
        for k in range(1, 6):
            ours[f"task1_step{k}_{metric}"] = [bayes(r, str(k), metric) for r in t1]
        for g in ("elimination", "memorisation"):
            ours[f"task2_{g}_{metric}"] = [bayes(r, f"5 {g}", metric) for r in t2]
    rows = []
    for key, pub in published.items():
        if key not in ours:
            continue
        x = ours[key]
        # the sample sd (`stats.mean_sd`); none for one value; published values as published, not rounded
        sd = stdev(x) if len(x) > 1 else "-"
        near = [abs(mean(x) - pub["value"]) <= tol, any(abs(v - pub["value"]) <= tol for v in x)]
        span = f"{min(x):.3f} .. {max(x):.3f}"
        rows.append([f"{pub['value']:g}", pub["source"], mean(x), sd, span, len(x)])
        rows[-1] += ["yes" if n else "no" for n in near]
    assert len(rows) == len(ours) == 28
    return rows


def test_published_table_equals_record_aggregates(record, built):
    """The tiny record is not at the published schedule and has no published-schedule record beside it: its
    table is the only one, labelled a sensitivity check, without the source column."""
    published = page.load_published()["values"]
    rows = page.published_rows(record, published)
    want = _expected_published_rows(record)
    assert len(rows) == len(want)
    for row, expected in zip(rows, want):
        # the page's mean and sd against the statistics module: equal up to summation order (1e-12 relative)
        assert_records_close(row[1:], expected, rel=1e-12, abs=1e-15)
    tables = built.section("published").tables
    assert len(tables) == 1 and tables[0].caption.startswith(
        "**Sensitivity check, not the published schedule**"
    )
    assert tables[0].rows == [r[:2] + r[3:] for r in rows]
    assert page.headline_text(record, published).startswith(
        "**Sensitivity variant, not the published schedule**"
    )


def _at_published_schedule(record):
    """`record` retrained, on paper, at the published schedule (constant lr, its value, its epochs)."""
    values = {k: v["value"] for k, v in page.load_published()["values"].items()}
    out = copy.deepcopy(record)
    for key in ("task1", "task2"):
        for run in out[key]:
            run["train"].update(schedule="constant", lr=values["lr"], batch_size=values["epoch_size"])
            run["train"]["steps"] = values[f"{key}_epochs"]
            run["task"]["epoch_size"] = values["epoch_size"]
            for name in ("p_recall", "median_p_recall"):  # values the tuned record does not hold
                run["probe"][name] = run["probe"].get(name, 0.0) + 0.5
    return out


def test_first_table_is_the_published_schedule_record_beside_it(record, tmp_path):
    """A record at another schedule gets the published-schedule record of its data folder as its first table
    and headline; its own runs follow as the sensitivity check. A record beside it that is not at the
    published schedule is not put first."""
    published = page.load_published()["values"]
    paper = _at_published_schedule(record)
    assert page.attach_published_schedule(record, tmp_path) is record  # nothing beside it
    (tmp_path / "permutation-paper.json").write_text(json.dumps(record))  # not at the published schedule
    assert page.attach_published_schedule(record, tmp_path) is record
    (tmp_path / "permutation-paper.json").write_text(json.dumps(paper))
    shown = page.attach_published_schedule(record, tmp_path)
    assert page.attach_published_schedule(paper, tmp_path) is paper  # already at it: shown alone
    first, second = page.build_page(shown).section("published").tables
    assert first.caption.startswith("**Published schedule**") and "permutation-paper.json" in first.caption
    assert_records_close(first.rows, page.published_rows(paper, published), rel=1e-12, abs=1e-15)
    assert second.caption.startswith("**Sensitivity check, not the published schedule**")
    assert f"{record['task2'][0]['train']['lr']:g} = " in second.caption
    assert second.rows == [r[:2] + r[3:] for r in page.published_rows(record, published)]
    headline = page.headline_text(shown, published)
    p_paper = format_mean_sd(page.our_values(paper)["task2_probe_recall_p"])
    p_ours = format_mean_sd(page.our_values(record)["task2_probe_recall_p"])
    assert headline.startswith("**Published schedule**")
    assert headline.index(p_paper) < headline.index("**Sensitivity check") < headline.index(p_ours)
    only = page.build_page(paper).section("published").tables
    assert len(only) == 1 and only[0].caption.startswith("**Published schedule**")


def test_roles_table_rows_equal_record_heads(record, built):
    section = built.section("roles")
    tables = [t for t in section.tables if "role" in t.headers]
    assert [t.caption.split("**")[1] for t in tables] == ["Task 1", "Task 2"]  # one table per group, in order
    heads = [
        (run["seed"], h) for key in ("task1", "task2") for run in record[key] for h in run["roles"]["heads"]
    ]
    rows = [row for t in tables for row in t.rows]
    assert len(rows) == len(heads)
    for row, (seed, h) in zip(rows, heads):
        table = tables[0]
        cells = dict(zip(table.headers, row))
        assert (cells["seed"], cells["head"], cells["role"]) == (
            seed,
            f"L{h['layer']}H{h['head']}",
            f"**{h['role']}**",
        )
        for role in ("recall", "elimination"):
            for key in ("score", "share", "transfer", "via_mlp", "attention", "damage"):
                assert cells[f"{role} {key.replace('_', ' ')}"] == h["evidence"][f"{role}_{key}"]
    thresholds = next(t for t in section.tables if t.headers == ["threshold", "value"])
    assert dict(thresholds.rows) == record["task2"][0]["roles"]["thresholds"]


def test_hand_check_names_the_head_on_the_matching_x(record):
    run = copy.deepcopy(record["task2"][0])
    run["circuit_attention"]["match"] = [[0.1, 0.7]]
    for h in run["roles"]["heads"]:
        h["role"] = "recall" if h["head"] == 1 else "elimination"
    assert page.hand_check(run) == [
        run["seed"],
        "L0H1",
        0.7,
        "circuit attention on the matching x",
        "L0H1",
        "yes",
    ]
    run["roles"]["heads"][1]["role"] = "shared"
    assert page.hand_check(run)[-2:] == ["none", "no"]
    del run["circuit_attention"]  # falls back on the roles' own attention evidence
    for h, att in zip(run["roles"]["heads"], (0.9, 0.2)):
        h["evidence"]["recall_attention"], h["role"] = att, "recall" if h["head"] == 0 else "elimination"
    assert page.hand_check(run)[1:3] == ["L0H0", 0.9] and page.hand_check(run)[-1] == "yes"


def test_page_module_types_in_no_numbers():
    source = Path(page.__file__).read_text()
    literals = re.findall(r"(?<![\w.])\d+\.\d{2,}", source)  # 0.05, "0.957", 1.25e3; not ".3f" or x.25
    assert literals == []  # measured and published numbers come from the record and published.json


def test_variants_and_options_make_the_spec():
    assert make_spec("quick", {}).task2_seeds == (0, 1, 2) and make_spec("full", {}).task1_seeds == (
        0,
        1,
        2,
        3,
        4,
    )
    paper = make_spec("paper", {"runs": "r", "workers": "3", "device": "cuda", "task1_seeds": "4,5"})
    assert (
        paper.task1_preset,
        paper.scale_presets,
        paper.runs,
        paper.workers,
        paper.device,
        paper.task1_seeds,
    ) == ("task1-paper", ("v10-paper", "v15-paper"), "r", 3, "cuda", (4, 5))
    for variant, options in (
        ("huge", {}),
        ("quick", {"colour": "red"}),
        ("quick", {"workers": "0"}),
        ("quick", {"device": "tpu"}),
        ("quick", {"task2_seeds": "a,b"}),
    ):
        with pytest.raises(MechmemError):
            make_spec(variant, options)


def test_committed_record_rebuilds_its_page():
    """permutation.md: the first table is the committed published-schedule record, the second this record."""
    record = json.loads((DOCS / "data" / "permutation.json").read_text())
    paper = json.loads((DOCS / "data" / "permutation-paper.json").read_text())
    report = page.build_page(page.attach_references(record, DOCS / "data"))
    first, second = report.section("published").tables
    for table, rec, cells in ((first, paper, slice(3, None)), (second, record, slice(2, None))):
        probes = [r["probe"].get("median_p_recall", r["probe"]["p_recall"]) for r in rec["task2"]]
        # mean and sample sd of recorded floats: any summation order agrees to 1e-12 relative
        want = [mean(probes), stdev(probes), f"{min(probes):.3f} .. {max(probes):.3f}", len(probes)]
        (row,) = [r for r in table.rows if r[0] == "Task 2 probe: p(recalled y)"]
        assert_records_close(row[cells][:4], want, rel=1e-12, abs=1e-15)
    assert report.section("roles").skipped or report.section("roles").tables


def test_page_only_puts_the_published_schedule_record_first(tmp_path):
    """`reproduce permutation --page-only` hands the page the published-schedule record and the side check
    beside its own (the plugin's `references`) and rebuilds the committed page byte for byte."""
    docs = tmp_path / "docs"
    (docs / "data").mkdir(parents=True)
    for name in ("permutation.json", "permutation-paper.json", *page.SIDE_FILES.values()):
        if (DOCS / "data" / name).exists():
            shutil.copy(DOCS / "data" / name, docs / "data")
    shutil.copytree(DOCS / "prose", docs / "prose")
    assert load_script("reproduce").main(["permutation", "--page-only", "--docs", str(docs)]) == 0
    text = (docs / "permutation.md").read_text()
    assert text == (DOCS / "permutation.md").read_text()
    assert text.index("**Published schedule**") < text.index(
        "**Sensitivity check, not the published schedule**"
    )


def test_values_without_a_primary_source_are_named_so_on_the_page():
    """Every published number whose source says "no primary source" is listed under the published table as
    one the project holds no primary source for. The committed values all have one (the authors' page), so no
    such line is written."""
    record = json.loads((DOCS / "data" / "permutation-paper.json").read_text())
    published = copy.deepcopy(page.load_published()["values"])
    assert all(not re.search(r"\bissue\b", v["source"]) for v in published.values())
    numbers = [v for v in published.values() if isinstance(v["value"], int | float)]
    assert all(not v["source"].startswith("no primary source") for v in numbers)
    assert page.unsourced_line(record, published) is None
    published["task1_plateau"]["source"] = "no primary source the project holds: a test"
    line = page.unsourced_line(record, published)
    assert "Task 1 training-loss plateau 0.959" in line and "Task 2" not in line


def test_probe_median_is_preferred_and_a_mean_says_so(record):
    """The published probes are one sequence: the page compares the median probe, and a record without it
    falls back to the mean over probes and says so in the headline."""
    published = page.load_published()["values"]
    with_median = copy.deepcopy(record)
    for run in with_median["task2"]:
        run["probe"]["median_p_recall"] = 0.25
    assert page.our_values(with_median)["task2_probe_recall_p"] == [0.25] * len(record["task2"])
    without = copy.deepcopy(record)
    for run in without["task2"]:
        run["probe"].pop("median_p_recall", None)
    means = [r["probe"]["p_recall"] for r in record["task2"]]
    assert page.our_values(without)["task2_probe_recall_p"] == means
    assert "mean over probes" in page.headline_text(without, published)
    assert "median probe" in page.headline_text(with_median, published)


def test_split_prior_steps_against_hand_counts():
    """The training-mapping posterior's accuracy, MAE and max error per step equal hand counts on small cases,
    vanish where the training mappings are all the mappings, and its accuracy is below the Bayes accuracy on
    the held-out mappings of the task's split, as the page's reading needs."""
    from mechmem_papers.permutation.scripts.split_prior import train_prior_steps

    train, test = [(1, 2, 3), (2, 3, 1), (3, 1, 2), (1, 3, 2)], [(2, 1, 3), (3, 2, 1)]
    # step 1: each x has one favourite y among the training maps (1->1, 2->3, 3->2), and no held-out map
    # gives it ...
    steps = train_prior_steps(train, test)
    assert steps.accuracy[0] == 0.0 and steps.accuracy[-1] == 1.0
    # ... and a lone held-out map against training maps that all disagree at step 1 gives 0 there
    assert train_prior_steps([(1, 2, 3)], [(2, 3, 1)]).accuracy[0] == 0.0
    # V = 2, one map each way: step 1 puts 1 on sigma(x) = x against Bayes 0.5 / 0.5 (errors 0.5, 0.5 and 0 on
    # token 0: MAE 1/3, max 0.5); step 2 has no consistent training map and falls back to Bayes (no error)
    two = train_prior_steps([(1, 2)], [(2, 1)])
    assert two.accuracy == [0.0, 1.0] and two.max_err == [0.5, 0.0]
    assert two.mae == pytest.approx([1 / 3, 0.0], abs=1e-12)
    # trained on every mapping, the posterior is the Bayes posterior itself
    every = list(itertools.permutations(range(1, 5)))
    exact = train_prior_steps(every, every[:5])
    assert max(exact.mae) < 1e-12 and max(exact.max_err) < 1e-12
    maps = PermutationTask(PermutationConfig(split_seed=0)).mappings
    full = train_prior_steps(*([tuple(p) for p in maps[k].tolist()] for k in ("train", "test")))
    assert all(a < 1 / (5 - k) for k, a in enumerate(full.accuracy[:4])) and full.accuracy[4] == 1.0
    assert all(e > 0 for e in full.max_err[:4]) and full.max_err[4] == 0.0


def test_split_prior_line_judges_each_value_by_its_range(record, tmp_path):
    """The split line reads the side file's columns: a published accuracy is inside between the lowest split
    and the Bayes accuracy, a published MAE or max error inside the splits' range; ours is the seeds' mean."""
    published = page.load_published()["values"]
    v = record["task1"][0]["task"]["vocab_size"]
    pub = {
        m: [published[f"task1_step{k}_{m}"]["value"] for k in range(1, v)] for m in ("acc", "mae", "max_err")
    }
    # two splits bracketing every published accuracy and MAE, and max errors all above the published ones
    side = {
        "vocab_size": v,
        "split_seeds": 2,
        "step_accuracy": [[a - 0.01 for a in pub["acc"]] + [1.0], [a + 0.01 for a in pub["acc"]] + [1.0]],
        "step_mae": [[m - 0.001 for m in pub["mae"]] + [0.0], [m + 0.001 for m in pub["mae"]] + [0.0]],
        "step_max_err": [
            [m + 0.01 for m in pub["max_err"]] + [0.0],
            [m + 0.02 for m in pub["max_err"]] + [0.0],
        ],
    }
    (tmp_path / page.SIDE_FILES["split_prior"]).write_text(json.dumps(side))
    line = page.split_prior_line(page.attach_references(record, tmp_path), published)
    steps = line.split(" | ")
    assert len(steps) == v - 1
    ours = page.our_values(page.first_record(record))
    for k, text in enumerate(steps, start=1):
        accuracy, mae, max_err = text.split("; published ")[1:4]
        assert accuracy.split(",")[1].strip().startswith("inside")
        assert mae.split(",")[1].strip().startswith("inside")
        assert max_err.split(",")[1].strip().startswith("outside")
        assert f"ours {mean(ours[f'task1_step{k}_max_err']):.3f}" in text
    assert page.split_prior_line(record, published) is None


def test_side_check_line_counts_what_the_smaller_batch_explains_and_loses(record, tmp_path):
    """The batch side check reads its file, sets its seeds beside the record's same seeds, and counts a value
    as explained only when its mean is within the tolerance where the record's is not (lost: the reverse)."""
    published = page.load_published()["values"]
    assert page.side_check_lines(page.attach_references(record, tmp_path), published) == []
    good = copy.deepcopy(record["task2"][0])
    for r in good["bayes"]:
        if r["step"].startswith("5 "):
            r.update(acc=1.0, mae=0.0, max_err=0.0)
    good["probe"] = {"p_recall": 1.0, "p_elimination": 0.0}
    good["probe"] |= {"median_p_recall": 1.0, "median_p_elimination": 0.0}
    side = {"preset": "task2-paper", "batch_size": 64, "steps": 9, "runs": [good]}
    (tmp_path / page.SIDE_FILES["batch"]).write_text(json.dumps(side))
    (line,) = page.side_check_lines(page.attach_references(record, tmp_path), published)
    base = page.run_values(record["task2"][0], "task2")
    small = page.run_values(good, "task2")
    tol = published["seed_tolerance"]["value"]

    def hits(values):
        return {k for k in small if abs(values[k] - published[k]["value"]) <= tol}

    explained, lost = len(hits(small) - hits(base)), len(hits(base) - hits(small))
    assert f"brings {explained} of {len(small)} values" in line and "at batch 64, 9 steps" in line
    assert f"and moves {lost} outside that batch {record['task2'][0]['train']['batch_size']} has" in line
    # beside a published-schedule record, the side check is set against that record's seeds, not the page's
    paper = _at_published_schedule(record)
    (tmp_path / "permutation-paper.json").write_text(json.dumps(paper))
    (shown,) = page.side_check_lines(page.attach_references(record, tmp_path), published)
    at_paper = page.run_values(paper["task2"][0], "task2")["task2_probe_recall_p"]
    assert f"vs {at_paper:.4g} [published" in shown
    assert f"vs {base['task2_probe_recall_p']:.4g} [" not in shown


def test_model_class_side_check_is_named_as_such_and_listed_after_the_batch_checks(record, tmp_path):
    """A check that trains another model class (its file names it) says so, and is judged as the batch checks
    are, the hits it loses counted; the page lists the checks in `TRAINED_SIDE_FILES` order."""
    published = page.load_published()["values"]
    runs = [copy.deepcopy(r) for r in record["task1"]]
    for run in runs:  # every value far from every published one
        run["probe"] = {k: v + 1 for k, v in run["probe"].items()}
        for row in run["bayes"]:
            row.update(acc=row["acc"] + 1, mae=row["mae"] + 1, max_err=row["max_err"] + 1)
    sides = {
        "encoder_task1": {"batch_size": 128, "steps": 5, "model": "M"},
        "batch_task1": {"batch_size": 64, "steps": 7},
    }
    for name, side in sides.items():
        side = {"preset": "task1-paper", **side, "runs": runs}
        (tmp_path / page.SIDE_FILES[name]).write_text(json.dumps(side))
    batch, model = page.side_check_lines(page.attach_references(record, tmp_path), published)
    assert batch.startswith("Side check, batch size")
    assert model.startswith("Side check, the authors' model class")
    assert "task1-paper as M, batch 128, 5 steps" in model
    tol = published["seed_tolerance"]["value"]
    ours = [page.run_values(r, "task1") for r in record["task1"]]
    had = sum(abs(mean(x[k] for x in ours) - published[k]["value"]) <= tol for k in ours[0])
    assert had > 0 and f"the PyTorch model brings 0 of {len(ours[0])} values" in model
    assert f"moves {had} outside that TransformerLens's has" in model


def test_model_check_readings_are_causal_and_its_file_resumes(tmp_path):
    """Both readings of the authors' class see no later token; the script writes its runs, does not train a
    seed it holds again, and refuses a file of another model."""
    from mechmem_papers.permutation.scripts import model_check

    tokens = torch.randint(1, 6, (4, 9), generator=torch.Generator().manual_seed(0))
    later = tokens.clone()
    later[:, 5:] = torch.randint(1, 6, (4, 4), generator=torch.Generator().manual_seed(1))
    for kind in model_check.MODELS:
        torch.manual_seed(0)
        model = model_check.build_model(kind, 6, 9, 16, 2).eval()
        with torch.no_grad():
            a, b = model(tokens), model(later)
        assert a.shape == (4, 9, 6)
        assert torch.allclose(a[:, :5], b[:, :5], atol=1e-6) and not torch.allclose(a[:, 5:], b[:, 5:])
    out = tmp_path / "m.json"
    argv = ["--preset", "task1-paper", "--model", "plain", "--steps", "3", "--out", str(out)]
    assert model_check.main([*argv, "--seeds", "0"]) == 0
    first = json.loads(out.read_text())
    assert first["steps"] == 3 and [r["seed"] for r in first["runs"]] == [0]
    assert model_check.main([*argv, "--seeds", "0", "1"]) == 0
    second = json.loads(out.read_text())
    assert second["runs"][0] == first["runs"][0] and [r["seed"] for r in second["runs"]] == [0, 1]
    with pytest.raises(MechmemError, match="another preset or model"):
        model_check.main([*argv[:3], "encoder", *argv[4:]])


def test_accumulated_gradient_check_is_shown_from_its_file(record, tmp_path):
    """The loop-as-printed check appears only with its file beside the record, its numbers read from it."""
    published = page.load_published()["values"]
    assert page.accumulated_line(page.attach_references(record, tmp_path), published) is None
    runs = [
        {"seed": 0, "p_recall": 0.5, "memorisation_acc": 0.25, "memorisation_max_err": 0.75},
        {"seed": 1, "p_recall": 0.7, "memorisation_acc": 0.35, "memorisation_max_err": 0.25},
    ]
    data = {"preset": "task2-paper", "steps": 7, "loop": "no zero_grad", "runs": runs}
    (tmp_path / page.ACCUMULATED_FILE).write_text(json.dumps(data))
    line = page.accumulated_line(page.attach_references(record, tmp_path), published)
    assert "7 steps, 2 seed(s)" in line and "p(recall) 0.600 ± 0.141 (0.500 .. 0.700)" in line
    assert "max err against the Bayesian posterior 0.500 ± 0.354 (0.250 .. 0.750)" in line
    assert line in page.build_page(page.attach_references(record, tmp_path)).section("published").lines
