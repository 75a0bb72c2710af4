"""The sequential rule's verdicts over prompt seeds (docs/decisions.md): circuit verdicts and head names.

    OMP_NUM_THREADS=1 python benchmarks/decisions.py --seeds 4        # a few minutes on CPU

Models: the planted induction model and a 2-layer attention-only model trained 300 steps on [r, r] (the one of
tests/test_circuits.py). Per model and prompt seed: `decided_circuit` at `CIRCUIT_POLICY` (verdict, looks,
marginal and corrected intervals) beside `discover_circuit` on a fixed 64-prompt pair; then the role rule's
pattern evidence at `HEAD_POLICY` (looks taken, corrected z per family, heads named). One JSON line each.
"""

import argparse
import json
import time

import torch

from mechmem.analysis.circuits import circuit_prompts, decided_circuit, discover_circuit
from mechmem.analysis.planted import planted_induction_model
from mechmem.analysis.roles import classify_heads, measure_pattern_evidence
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask


def trained(steps: int = 300) -> torch.nn.Module:
    """2 layers, 2 heads, d_model 32, 16 tokens, n_ctx 24, trained on [r, r] with |r| from 4 to 12."""
    model = build_transformer(
        TransformerConfig(n_layers=2, d_model=32, n_heads=2, d_vocab=16, n_ctx=24),
        generator=torch.Generator().manual_seed(0),
    )
    opt, gen = torch.optim.AdamW(model.parameters(), lr=1e-2), torch.Generator().manual_seed(1)
    for _ in range(steps):
        task = RepeatsTask(RepeatsConfig(d_vocab=16, half=int(torch.randint(4, 13, (), generator=gen))))
        batch = task.train_batch(64, generator=gen)
        loss = task.loss(model(batch.tokens), batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=4, help="prompt seeds 0..SEEDS-1")
    args = p.parse_args(argv)
    for name, model in (("planted", planted_induction_model()), ("trained-2L", trained())):
        for seed in range(args.seeds):
            start = time.perf_counter()
            circuit, _ = decided_circuit(model, None, seed=seed)
            fixed = discover_circuit(model, circuit_prompts(model, None, 64, seed)[0])
            families = circuit.decision.families.items()
            row = {"model": name, "seed": seed, "verdict": circuit.verdict, "fixed_64": fixed.verdict}
            row |= {
                "looks": circuit.decision.looks,
                "criteria": circuit.criteria(),
                "undecided": circuit.undecided(),
            }
            row["marginal"] = {k: [round(x, 3) for x in v] for k, v in circuit.intervals.items()}
            row["corrected"] = {
                k: [round(float(f.corrected_lower), 3), round(float(f.corrected_upper), 3)]
                for k, f in families
            }
            print(json.dumps(row | {"s": round(time.perf_counter() - start, 1)}), flush=True)
        found = measure_pattern_evidence(model, None, generator=torch.Generator().manual_seed(0))
        named = [f"{h.name} {h.role}" for h in classify_heads(found.evidence) if h.role != "none"]
        z = {k: round(f.z, 3) for k, f in found.decision.families.items()}
        tests = {k: f.mean.numel() for k, f in found.decision.families.items()}
        print(
            json.dumps(
                {"model": name, "head_looks": found.decision.looks, "z": z, "tests": tests, "named": named}
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
