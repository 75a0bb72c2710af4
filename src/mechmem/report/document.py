"""The report as data, and its three writers: markdown, self-contained html, and json.

A `Report` is a title, a headline and a list of `Section`s. Each section holds findings in words (`lines`),
tables, PNG figures and a JSON-able `findings` dict; a section that does not apply says why in `skipped`.
The markdown and html are rendered from the same structure, so they always agree; the html embeds every figure
as a base64 `data:` URI and loads nothing from anywhere else, so it opens offline from any folder.
"""

import base64
import html
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechmem.io import OutputSet, atomic_write, dumps, plain_json


@dataclass
class Table:
    """A small table: a header row and rows of cells (numbers are formatted with `floatfmt`)."""

    headers: list[str]
    rows: list[list[Any]]
    caption: str = ""
    floatfmt: str = ".3f"

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.headers):
                raise ValueError(
                    f"row {row!r} has {len(row)} cells, the table has {len(self.headers)} columns"
                )

    def cells(self) -> list[list[str]]:
        def fmt(v: Any) -> str:
            return format(v, self.floatfmt) if isinstance(v, float) else str(v)

        return [[fmt(v) for v in row] for row in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return {"caption": self.caption, "headers": self.headers, "rows": self.rows}


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

    def add_figure(self, name: str, fig: Any) -> None:
        """Store a matplotlib figure as PNG bytes (and close it)."""
        from mechmem.plotting import plt

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        plt.close(fig)
        self.figures[name] = buf.getvalue()

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "headline": self.headline,
            "meta": self.meta,
            "sections": {s.key: s.to_dict() for s in self.sections},
            "cost": self.cost,
        }


def to_markdown(report: Report, *, figure_dir: str | None = "figures", figure_prefix: str = "") -> str:
    """Markdown with figures linked as `{figure_dir}/{figure_prefix}{section}-{name}.png`.

    `figure_dir=None` leaves the figures out.
    """
    out = [f"# {report.title}", "", f"**{report.headline}**" if report.headline else "", ""]
    out += [f"- {k}: {v}" for k, v in report.meta.items()] + [""]
    for s in report.sections:
        out += [
            f"## {s.title}",
            "",
            section_markdown(s, figure_dir=figure_dir, figure_prefix=figure_prefix),
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


def section_markdown(s: Section, *, figure_dir: str | None = "figures", figure_prefix: str = "") -> str:
    """One section's body (no heading): its lines as bullets, its tables, then its figures."""
    if s.skipped:
        return f"_Skipped: {s.skipped}_"
    out = [f"- {line}" for line in s.lines] + ([""] if s.lines else [])
    for t in s.tables:
        if t.caption:
            out += [t.caption, ""]
        out += ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
        out += ["| " + " | ".join(row) + " |" for row in t.cells()] + [""]
    if figure_dir is not None:
        out += [f"![{name}]({figure_dir}/{figure_prefix}{s.key}-{name}.png)" for name in s.figures]
    return "\n".join(out).strip()


_CSS = (
    "body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1em;font-size:.9em}"
    "td,th{border:1px solid #bbb;padding:2px 8px;text-align:right}"
    "th{background:#eee}caption{text-align:left;font-style:italic}img{max-width:100%}"
    ".skip{color:#777;font-style:italic}.headline{font-size:1.1em;font-weight:bold}"
)


def to_html(report: Report) -> str:
    """One self-contained html page: inline CSS, figures as base64 data URIs, no scripts, no links out."""
    e = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(report.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{e(report.title)}</h1>",
        f'<p class="headline">{e(report.headline)}</p>',
        "<ul>" + "".join(f"<li>{e(str(k))}: {e(str(v))}</li>" for k, v in report.meta.items()) + "</ul>",
    ]
    for s in report.sections:
        parts.append(f'<h2 id="{e(s.key)}">{e(s.title)}</h2>')
        if s.skipped:
            parts.append(f'<p class="skip">Skipped: {e(s.skipped)}</p>')
            continue
        if s.lines:
            parts.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in s.lines) + "</ul>")
        for t in s.tables:
            head = "".join(f"<th>{e(h)}</th>" for h in t.headers)
            body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in t.cells())
            caption = f"<caption>{e(t.caption)}</caption>" if t.caption else ""
            parts.append(f"<table>{caption}<tr>{head}</tr>{body}</table>")
        for name, png in s.figures.items():
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<figure><img alt="{e(name)}" src="data:image/png;base64,{data}"></figure>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(report: Report, out_dir: str | Path) -> dict[str, Path]:
    """Write report.md (+ figures/*.png), report.html and report.json into `out_dir`; returns their paths.

    The set is committed together (`mechmem.io.OutputSet`): every file is staged first and renamed into place
    only when all are written, so a full disk or an interrupt leaves the previous report whole, and figures/
    is replaced as one folder (a link planted there is replaced, never written through).
    """
    with OutputSet(Path(out_dir)) as files:
        return stage_report(report, files)


def stage_report(report: Report, files: OutputSet, folder: str = "") -> dict[str, Path]:
    """Stage report.md, report.html, report.json and figures/ in `files` (under `folder`, "" for its top);
    returns their final paths by kind. `write_report` and `mechmem analyse` (one output set for every
    analysis) both call it."""
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

    Text before the first marker is keyed "intro". Prose lives in docs/, never in Python strings, so a page's
    words can be edited without touching code and its numbers cannot be typed in by hand.
    """
    blocks: dict[str, list[str]] = {"intro": []}
    key = "intro"
    for line in Path(path).read_text().splitlines():
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
    """A reproduction page: the report's computed sections, each preceded by its hand-written prose (if any).

    Sections render as in `to_markdown` (lines as bullets, tables, figures linked as
    `{figure_dir}/{figure_prefix}{section key}-{figure name}.png`).
    """
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
    """Write a reproduction page (markdown) and its figures (PNG files named `{stem}_{section}-{name}.png`).

    Args:
        report: the page's computed content, from the paper's `page(record)`.
        md_path: the markdown file to write.
        prose: the hand-written text (see `read_prose`), or None.
        figure_dir: where figures go (default: `figures/` beside the page).
    """
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
    entries: list[dict[str, str]], path: str | Path, *, title: str = "mechmem demo reports"
) -> Path:
    """An html index linking each report: entries hold "name", "href" (relative), "headline" and "roles"."""
    e = html.escape
    rows = "".join(
        f'<tr><td style="text-align:left"><a href="{e(x["href"])}">{e(x["name"])}</a></td>'
        f'<td style="text-align:left">{e(x.get("headline", ""))}</td>'
        f'<td style="text-align:left">{e(x.get("roles", ""))}</td></tr>'
        for x in entries
    )
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{e(title)}</h1>"
        f'<table><tr><th style="text-align:left">model</th><th style="text-align:left">headline</th>'
        f'<th style="text-align:left">circuit</th></tr>{rows}</table></body></html>\n'
    )
    return atomic_write(path, page)
