"""Why the seeds' heads attend: QK attribution of the demo models' and the held-out models' named heads,
judged by the rules of docs/record/2026-12-07-why-heads-attend.md (written before the runs).

    make demo                                             # runs/demo/{birth,permutation-task2}/ckpt.pt
    PYTHONPATH=src python benchmarks/why_heads_attend.py \
        --out docs/record/data/2026-12-07-why-heads-attend.json

Rules R1 (Birth induction head), R2 (permutation recall and elimination heads), R3 (held-out induction heads:
tests/data/heldout, trained with plain TransformerLens) and R4 (agreement with path patching of k edges).
"""

import argparse
import json
from pathlib import Path

import torch

import mechmem
from mechmem.analysis.circuits import circuit_robustness
from mechmem.analysis.composition import composition_scores
from mechmem.analysis.qk import qk_patching_agreement
from mechmem.io import atomic_write, dumps

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = ("backup", "noln", "rotary", "split")
INDUCTION, PREVIOUS = 0.8, 0.7
"""R3's truth-file thresholds: induction score of a layer-1 head, previous-token score of a layer-0 head."""


def side(entry, which: str) -> dict:
    """`which` side's sources ranked by |mean|, each with its interval; whether the top is separated."""
    mean, low, high = (t.tolist() for t in entry.interval(which))
    order = sorted(range(len(mean)), key=lambda i: -abs(mean[i]))
    ranked = [{"source": entry.sources[i], "mean": mean[i], "lower": low[i], "upper": high[i]} for i in order]
    top, second = ranked[0], ranked[1] if len(ranked) > 1 else None
    separated = second is None or (
        top["lower"] > second["upper"] if top["mean"] >= 0 else top["upper"] < second["lower"]
    )
    return {"ranked": ranked[:4], "top": top["source"], "separated": bool(separated)}


def explain(ckpt, heads: dict[str, str], n: int) -> dict:
    """Per head (name -> the site set it is read on): top terms, both sides, and its key-side agreement."""
    result = mechmem.qk_attribution(ckpt.model, ckpt.task, heads=list(heads), n=n, seed=0)
    agreement = {
        (a.head, a.side): a for a in qk_patching_agreement(ckpt.model, ckpt.task, list(heads), n=n, seed=0)
    }
    out = {"convention": result.convention, "rotary": result.rotary, "heads": {}}
    for head, sites in heads.items():
        entry = result.entry(head, sites)
        out["heads"][head] = {
            "sites": sites,
            "note": entry.note,
            "prompts": len(entry.per_prompt),
            "max_error": entry.max_error,
            "top_terms": [p._asdict() for p in entry.top(3)],
            "key": side(entry, "key"),
            "query": side(entry, "query"),
            **{f"patching_{side}": agreement[head, side].to_dict() for side in ("key", "query")},
        }
    return out


def circuit_record(model, task) -> dict:
    """The circuit decided at seed 0 (mean ablation), its verdict under each ablation with CPR and CMD on 64
    held-out prompts, and the top K-composition pairs against the random baseline."""
    circuit, _ = mechmem.decided_circuit(model, task, seed=0, ablation="mean")
    robust = circuit_robustness(model, task, circuit, n=64, seed=0).to_dict()
    robust.pop("timings_s")
    for ablation in robust["ablations"].values():
        ablation.pop("curve")
    found = composition_scores(model, generator=torch.Generator().manual_seed(0)).to_dict()
    composition = {"baseline": found["baseline"], "top_K": found["top"]["K"]}
    return {"circuit": sorted(circuit.edge_names()), "robustness": robust, "composition": composition}


def verdict_r1(record: dict, previous: str) -> str:
    key, query = record["key"], record["query"]
    if key["top"] == previous and query["top"] == "embed":
        return "explained as the paper says" if key["separated"] and query["separated"] else "leaning"
    return "not as the paper says"


def verdict_r2(record: dict) -> str:
    key = record["key"]
    if key["separated"] and key["top"] in ("embed", "pos"):
        return {"embed": "keys on the token", "pos": "keys on the position"}[key["top"]]
    return "mixed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", default=str(ROOT / "runs" / "demo"))
    parser.add_argument("--n", type=int, default=256)
    args = parser.parse_args()
    out: dict = {
        "command": "python benchmarks/why_heads_attend.py",
        "n": args.n,
        "models": {},
        "circuits": {},
    }
    planted = mechmem.planted_induction_model()
    repeats = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
    out["circuits"]["planted"] = circuit_record(planted, repeats)

    birth = mechmem.load_checkpoint(Path(args.runs) / "birth" / "ckpt.pt")
    roles = {h.name: h.role for h in mechmem.head_roles(birth.model, birth.task, seed=0).heads}
    induction = [h for h, r in roles.items() if r == "induction"]
    previous = [h for h, r in roles.items() if r == "previous-token"]
    record = explain(
        birth, {h: "induction" for h in induction} | {h: "previous_token" for h in previous}, args.n
    )
    record["roles"] = roles
    record["R1"] = {h: verdict_r1(record["heads"][h], previous[0]) for h in induction} if previous else {}
    out["models"]["birth"] = record

    perm = mechmem.load_checkpoint(Path(args.runs) / "permutation-task2" / "ckpt.pt")
    roles = {h.name: h.role for h in mechmem.head_roles(perm.model, perm.task, seed=0).heads}
    named = {h: r for h, r in roles.items() if r in ("recall", "elimination")}
    record = explain(perm, named, args.n)
    record["roles"] = roles
    record["R2"] = {h: verdict_r2(record["heads"][h]) for h in named}
    out["models"]["permutation-task2"] = record

    for name in HELDOUT:
        ckpt = mechmem.load_checkpoint(ROOT / "tests" / "data" / "heldout" / f"{name}.pt")
        truth = json.loads((ROOT / "tests" / "data" / "heldout" / f"{name}.truth.json").read_text())
        scores = truth["scores"]
        heads = [f"L1H{h}" for h, s in enumerate(scores["induction"][1]) if s >= INDUCTION]
        prev = [f"L0H{h}" for h, s in enumerate(scores["previous-token"][0]) if s >= PREVIOUS]
        record = explain(ckpt, {h: "induction" for h in heads}, args.n)
        record["truth_previous_token"] = prev
        record["R3"] = {
            h: ("pass" if record["heads"][h]["key"]["top"] in prev else "fail")
            + (", separated" if record["heads"][h]["key"]["separated"] else ", not separated")
            for h in heads
        }
        out["models"][name] = record
    for name in (*HELDOUT, "perm"):
        ckpt = mechmem.load_checkpoint(ROOT / "tests" / "data" / "heldout" / f"{name}.pt")
        out["circuits"][name] = circuit_record(ckpt.model, ckpt.task)
    atomic_write(args.out, dumps(out, indent=1) + "\n")
    for name, record in out["models"].items():
        verdicts = record.get("R1") or record.get("R2") or record.get("R3")
        print(name, verdicts)
    for name, record in out["circuits"].items():
        print(
            name,
            record["robustness"]["verdict"],
            [p["sender"] + "->" + p["receiver"] for p in record["composition"]["top_K"]][:2],
        )


if __name__ == "__main__":
    main()
