"""Automated circuit reports: run the analyses that fit a model and name its circuit from the evidence.

    from mechmem.checkpoint import load_checkpoint
    from mechmem.report import build_report, write_report

    ckpt = load_checkpoint("runs/task2/ckpt.pt")
    report = build_report(ckpt.model, ckpt.task, title="task2")
    write_report(report, "runs/task2/report")      # report.md, report.html (self-contained), report.json

`build_report` measures every head's role once (`head_roles`), runs one section function per analysis and
puts the named circuit first; a section that does not apply is kept with the reason it was skipped. Each
step's cost is recorded (`ReportCost`, report.json's "cost").
"""

import ctypes
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from pathlib import Path
from typing import Any, TypeVar

import torch

from mechmem.analysis.dynamics.progress import FixedCircuit
from mechmem.analysis.options import HEAD_BUDGET
from mechmem.analysis.roles import HeadRole, RoleResult, RoleThresholds, head_roles
from mechmem.analysis.stats import format_interval
from mechmem.models.checks import check_count, check_instance, check_model, check_path, check_seed
from mechmem.models.parts import model_device
from mechmem.progress import Progress, working
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
from mechmem.tasks.base import check_task

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

PATTERN_COLUMNS = {"previous_token": "prev-token", "duplicate_token": "dup-token", "induction": "induction"}
TASK_COLUMNS = {"score": "score", "share": "share", "attention": "attn", "damage": "damage"}
"""Evidence in the roles table, with its column header: attention patterns, then per task role."""
SCORE_PARTS = {"transfer": "transfer", "via_mlp": "via MLP"}
"""The two measurements a task role's score is the larger of (their own table)."""


def deciding_columns(head: HeadRole, task_roles: Sequence[str]) -> list[str]:
    """The evidence keys that decided `head`'s role (a task role's share, or its pattern's score)."""
    if head.role in task_roles:
        return [f"{head.role}_share"]
    if head.role == "shared":
        return [f"{r}_share" for r in task_roles if f"{r}_share" in head.evidence]
    key = head.role.replace("-", "_")
    return [key] if key in PATTERN_COLUMNS else []


def role_table(roles: RoleResult) -> Table:
    """One row per head: its role and the evidence; the value that decided the role is marked."""
    present = {key for h in roles.heads for key in h.evidence}
    patterns = [k for k in PATTERN_COLUMNS if k in present]
    task = [(r, k) for r in roles.task_roles for k in TASK_COLUMNS if f"{r}_{k}" in present]
    keys = patterns + [f"{r}_{k}" for r, k in task]
    headers = ["head", "role", *(PATTERN_COLUMNS[k] for k in patterns), *(TASK_COLUMNS[k] for _, k in task)]
    groups = [("", 2)] + ([("attention pattern (lower end)", len(patterns))] if patterns else [])
    groups += Counter(r for r, _ in task).items()
    rows, marked = [], []
    for i, h in enumerate(roles.heads):
        row: list[Any] = [h.name, h.role]
        for k in patterns:
            lower = h.evidence.get(f"{k}_lower")
            row.append(h.evidence[k] if lower is None else f"{h.evidence[k]:.3f} ({lower:.3f})")
        row += [_with_interval(h.evidence, f"{r}_{k}") for r, k in task]
        rows.append(row)
        marked += [(i, 2 + keys.index(k)) for k in deciding_columns(h, roles.task_roles) if k in keys]
    caption = "Head roles and evidence (marked: the value that decided the role)"
    return Table(headers, rows, caption, groups=groups, marked=marked)


def _with_interval(evidence: dict[str, float], key: str) -> Any:
    """The value, with its marginal 95% interval in brackets where the evidence has one."""
    value = evidence.get(key, float("nan"))
    lower, upper = evidence.get(f"{key}_lower"), evidence.get(f"{key}_upper")
    if lower is None or upper is None:
        return value
    return f"{value:.3f} {format_interval(lower, upper)}"


def score_table(roles: RoleResult) -> Table | None:
    """Per head and task role, the two measurements its score is the larger of (None without task roles)."""
    cols = [
        (r, k)
        for r in roles.task_roles
        for k in SCORE_PARTS
        if any(f"{r}_{k}" in h.evidence for h in roles.heads)
    ]
    if not cols:
        return None
    rows = [[h.name, *(_with_interval(h.evidence, f"{r}_{k}") for r, k in cols)] for h in roles.heads]
    groups = [("", 1), *Counter(r for r, _ in cols).items()]
    headers = ["head", *(SCORE_PARTS[k] for _, k in cols)]
    return Table(headers, rows, "Task-role score = max(transfer, via MLP)", groups=groups)


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
        decision = roles.info.get("task_decision") or {}
        looks = ", ".join(map(str, decision.get("looks", []))) or str(roles.info["n"])
        s.lines.append(
            f"Task roles ({', '.join(roles.task_roles)}) from counterfactual pairs, drawn in rounds of "
            f'{looks} sequences per role ({decision.get("stopped", "budget")}; docs/decisions.md, "Task '
            'roles"), each value with its 95% interval; a role is named when its corrected intervals clear '
            "the thresholds: transfer = rise of p(counterfactual answer) when the head's output is copied "
            "from the counterfactual run; via MLP = the same through the MLP inputs only (path patching); "
            "share = the head's part of the role's total score; attn = attention from the answer onto the "
            "role's keys; damage = drop of p(answer) under mean ablation (reported, not used for the label)."
        )
    s.lines.append(
        "Thresholds: " + ", ".join(f"{k} = {v}" for k, v in roles.thresholds.to_dict().items()) + "."
    )
    if roles.heads:
        s.tables.append(role_table(roles))
        parts = score_table(roles)
        s.tables += [parts] if parts is not None else []
    s.lines += [f"{h.label}: " + "; ".join(h.notes) for h in roles.heads if h.notes]
    return s


T = TypeVar("T")

STEP_BEAT_S = 10.0
"""Seconds between the progress lines printed while one report step runs (`ReportCost` with progress)."""
MEMORY_NOTE = (
    "peak_rss_mb: the process's peak resident memory after the step (getrusage ru_maxrss, which only grows "
    "over the process's life); rss_rise_mb: how much the step raised that peak (0 when it stayed below an "
    "earlier peak); peak_cuda_mb (CUDA only): torch.cuda.max_memory_allocated during the step."
)


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def release_freed_memory() -> None:
    """Hand freed heap memory back to the system (glibc's `malloc_trim`; a no-op elsewhere)."""
    if sys.platform == "linux":
        with suppress(OSError, AttributeError):  # not glibc (e.g. musl): nothing to trim
            ctypes.CDLL("libc.so.6").malloc_trim(0)


class ReportCost:
    """Wall time, CPU time, model passes and memory of each step of one report, with optional progress lines.

    A context manager: `run(name, fn, *args)` calls `fn(*args)` and records its cost under `name` (a
    section's own key). `to_dict()` gives {"seconds", "cpu_seconds", "passes", "rows", "device", "steps":
    {name: {the same, "peak_rss_mb", "rss_rise_mb"[, "peak_cuda_mb"]}}, "memory"}. passes counts the model's
    forward calls and rows the sequences they ran; hook-free replays are not counted.

    Args:
        steps: how many steps the report will run (for the progress line's estimate of the time left).
        model: the model the report analyses (its device; its passes are counted).
        progress: print a progress line after a step when `every_s` seconds passed since the last one, and
            one every `STEP_BEAT_S` seconds while a step runs (`report: NAME: elapsed 20s`).
        every_s: seconds between progress lines.
    """

    def __init__(
        self, steps: int, model: torch.nn.Module, *, progress: bool = False, every_s: float = 5.0
    ) -> None:
        self.model = model
        self.device = model_device(model)
        self.progress = Progress(steps, desc="report", enabled=progress, every_s=every_s, stream=sys.stdout)
        self.steps: dict[str, dict[str, float]] = {}
        self.count = {"passes": 0, "rows": 0}
        self.total: dict[str, float] | None = None

    def _count(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        first = args[0] if args else kwargs.get("input")
        self.count["passes"] += 1
        self.count["rows"] += int(first.shape[0]) if isinstance(first, torch.Tensor) else 0

    def _now(self) -> dict[str, float]:
        return {"seconds": time.perf_counter(), "cpu_seconds": time.process_time(), **self.count}

    def __enter__(self) -> "ReportCost":  # noqa: PYI034 (beartype rejects Self on methods)
        self.handle = self.model.register_forward_pre_hook(self._count, with_kwargs=True)
        self.start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.remove()
        end = self._now()
        self.total = {k: end[k] - self.start[k] for k in end}
        if self.total["seconds"] >= self.progress.every_s:
            self.progress.close()

    def run(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        release_freed_memory()  # what the last step freed, back to the system: each step starts low
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        rss, before = peak_rss_mb(), self._now()
        beat = working(f"report: {name.removesuffix('_section')}", every_s=STEP_BEAT_S, announce=False)
        with beat if self.progress.enabled else nullcontext():  # a line every STEP_BEAT_S within the step
            out = fn(*args)
        if cuda:
            torch.cuda.synchronize(self.device)
        after = self._now()
        step: dict[str, float] = {k: after[k] - before[k] for k in after}
        step |= {"peak_rss_mb": peak_rss_mb(), "rss_rise_mb": peak_rss_mb() - rss}
        if cuda:
            step["peak_cuda_mb"] = torch.cuda.max_memory_allocated(self.device) / 2**20
        key = out.key if isinstance(out, Section) else name
        self.steps[key if key not in self.steps else f"{key}_{len(self.steps)}"] = step
        self.progress.set_postfix(
            done=key, took=f"{step['seconds']:.1f}s", peak=f"{step['peak_rss_mb']:.0f}MB"
        )
        self.progress.update()
        return out

    def to_dict(self) -> dict[str, Any]:
        now = self._now()
        total = self.total or {k: now[k] - self.start[k] for k in now}
        return {**total, "device": str(self.device), "steps": dict(self.steps), "memory": MEMORY_NOTE}


@torch.no_grad()
def build_report(
    model: torch.nn.Module,
    task: Any = None,
    *,
    title: str = "Circuit report",
    meta: dict[str, Any] | None = None,
    n_samples: int = 512,
    seed: int = 0,
    role_samples: int = HEAD_BUDGET,
    thresholds: RoleThresholds | None = None,
    sections: Sequence[Callable[[ReportContext], Section]] = SECTIONS,
    run_dir: str | Path | None = None,
    progress: bool = False,
    memory_mb: float = 256.0,
) -> Report:
    """Measure the head roles, run every section on `model` (and `task`, if any) and return the `Report`.

    Args:
        n_samples: sequences per section's analysis.
        seed: seeds every section's data and the roles' (`head_roles(..., seed=seed)`).
        role_samples: sequences for the head roles, per probe the budget of the sequential rule.
        meta: provenance (name -> text); "seed / samples" is added.
        run_dir: the checkpoint's run directory; adds the training-dynamics section.
        progress: print progress lines with the estimated time left (see `ReportCost`).
        memory_mb: memory budget (MB) of the batched passes and cached runs of the sections that have one
            (patching, edges); their peak memory follows it.

    Example:
        >>> import mechmem, torch
        >>> model = mechmem.planted_induction_model()    # L0H2 previous-token, L1H1 induction head
        >>> task = mechmem.build_task("repeats", {"d_vocab": 12, "half": 8})
        >>> report = mechmem.build_report(model, task, n_samples=64, role_samples=64)
        >>> [h["role"] for h in report.section("circuit").findings["heads"] if h["role"] != "none"]
        ['previous-token', 'induction']
    """
    check_model(model)
    if task is not None:
        check_task(task, model)
    check_count("n_samples", n_samples)
    check_count("role_samples", role_samples)
    check_seed(seed)
    check_instance("title", title, str)
    if run_dir is not None:
        check_path(run_dir, "run_dir")
    with ReportCost(2 + len(sections) + (run_dir is not None), model, progress=progress) as cost:
        roles = cost.run(
            "roles", lambda: head_roles(model, task, n=role_samples, seed=seed, thresholds=thresholds)
        )
        ctx = ReportContext(model, task, n_samples, seed, roles, memory_mb)
        done = [cost.run(fn.__name__, fn, ctx) for fn in sections]
        if run_dir is not None:
            edges = next((s for s in done if s.key == "edges" and not s.skipped and s.findings), None)
            followed = None if edges is None else FixedCircuit(
                tuple(edges.findings["circuit"]), "the report's edge circuit (decided, mean ablation)"
            )  # fmt: skip
            done.append(
                cost.run("dynamics", lambda: dynamics_section(run_dir, task, seed=seed, circuit=followed))
            )
        mlp = next((s for s in done if s.key == "mlp"), None)
        circuit = cost.run("circuit", circuit_section, roles, mlp)
    optimum = next((s for s in done if s.key == "optimum" and not s.skipped), None)
    headline = optimum.findings["headline"] if optimum else ""
    meta = {**(meta or {}), "seed / samples": f"{seed} / {n_samples}"}
    return Report(title, headline, meta, [circuit, *done], cost=cost.to_dict())


__all__ = [
    "SECTIONS",
    "HeadRole",
    "Report",
    "ReportContext",
    "ReportCost",
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
