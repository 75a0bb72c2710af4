"""Automated circuit reports: run the analyses that fit a model and name its circuit from the evidence.

    from mechmem.checkpoint import load_checkpoint
    from mechmem.report import build_report, write_report

    ckpt = load_checkpoint("runs/task2/ckpt.pt")
    report = build_report(ckpt.model, ckpt.task, title="task2")
    write_report(report, "runs/task2/report")      # report.md, report.html (self-contained), report.json

`build_report` measures every head's role once (`mechmem.analysis.roles.head_roles`, the one classifier, with its
explicit thresholds), runs one section function per analysis (`sections.py`), and puts the named circuit first. A
section that does not apply to the model or task is kept, with the reason it was skipped.
"""

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from mechmem.analysis.roles import HeadRole, RoleResult, RoleThresholds, head_roles
from mechmem.report.circuit_graph import edges_section
from mechmem.report.document import Report, Section, Table, to_html, to_markdown, write_index, write_report
from mechmem.report.dynamics_section import dynamics_section
from mechmem.report.sections import (
    ReportContext,
    ablation_section,
    heads_section,
    mlp_section,
    optimum_section,
    patching_section,
    probes_section,
)

SECTIONS: tuple[Callable[[ReportContext], Section], ...] = (
    optimum_section,
    heads_section,
    mlp_section,
    probes_section,
    ablation_section,
    patching_section,
    edges_section,
)
"""The analyses a report runs, in order (the circuit section is added in front)."""

PATTERN_COLUMNS = {"previous_token": "prev-token", "induction": "induction", "duplicate_token": "dup-token"}
TASK_COLUMNS = {
    "score": "score",
    "share": "share",
    "transfer": "transfer",
    "via_mlp": "via MLP",
    "attention": "attn",
    "damage": "damage",
}
"""Evidence shown in the circuit table, with its column header (task columns are prefixed by the role)."""


def role_table(roles: RoleResult) -> Table:
    """One row per head: its role and every number the classifier read."""
    present = {key for h in roles.heads for key in h.evidence}
    cols = [(k, v) for k, v in PATTERN_COLUMNS.items() if k in present]
    cols += [
        (f"{r}_{k}", f"{r} {v}")
        for r in roles.task_roles
        for k, v in TASK_COLUMNS.items()
        if f"{r}_{k}" in present
    ]
    rows = [[h.name, h.role, *(h.evidence[k] for k, _ in cols)] for h in roles.heads]
    return Table(["head", "role", *(v for _, v in cols)], rows, "Head roles and evidence")


def circuit_section(roles: RoleResult, mlp: Section | None = None) -> Section:
    """The named circuit: one row per head with its role and the numbers behind it, and the thresholds."""
    s = Section("circuit", "Circuit: named roles")
    s.findings = roles.to_dict()
    if mlp is not None and not mlp.skipped:
        s.findings["mlp"] = {
            k: mlp.findings[k] for k in ("layer", "role", "key_neurons", "mean_ablation_drop")
        }
    s.lines.append(f"Heads: {roles.summary()}." if roles.heads else "No attention heads were analysed.")
    if "mlp" in s.findings:
        m = s.findings["mlp"]
        limit = roles.thresholds.max_key_neurons
        key = m["key_neurons"] or f"none (distributed: the top {limit} carry less than the share)"
        s.lines.append(f"MLP (layer {m['layer']}): {m['role']}; key neurons {key}.")
    if roles.task_roles:
        s.lines.append(
            f"Task roles ({', '.join(roles.task_roles)}) from counterfactual pairs on {roles.info['n']} sequences: "
            "transfer = rise of p(counterfactual answer) when the head's output is copied from the counterfactual "
            "run; via MLP = the same through the MLP inputs only (path patching); share = the head's part of the "
            "role's total score; attn = attention from the answer onto the role's keys; damage = drop of "
            "p(answer) under mean ablation (reported, not used for the label)."
        )
    s.lines.append(
        "Thresholds: " + ", ".join(f"{k} = {v}" for k, v in roles.thresholds.to_dict().items()) + "."
    )
    if roles.heads:
        s.tables.append(role_table(roles))
    s.lines += [f"{h.name} {h.role}: " + "; ".join(h.notes) for h in roles.heads if h.notes]
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
    role_samples: int = 1000,
    thresholds: RoleThresholds | None = None,
    sections: Sequence[Callable[[ReportContext], Section]] = SECTIONS,
    run_dir: str | Path | None = None,
) -> Report:
    """Measure the head roles, run every section on `model` (and `task`, if any) and return the `Report`.

    Args:
        n_samples: sequences per section's analysis.
        seed: seeds every section's data and the roles' (`head_roles(..., seed=seed)`).
        role_samples: sequences for the head roles (the reproduction pages use the same default).
        run_dir: the checkpoint's run directory; adds the training-dynamics section (skipped, with the reason,
            when it holds no step checkpoints).
    """
    roles = head_roles(model, task, n=role_samples, seed=seed, thresholds=thresholds)
    ctx = ReportContext(model, task, n_samples, seed, roles)
    done = [fn(ctx) for fn in sections]
    if run_dir is not None:
        done.append(dynamics_section(run_dir, task, seed=seed))
    mlp = next((s for s in done if s.key == "mlp"), None)
    optimum = next((s for s in done if s.key == "optimum" and not s.skipped), None)
    headline = optimum.findings["headline"] if optimum else ""
    return Report(title, headline, dict(meta or {}), [circuit_section(roles, mlp), *done])


__all__ = [
    "SECTIONS",
    "HeadRole",
    "Report",
    "ReportContext",
    "RoleResult",
    "RoleThresholds",
    "Section",
    "Table",
    "build_report",
    "circuit_section",
    "head_roles",
    "to_html",
    "to_markdown",
    "write_index",
    "write_report",
]
