"""Automated circuit reports: run the analyses that fit a model and name its circuit from the evidence.

    from mechmem.checkpoint import load_checkpoint
    from mechmem.report import build_report, write_report

    ckpt = load_checkpoint("runs/task2/ckpt.pt")
    report = build_report(ckpt.model, ckpt.task, title="task2")
    write_report(report, "runs/task2/report")      # report.md, report.html (self-contained), report.json

`build_report` runs one section function per analysis (`sections.py`), collects the per-head evidence they
measure, names each head's role with the explicit thresholds of `roles.RoleThresholds`, and puts the circuit
summary first. A section that does not apply to the model or task is kept, with the reason it was skipped.
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch

from mechmem.report.document import Report, Section, Table, to_html, to_markdown, write_index, write_report
from mechmem.report.roles import HeadRole, RoleThresholds, circuit_summary, name_head_roles
from mechmem.report.sections import (
    ReportContext,
    ablation_section,
    heads_section,
    mlp_section,
    optimum_section,
    patching_section,
    probes_section,
    task_roles_section,
)

SECTIONS: tuple[Callable[[ReportContext], Section], ...] = (
    optimum_section,
    heads_section,
    task_roles_section,
    mlp_section,
    probes_section,
    ablation_section,
    patching_section,
)
"""The analyses a report runs, in order (the circuit summary is added in front)."""


EVIDENCE_COLUMNS = {
    "previous_token": "prev-token",
    "induction": "induction",
    "duplicate_token": "dup-token",
    "elimination_transfer": "transfer elim",
    "recall_transfer": "transfer recall",
    "elimination_damage": "damage no-repeat",
    "recall_damage": "damage repeat",
    "attention_used_y": "attn used y's",
    "attention_match_bound": "attn match+its y",
}
"""Evidence shown in the circuit table, with its column header."""


def circuit_section(roles: list[HeadRole], thresholds: RoleThresholds, mlp: Section | None = None) -> Section:
    """The named circuit: one row per head with its role and the numbers behind it, and the thresholds."""
    s = Section("circuit", "Circuit: named roles")
    s.findings = {
        "summary": circuit_summary(roles),
        "heads": [r.to_dict() for r in roles],
        "thresholds": thresholds.to_dict(),
    }
    if mlp is not None and not mlp.skipped:
        s.findings["mlp"] = {
            k: mlp.findings[k] for k in ("layer", "role", "key_neurons", "mean_ablation_drop")
        }
    if not roles:
        s.lines.append("No attention heads were analysed.")
    else:
        s.lines.append(f"Heads: {circuit_summary(roles)}.")
    if "mlp" in s.findings:
        m = s.findings["mlp"]
        key = (
            m["key_neurons"]
            or f"none (distributed: the top {thresholds.max_key_neurons} carry less than the share)"
        )
        s.lines.append(f"MLP (layer {m['layer']}): {m['role']}; key neurons {key}.")
    s.lines.append("Thresholds: " + ", ".join(f"{k} = {v}" for k, v in thresholds.to_dict().items()) + ".")
    keys = [k for k in EVIDENCE_COLUMNS if roles and k in roles[0].evidence]
    rows = [[r.name, r.role, *(r.evidence[k] for k in keys)] for r in roles]
    s.tables.append(
        Table(["head", "role", *(EVIDENCE_COLUMNS[k] for k in keys)], rows, "Head roles and evidence")
    )
    s.lines += [f"{r.name} {r.role}: " + "; ".join(r.notes) for r in roles if r.notes]
    return s


@torch.no_grad()
def build_report(
    model: torch.nn.Module,
    task: Any = None,
    *,
    title: str = "Circuit report",
    meta: dict[str, Any] | None = None,
    n_samples: int = 512,
    seed: int = 0,
    thresholds: RoleThresholds | None = None,
    sections: Sequence[Callable[[ReportContext], Section]] = SECTIONS,
) -> Report:
    """Run every section on `model` (and `task`, if any), name the circuit, and return the `Report`."""
    ctx = ReportContext(
        model, task, n_samples=n_samples, seed=seed, thresholds=thresholds or RoleThresholds()
    )
    done = [fn(ctx) for fn in sections]
    roles = name_head_roles(ctx.evidence, ctx.thresholds)
    mlp = next((s for s in done if s.key == "mlp"), None)
    circuit = circuit_section(roles, ctx.thresholds, mlp)
    optimum = next((s for s in done if s.key == "optimum" and not s.skipped), None)
    headline = optimum.findings["headline"] if optimum else ""
    return Report(title, headline, dict(meta or {}), [circuit, *done])


__all__ = [
    "SECTIONS",
    "HeadRole",
    "Report",
    "ReportContext",
    "RoleThresholds",
    "Section",
    "Table",
    "build_report",
    "circuit_section",
    "name_head_roles",
    "to_html",
    "to_markdown",
    "write_index",
    "write_report",
]
