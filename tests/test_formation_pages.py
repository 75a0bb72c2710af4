"""The pages' Formation sections: every count and verdict follows the committed formation data under the rules
the record states (changing one reading changes the page), planted cases of the rules, and a page without the
data says so."""

import copy
import json

from mechmem_papers import formation


def data() -> dict:
    return {"formation": {"file": "f.json", **json.loads(formation.FORMATION_DATA.read_text())}}


def event(low: int, high: int) -> dict:
    return {"reached": True, "step": (low + high) / 2, "interval": [low, high]}


def test_f1_and_f3_counts_follow_the_data():
    record = data()
    before = "\n".join(formation.birth_section(record).lines)
    runs = record["formation"]["runs"]
    formed = sum(runs[f"birth-iv-{s}"]["heads"]["L1H0"]["role"] == "induction" for s in formation.SEEDS)
    assert f"in {formed} of 3 zeroed runs" in before
    changed = copy.deepcopy(record)
    head = changed["formation"]["runs"]["birth-iv-0"]["heads"]["L1H0"]
    head["role"] = "none" if head["role"] == "induction" else "induction"
    after = "\n".join(formation.birth_section(changed).lines)
    assert f"in {formed + (1 if head['role'] == 'induction' else -1)} of 3 zeroed runs" in after
    text = "\n".join(formation.permutation_section(record).lines)
    run = runs["t2-noelim-0"]
    (other,) = [h for h in run["heads"] if h != run["trained_under"][0].split("=")[0]]
    run["heads"][other]["role"] = "recall"
    kept = sum(
        runs[f"t2-noelim-{s}"]["heads"][h]["role"] == "recall"
        for s in formation.SEEDS
        for h in runs[f"t2-noelim-{s}"]["heads"]
        if h != runs[f"t2-noelim-{s}"]["trained_under"][0].split("=")[0]
    )
    assert f"named recall in {kept} of 3" in "\n".join(formation.permutation_section(record).lines)
    assert text != "\n".join(formation.permutation_section(record).lines)


def test_memory_order_rule_on_planted_steps():
    steps = list(range(25, 425, 25))
    order = {"steps": steps, "events": {"wo2_recall": 40, "wk2_recall": 90, "wk1_recall": None}}
    assert formation.memory_order(order) == "as the paper says"  # W_K^1 never reached counts as last
    order["events"] = {"wo2_recall": 85, "wk2_recall": 37, "wk1_recall": None}
    assert formation.memory_order(order) == "other order"
    order["events"] = {"wo2_recall": 30, "wk2_recall": 26, "wk1_recall": 50}
    assert formation.memory_order(order) == "tied"  # all within one save interval
    order["events"] = {"wo2_recall": None, "wk2_recall": None, "wk1_recall": None}
    assert formation.memory_order(order) == "other order"


def test_f5_rule_on_planted_intervals():
    def runs(pt: dict, ko: dict) -> dict:
        ctl = {"acc_event": event(75, 100)}
        return {
            **{f"{k}-{s}": r for s in formation.SEEDS for k, r in zip(formation.F5_KINDS, (ctl, pt, ko))},
            "birth-ko150-0": {**ko, "intervene_until": 150},
        }

    never = {"reached": False, "step": None, "interval": None}
    f5 = runs({"acc_event": event(50, 75)}, {"acc_event": event(150, 175)})
    until = formation.knockout_until(f5)
    assert until == 150
    assert formation.f5_verdicts(f5, until)["0"] == {"clamp": "earlier", "knockout": "delays past T"}
    f5 = runs({"acc_event": event(75, 100)}, {"acc_event": event(100, 125)})
    assert formation.f5_verdicts(f5, until)["1"] == {"clamp": "same", "knockout": "delays"}
    f5 = runs({"acc_event": never}, {"acc_event": event(50, 75)})
    assert formation.f5_verdicts(f5, until)["2"] == {"clamp": "prevents", "knockout": "not delayed"}


def test_a_page_without_the_data_says_so(tmp_path):
    record = {"runs": {}}
    assert formation.attach_formation(record, tmp_path / "absent.json") is record
    for section in (formation.birth_section(record), formation.permutation_section(record)):
        assert section.skipped and formation.FORMATION_DATA.name in section.skipped and not section.lines
