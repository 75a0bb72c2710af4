"""The sequential rule (docs/decisions.md): coverage under optional stopping, decided and undecided heads, the
multiplicity correction of the token-selective rule, and one answer from the command and the report."""

import json
import math

import pytest
import torch
from helpers import load_script

from mechmem.analysis.heads import (
    BUILTIN_PATTERNS,
    detect_heads,
    induction_pattern,
    kth_highest,
    repeated_random_tokens,
)
from mechmem.analysis.planted import (
    INDUCTION_HEAD,
    PREVIOUS_TOKEN_HEAD,
    planted_config,
    planted_induction_model,
)
from mechmem.analysis.roles import RoleThresholds, classify_heads, head_roles
from mechmem.analysis.sequential import decide
from mechmem.analysis.stats import (
    HEAD_POLICY,
    NO,
    UNDECIDED,
    YES,
    Z_95,
    DecisionPolicy,
    RatioMoments,
    judge,
    z_for,
)
from mechmem.io import strict_json

REPEATS = 200


def normal_draw(means: torch.Tensor, sd: float):
    def draw(k: int, generator: torch.Generator) -> dict[str, RatioMoments]:
        return {"x": RatioMoments.from_values(means + sd * torch.randn(k, len(means), generator=generator))}

    return draw


def naive_peeking(means: torch.Tensor, sd: float, policy: DecisionPolicy, gen: torch.Generator) -> tuple:
    """The uncorrected procedure: a 95% interval per test at every look, stopping once each excludes the
    threshold (what reading a plain interval after every round amounts to)."""
    total, taken = None, 0
    for size in policy.looks():
        new = normal_draw(means, sd)(size - taken, gen)["x"]
        total, taken = new if total is None else total + new, size
        low, high = total.ratio() - Z_95 * total.stderr(), total.ratio() + Z_95 * total.stderr()
        if bool(((low >= 0.5) | (high < 0.5)).all()):
            break
    return low, high


def test_corrected_intervals_cover_the_truth_under_optional_stopping_and_naive_peeking_does_not():
    means = torch.tensor([0.5, 0.5, 0.52, 0.45, 0.6], dtype=torch.float64)  # threshold 0.5: two sit on it
    policy = DecisionPolicy(first=16, budget=512, precision=0.0)
    covered, naive, stops = 0, 0, set()
    for rep in range(REPEATS):
        result = decide(
            normal_draw(means, 0.5), {"x": 0.5}, policy=policy, generator=torch.Generator().manual_seed(rep)
        )
        x = result["x"]
        covered += bool(((x.corrected_lower <= means) & (means <= x.corrected_upper)).all())
        stops.add(result.looks[-1])
        low, high = naive_peeking(means, 0.5, policy, torch.Generator().manual_seed(rep))
        naive += bool(((low <= means) & (means <= high)).all())
    assert covered / REPEATS >= 0.95, covered
    assert naive / REPEATS < 0.8, naive  # peeking at uncorrected intervals misses far more than 5%
    assert len(stops) == 1  # two tests on the threshold: the corrected rule never stops early here

    # tests clear of their threshold stop at different looks, and coverage holds there too
    far = torch.tensor([0.7, 0.3, 0.58], dtype=torch.float64)
    covered, stops = 0, set()
    for rep in range(REPEATS):
        result = decide(
            normal_draw(far, 0.5), {"x": 0.5}, policy=policy, generator=torch.Generator().manual_seed(rep)
        )
        x, stops = result["x"], stops | {result.looks[-1]}
        covered += bool(((x.corrected_lower <= far) & (far <= x.corrected_upper)).all())
    assert covered / REPEATS >= 0.95 and len(stops) >= 2, (covered, stops)


def head_draw(model, half: int = 8):
    def draw(k: int, generator: torch.Generator) -> dict[str, RatioMoments]:
        tokens = repeated_random_tokens(k, half, model.cfg.d_vocab, generator=generator, distinct=False)
        found = detect_heads(model, tokens, {"induction": induction_pattern}, resamples=0)
        return {"induction": found.moments["induction"]}

    return draw


@pytest.fixture(scope="module")
def weak_planted():
    """The planted model with a weaker induction match: L1H1 scores about 0.7 with a spread over sequences."""
    return planted_induction_model(strength=4.0)


@pytest.fixture(scope="module")
def truth(weak_planted):
    """Every head's induction score on 8,192 sequences (its standard error is ~1/20 of any interval below)."""
    tokens = repeated_random_tokens(8192, 8, 12, generator=torch.Generator().manual_seed(99), distinct=False)
    patterns = {"induction": induction_pattern}
    return detect_heads(weak_planted, tokens, patterns, resamples=0, chunk=1024).moments["induction"].ratio()


def test_planted_model_scores_are_covered_under_optional_stopping(weak_planted, truth):
    threshold = (
        float(truth[INDUCTION_HEAD]) + 0.01
    )  # near the planted head: how long it runs depends on the data
    policy = DecisionPolicy(first=32, budget=256)
    covered, stops = 0, set()
    for rep in range(REPEATS):
        result = decide(
            head_draw(weak_planted),
            {"induction": threshold},
            policy=policy,
            generator=torch.Generator().manual_seed(rep),
        )
        f = result["induction"]
        covered += bool(((f.corrected_lower <= truth + 1e-6) & (truth - 1e-6 <= f.corrected_upper)).all())
        stops.add(result.looks[-1])
    assert covered / REPEATS >= 0.95 and len(stops) >= 2, (covered, stops)


def test_a_head_far_from_the_threshold_is_decided_in_the_first_round():
    model = planted_induction_model()

    def draw(k: int, generator: torch.Generator) -> dict[str, RatioMoments]:
        tokens = repeated_random_tokens(k, 8, 12, generator=generator)
        return {"previous_token": detect_heads(model, tokens, resamples=0).moments["previous_token"]}

    result = decide(
        draw, {"previous_token": 0.5}, policy=HEAD_POLICY, generator=torch.Generator().manual_seed(0)
    )
    f = result["previous_token"]
    assert result.looks == (HEAD_POLICY.first,) and result.stopped == "settled"
    assert int(f.code[PREVIOUS_TOKEN_HEAD]) == YES and int((f.code == YES).sum()) == 1
    assert bool((f.code[f.mean < 0.3] == NO).all())
    frame = result.to_dataframe()
    assert len(frame) == 6 and set(frame["verdict"]) == {"yes", "no"}


def test_a_head_on_the_threshold_stays_undecided_and_says_how_many_sequences_would_decide_it(
    weak_planted, truth
):
    threshold = float(truth[INDUCTION_HEAD])
    policy = DecisionPolicy(first=32, budget=128)
    result = decide(
        head_draw(weak_planted),
        {"induction": threshold},
        policy=policy,
        generator=torch.Generator().manual_seed(0),
    )
    f = result["induction"]
    assert result.stopped == "budget" and result.looks == (32, 64, 128)
    assert int(f.code[INDUCTION_HEAD]) == UNDECIDED
    needed = float(f.n_needed[INDUCTION_HEAD])
    assert needed >= 128 and (math.isinf(needed) or math.log2(needed / 32).is_integer())
    # by hand: n (z se / |mean - threshold|)^2 rounded up to a look
    se = (f.corrected_upper - f.mean)[INDUCTION_HEAD] / f.z
    raw = 128 * (f.z * se / abs(f.mean[INDUCTION_HEAD] - threshold)) ** 2
    assert needed == policy.rounded(float(raw))
    # the role rule's note on such a head: not named, and what would decide it
    evidence = {"induction": f.mean, "induction_lower": f.corrected_lower, "induction_n_needed": f.n_needed}
    heads = classify_heads({k: v.float() for k, v in evidence.items()}, thresholds=RoleThresholds(threshold))
    head = next(h for h in heads if (h.layer, h.head) == INDUCTION_HEAD)
    assert head.role == "none"
    expected = "no number of sequences" if math.isinf(needed) else f"about {int(needed)} sequences per probe"
    assert any("induction undecided at the budget" in n and expected in n for n in head.notes), head.notes


def test_many_null_tokens_just_below_the_threshold_name_nothing_when_corrected():
    """400 tokens whose true score is 0.49: at 95% each, a few clear 0.5 by chance, and the uncorrected
    2-token rule names the head; corrected for the tokens tested, nothing is named."""
    tokens, sd = 400, 0.4
    true = torch.full((1, 1, tokens), 0.49, dtype=torch.float64)

    def draw(k: int, generator: torch.Generator) -> dict[str, RatioMoments]:
        return {
            "token": RatioMoments.from_values(true + sd * torch.randn(k, 1, 1, tokens, generator=generator))
        }

    once = DecisionPolicy(first=64, budget=64)
    result = decide(draw, {"token": 0.5}, policy=once, generator=torch.Generator().manual_seed(0))
    f = result["token"]
    assert f.z == pytest.approx(z_for(0.05 / tokens))
    marginal_clear = int((f.lower >= 0.5).sum())
    assert marginal_clear >= 2  # what the uncorrected rule sees (about 6 expected)
    assert int((f.code == YES).sum()) == 0
    old, new = kth_highest(f.lower.float()), kth_highest(f.corrected_lower.float())
    evidence = {"induction": true.amax(-1).float(), "induction_lower": torch.zeros(1, 1)}
    named_old = classify_heads(evidence | {"induction_token_lower": old})[0].role
    named_new = classify_heads(evidence | {"induction_token_lower": new})[0].role
    assert (named_old, named_new) == ("induction", "none")


def test_detect_heads_command_and_report_roles_give_identical_numbers_and_names(tmp_path, capsys):
    from mechmem.checkpoint import load_checkpoint, save_checkpoint
    from mechmem.cli import run_script
    from mechmem.tasks.generic import RepeatsConfig

    model = planted_induction_model()
    path = save_checkpoint(
        tmp_path / "ckpt.pt",
        model=model,
        model_config=planted_config(),
        task_name="repeats",
        task_config=RepeatsConfig.for_model(model),
    )
    assert run_script(load_script("detect_heads").main, [str(path), "--out", str(tmp_path)]) == 0  # defaults
    script = json.loads((tmp_path / "detect_heads.json").read_text())
    ckpt = load_checkpoint(path)
    roles = head_roles(ckpt.model, ckpt.task, seed=0)  # the report's call (`build_report`), at its defaults
    report = roles.info["patterns"]
    assert script["probes"] == report["probes"] and script["decision"] == report["decision"]
    for name, curve in report["curves"].items():
        for key, values in curve.items():
            assert script["curves"][name][key] == strict_json(values), (name, key)  # inf is null in JSON
    keys = [k for k in roles.heads[0].evidence if k.startswith(tuple(BUILTIN_PATTERNS))]
    pattern_roles = classify_heads({k: roles.evidence(k) for k in keys})
    named = {f"L{h.layer}H{h.head}": h.role for h in pattern_roles}
    assert {k: v["pattern"] for k, v in script["patterns"].items()} == named
    assert named["L0H2"] == "previous-token" and named["L1H1"] == "induction"
    capsys.readouterr()


def test_frozen_tests_keep_their_look_and_are_not_asked_for_again():
    means = torch.tensor([1.5, 0.55], dtype=torch.float64)  # far above 0.5, and near it
    policy = DecisionPolicy(first=32, budget=256, precision=0.0)
    asked: list[dict] = []

    def draw(k: int, generator: torch.Generator, measured: dict) -> dict[str, RatioMoments]:
        asked.append({f: m.clone() for f, m in measured.items()})
        return normal_draw(means, 0.5)(k, generator)

    result = decide(
        draw, {"x": 0.5}, policy=policy, generator=torch.Generator().manual_seed(0), freeze=("x",)
    )
    x = result["x"]
    assert asked[0] == {} and len(asked) == len(result.looks) >= 2
    assert all(m["x"].tolist() == [False, True] for m in asked[1:])  # test 0 froze at the first look
    assert x.units.tolist() == [32, result.n] and x.code[0] == YES
    # its interval is the first look's: the same as a run stopped there
    first = decide(
        normal_draw(means, 0.5),
        {"x": 0.5},
        policy=policy.with_budget(32),
        generator=torch.Generator().manual_seed(0),
    )["x"]
    assert float(x.mean[0]) == pytest.approx(float(first.mean[0]))
    assert x.to_dict()["units"] == [32.0, float(result.n)]


def test_frozen_tests_still_cover_the_truth_under_optional_stopping():
    far = torch.tensor([0.7, 0.3, 0.58, 0.52], dtype=torch.float64)
    policy = DecisionPolicy(first=16, budget=512, precision=0.0)
    covered, frozen_early = 0, 0
    for rep in range(REPEATS):

        def draw(k, generator, measured):
            return normal_draw(far, 0.5)(k, generator)

        result = decide(
            draw, {"x": 0.5}, policy=policy, generator=torch.Generator().manual_seed(rep), freeze=("x",)
        )
        x = result["x"]
        covered += bool(((x.corrected_lower <= far) & (far <= x.corrected_upper)).all())
        frozen_early += x.units is not None and bool((x.units < result.n).any())
    assert covered / REPEATS >= 0.95 and frozen_early >= REPEATS // 2, (covered, frozen_early)


def test_stale_tests_are_frozen_open_or_not_and_stay_frozen():
    means = torch.tensor([0.52, 0.55, 0.9], dtype=torch.float64)  # two open for long, one decided at once
    policy = DecisionPolicy(first=32, budget=256, precision=0.0)
    asked: list[dict] = []

    def draw(k: int, generator: torch.Generator, measured: dict) -> dict[str, RatioMoments]:
        asked.append({f: m.clone() for f, m in measured.items()})
        return normal_draw(means, 0.5)(k, generator)

    def stale(families):  # test 0 stops mattering once test 2 is decided yes
        x = families["x"]
        return {"x": torch.tensor([bool(x.code[2] == YES), False, False])}

    result = decide(
        draw,
        {"x": 0.5},
        policy=policy,
        generator=torch.Generator().manual_seed(0),
        freeze=("x",),
        stale=stale,
    )
    x = result["x"]
    assert len(asked) >= 2 and all(m["x"].tolist() == [False, True, False] for m in asked[1:])
    assert int(x.code[0]) == UNDECIDED and x.units.tolist()[0] == 32 and x.units.tolist()[1] == result.n
    plain = decide(normal_draw(means, 0.5), {"x": 0.5}, policy=policy.with_budget(32),
                   generator=torch.Generator().manual_seed(0))["x"]  # fmt: skip
    assert float(x.mean[0]) == pytest.approx(float(plain.mean[0]))  # the first look's, kept


def test_head_naming_skips_probes_with_nothing_open_and_names_as_measuring_everything(monkeypatch):
    """The rule "Head naming measures only what can still change a name": later rounds draw only the
    probes with a test that can still change a name, and the names equal those of measuring every test."""
    import mechmem.analysis.heads as heads_module
    from mechmem.analysis import roles as roles_module
    from mechmem.tasks import build_task

    model = planted_induction_model()
    task = build_task("repeats", {"d_vocab": 12, "half": 8})
    halves = heads_module.default_halves(model, task)
    calls: list[int] = []
    real = heads_module.detect_heads

    def counted(model, tokens, *args, **kwargs):
        calls.append(len(tokens))
        return real(model, tokens, *args, **kwargs)

    monkeypatch.setattr(heads_module, "detect_heads", counted)
    found = roles_module.measure_pattern_evidence(model, task, generator=torch.Generator().manual_seed(0))
    looks = found.decision.looks
    assert len(looks) >= 2 and len(calls) < len(halves) * len(looks)  # some probe was skipped
    assert sorted(found.probe_n) != [found.n] * len(found.probes) and max(found.probe_n) == found.n
    everything = decide(
        roles_module.draw_probes(model, task, halves),
        {"overall": 0.5, "token": 0.5},
        policy=HEAD_POLICY,
        generator=torch.Generator().manual_seed(0),
        settled=roles_module.names_settled,
    )
    named = roles_module.named_heads
    assert all(torch.equal(a, b) for a, b in zip(named(found.decision.families), named(everything.families)))
    assert [(h.layer, h.head, h.role) for h in classify_heads(found.evidence) if h.role != "none"] == [
        (*PREVIOUS_TOKEN_HEAD, "previous-token"),
        (*INDUCTION_HEAD, "induction"),
    ]


def test_tally_counts_the_verdicts_and_names_the_units_that_would_decide():
    values = torch.tensor([0.9, 0.1, 0.5]) + 0.3 * torch.randn(
        32, 3, generator=torch.Generator().manual_seed(0)
    )
    family = judge(
        RatioMoments.from_values(values), 0.5, z=3.0, policy=DecisionPolicy(first=32, budget=64), name="s"
    )
    verdicts = family.verdicts()
    text = family.tally("cells", "matter", "pairs")
    assert text.startswith(f"{verdicts.count('yes')} cells matter, {verdicts.count('no')} do not, ")
    assert f"{verdicts.count('undecided')} undecided" in text
    assert ("would decide the last of them" in text) == bool(
        family.n_needed[family.code == UNDECIDED].isfinite().any()
    )


def test_cumulative_draws_give_the_pooled_moments_themselves():
    """With `cumulative`, a draw returns the moments of every unit so far: pooling them itself gives the same
    decision as handing `decide` the new units' moments."""
    means = torch.tensor([1.5, 0.55], dtype=torch.float64)
    policy = DecisionPolicy(first=32, budget=256, precision=0.0)
    seen: list[RatioMoments] = []

    def pooled(k: int, generator: torch.Generator) -> dict[str, RatioMoments]:
        new = normal_draw(means, 0.5)(k, generator)["x"]
        seen.append(new if not seen else seen[-1] + new)
        return {"x": seen[-1]}

    got = decide(
        pooled, {"x": 0.5}, policy=policy, generator=torch.Generator().manual_seed(0), cumulative=True
    )
    want = decide(
        normal_draw(means, 0.5), {"x": 0.5}, policy=policy, generator=torch.Generator().manual_seed(0)
    )
    assert got.looks == want.looks and got["x"].to_dict() == want["x"].to_dict()
