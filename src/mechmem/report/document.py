"""The report as data, and its three writers: markdown, self-contained html, and json.

A `Report` is a title, a headline and a list of `Section`s (lines, tables, PNG figures, `findings`, and the
data of the html's interactive views). Markdown and html render the same structure; the html is
self-contained.
"""

import html
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechmem.io import OutputSet, atomic_write, dumps, plain_json
from mechmem.report.html import index_page, report_page


@dataclass
class Table:
    """A small table: a header row and rows of cells (numbers are formatted with `floatfmt`)."""

    headers: list[str]
    rows: list[list[Any]]
    caption: str = ""
    floatfmt: str = ".3f"
    groups: list[tuple[str, int]] = field(default_factory=list)
    """Optional header groups over the columns, left to right: (label, number of columns)."""
    marked: list[tuple[int, int]] = field(default_factory=list)
    """(row, column) of the cells that decided a result (bold in markdown, highlighted in html)."""

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(
                    f"row {row!r} has {len(row)} cells, the table has {len(self.headers)} columns"
                )
        if self.groups and sum(n for _, n in self.groups) != len(self.headers):
            raise ValueError(f"header groups {self.groups} do not cover the {len(self.headers)} columns")

    def cells(self) -> list[list[str]]:
        return [
            [format(v, self.floatfmt) if isinstance(v, float) else str(v) for v in row] for row in self.rows
        ]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"caption": self.caption, "headers": self.headers, "rows": self.rows}
        if self.groups:
            out["groups"] = [list(g) for g in self.groups]
        if self.marked:
            out["marked"] = [list(m) for m in self.marked]
        return out


@dataclass
class Section:
    """One analysis in the report. `skipped` holds the reason when the analysis does not apply."""

    key: str
    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: dict[str, bytes] = field(default_factory=dict)
    findings: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    interactive: dict[str, Any] = field(default_factory=dict)
    """Data of the html's interactive views: "attention", "heatmaps", "graph" (not in report.json)."""

    def add_figure(self, name: str, fig: Any) -> None:
        """Store a matplotlib figure as PNG bytes (and close it)."""
        from mechmem.plotting import figure_png

        self.figures[name] = figure_png(fig, dpi=90)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "skipped": self.skipped,
            "summary": self.lines,
            "findings": self.findings,
            "tables": [t.to_dict() for t in self.tables],
            "figures": sorted(self.figures),
        }


@dataclass
class Report:
    """A circuit report: what was analysed, the headline, and one section per analysis."""

    title: str
    headline: str
    meta: dict[str, Any]
    sections: list[Section]
    cost: dict[str, Any] = field(default_factory=dict)
    """What building it cost: wall time and memory per step (`mechmem.report.ReportCost`)."""

    def section(self, key: str) -> Section:
        for s in self.sections:
            if s.key == key:
                return s
        raise KeyError(key)

    @property
    def off_distribution(self) -> list[str]:
        """The sections whose prompts the prompt-fit check (`mechmem.analysis.distribution`) flagged."""
        return [s.key for s in self.sections if _off(s)]

    @property
    def flagged_headline(self) -> str:
        """The headline, followed by a warning naming the sections whose prompts are off-distribution."""
        off = self.off_distribution
        warning = f"WARNING: prompts off the model's distribution in {', '.join(off)}" if off else ""
        return " | ".join(part for part in (self.headline, warning) if part)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "headline": self.flagged_headline,
            "off_distribution": self.off_distribution,
            "meta": self.meta,
            "sections": {s.key: s.to_dict() for s in self.sections},
            "cost": self.cost,
        }

    def _repr_html_(self) -> str:
        """The report inline in a notebook: the page `to_html` writes, in an iframe."""
        page = html.escape(to_html(self), quote=True)
        return (
            f'<iframe title="{html.escape(self.title)}" srcdoc="{page}" '
            'style="width:100%;height:80vh;border:1px solid #ddd"></iframe>'
        )


def to_markdown(report: Report, *, figure_dir: str | None = "figures", figure_prefix: str = "") -> str:
    """Markdown with figures linked as `{figure_dir}/{figure_prefix}{section}-{name}.png` (None: none)."""
    headline = report.flagged_headline
    out = [f"# {report.title}", "", f"**{headline}**" if headline else "", ""]
    out += [f"- **{k}**: {v}" for k, v in summary_rows(report)] + [""]
    out += [f"- {k}: {v}" for k, v in report.meta.items()] + [""]
    for s in report.sections:
        out += [f"## {s.title}", ""]
        out += [section_markdown(s, figure_dir=figure_dir, figure_prefix=figure_prefix), ""]
    return "\n".join(out).rstrip() + "\n"


def section_markdown(s: Section, *, figure_dir: str | None = "figures", figure_prefix: str = "") -> str:
    """One section's body (no heading): its lines as bullets, its tables, then its figures."""
    if s.skipped:
        return f"_Skipped: {s.skipped}_"
    out = [f"- {line}" for line in s.lines] + ([""] if s.lines else [])
    for t in s.tables:
        if t.caption:
            out += [t.caption, ""]
        cells = t.cells()
        for r, c in t.marked:
            cells[r][c] = f"**{cells[r][c]}**"
        headers = t.headers
        if t.groups:
            spans = [label for label, n in t.groups for _ in range(n)]
            headers = [f"{g} {h}" if g and g != h else h for g, h in zip(spans, t.headers)]
        out += ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join(row) + " |" for row in cells] + [""]
    if figure_dir is not None:
        out += [f"![{name}]({figure_dir}/{figure_prefix}{s.key}-{name}.png)" for name in s.figures]
    return "\n".join(out).strip()


def to_html(report: Report) -> str:
    """One self-contained interactive html page (`mechmem.report.html.report_page`)."""
    return report_page(report, summary_rows(report))


def summary_rows(report: Report) -> list[tuple[str, str]]:
    """The verdicts that open a report, as (label, text): circuit, MLP, headline, off-distribution warning,
    edge circuit, heads it leaves out, sections skipped."""
    found = {s.key: s for s in report.sections}
    under = report.meta.get("trained under interventions")
    rows = [("trained under interventions", str(under))] if under else []
    circuit = found.get("circuit")
    if circuit is not None and circuit.findings.get("summary"):
        rows.append(("named circuit", str(circuit.findings["summary"])))
        if "mlp" in circuit.findings:
            m = circuit.findings["mlp"]
            rows.append(("MLP", f"layer {m['layer']}: {m['role']}; key neurons {m['key_neurons'] or 'none'}"))
    if report.headline:
        rows.append(("headline", report.headline))
    off = [f"{s.key}: {s.findings['prompt_fit']['message']}" for s in report.sections if _off(s)]
    rows += [("prompts off the model's distribution", "; ".join(off))] if off else []
    edges = found.get("edges")
    if edges is not None and not edges.skipped and "verdict" in edges.findings:
        f, ci = edges.findings, edges.findings.get("intervals", {})

        def measure(name: str) -> str:
            why, lo_hi = f.get("not_measurable", {}).get(name), ci.get(name)
            if why:
                return f"{name} not measurable here ({why})"
            bounds = f" [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]" if lo_hi else " (no interval)"
            return f"{name} {f[name]:.3f}{bounds}"

        kept = len(f.get("circuit", []))
        overshoots = "; the circuit overshoots the full model" if f.get("overshoots") else ""
        verdict = f"confident: {f['verdict']}; {measure('faithfulness')}, {measure('completeness')}; "
        rows.append(("edge circuit", f"{verdict}{kept} of {len(f.get('edges', []))} edges{overshoots}"))
        left_out = [f"{h['head']}: {h['reason']}" for h in f.get("left_out", [])]
        if left_out:
            rows.append(
                ("roles and circuit disagree", "named but not in the circuit: " + "; ".join(left_out))
            )
    skipped = [f"{s.key} ({s.skipped})" for s in report.sections if s.skipped]
    rows.append(("skipped", "; ".join(skipped) if skipped else "none"))
    return rows


def _off(section: Section) -> bool:
    """True when the section's prompt-fit check flagged its prompts."""
    return bool(section.findings.get("prompt_fit", {}).get("off_distribution")) and not section.skipped


def write_report(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write report.md (+ figures/*.png), report.html and report.json into `out_dir`; returns their paths.

    The files are committed together (`mechmem.io.OutputSet`).
    """
    with OutputSet(Path(out_dir)) as files:
        return stage_report(report, files)


def stage_report(report: Report, files: OutputSet, folder: str = "") -> dict[str, Path]:
    """Stage report.md, .html, .json and figures/ in `files` under `folder`; returns their paths by kind."""
    prefix = f"{folder}/" if folder else ""
    figures = {f"{s.key}-{name}.png": png for s in report.sections for name, png in s.figures.items()}
    files.add_dir(f"{prefix}figures", figures)
    return {
        "md": files.add(f"{prefix}report.md", to_markdown(report)),
        "html": files.add(f"{prefix}report.html", to_html(report)),
        "json": files.add(f"{prefix}report.json", dumps(plain_json(report.to_dict()), indent=2) + "\n"),
    }


def read_prose(path: str | Path) -> dict[str, str]:
    """Hand-written page text by section key: a markdown file of `<!-- section: KEY -->` blocks.

    Text before the first marker is keyed "intro".
    """
    blocks: dict[str, list[str]] = {"intro": []}
    key = "intro"
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        marker = line.strip()
        if marker.startswith("<!-- section:") and marker.endswith("-->"):
            key = marker.removeprefix("<!-- section:").removesuffix("-->").strip()
            blocks.setdefault(key, [])
            continue
        blocks[key].append(line)
    return {k: "\n".join(v).strip() for k, v in blocks.items() if "\n".join(v).strip()}


def page_markdown(
    report: Report,
    prose: dict[str, str] | None = None,
    *,
    figure_dir: str = "figures",
    figure_prefix: str = "",
) -> str:
    """A reproduction page: the report's sections (as in `to_markdown`), each after its prose (if any)."""
    prose = prose or {}
    out = [f"# {report.title}", ""]
    out += [report.headline, ""] if report.headline else []
    out += [f"- {k}: {v}" for k, v in report.meta.items()] + ([""] if report.meta else [])
    out += [prose["intro"], ""] if "intro" in prose else []
    for s in report.sections:
        out += [f"## {s.title}", ""]
        out += [prose[s.key], ""] if s.key in prose else []
        out += [section_markdown(s, figure_dir=figure_dir, figure_prefix=figure_prefix), ""]
    return "\n".join(out).rstrip() + "\n"


def write_page(
    report: Report,
    md_path: str | Path,
    *,
    prose: str | Path | None = None,
    figure_dir: str | Path | None = None,
) -> Path:
    """Write a reproduction page (markdown, the paper's `page(record)` after the hand-written `prose`, see
    `read_prose`) and its figures as `{stem}_{section}-{name}.png` in `figure_dir` (default: `figures/` beside
    the page)."""
    md_path = Path(md_path)
    fig_dir = Path(figure_dir) if figure_dir is not None else md_path.parent / "figures"
    stem = md_path.stem
    for s in report.sections:
        for name, png in s.figures.items():
            atomic_write(fig_dir / f"{stem}_{s.key}-{name}.png", png)
    rel = os.path.relpath(fig_dir, md_path.parent)
    text = page_markdown(
        report, read_prose(prose) if prose else None, figure_dir=rel, figure_prefix=f"{stem}_"
    )
    return atomic_write(md_path, text)


def write_index(
    entries: list[dict[str, Any]], path: str | Path, *, title: str = "mechmem demo reports"
) -> Path:
    """An html index linking each report, sortable by any column (`mechmem.report.html.index_page`).

    Each entry holds "name", "href" (relative) and optionally "preset", "date", "seed" (seed / samples),
    "headline", "roles" (markdown's `code` is rendered), "verdict" and "faithfulness" (a float, or None)."""
    return atomic_write(path, index_page(entries, title=title))
