"""The report's html: one self-contained page a researcher explores, and the index that links the reports.

`report_page` renders every section as a collapsible block (lines, tables, figures as base64 `data:` URIs)
under a summary of the verdicts, and embeds the sections' `interactive` data as one JSON blob that an inline
script (`assets/report.js`) draws. The page loads nothing from anywhere. `index_page` is the sortable table of
every report.
"""

import base64
import html
import json
import math
import re
from importlib import resources
from typing import Any

DIGITS = 6
"""Significant digits kept for the numbers in the embedded JSON (the page shows 3 decimals)."""


def asset(name: str) -> str:
    """The text of `assets/NAME` (package data: the page's script and style sheet)."""
    return resources.files("mechmem.report").joinpath("assets", name).read_text(encoding="utf-8")


def compact(value: Any) -> Any:
    """`value` with floats rounded to `DIGITS` significant digits and NaN / inf as None (valid JSON)."""
    if isinstance(value, float):
        return None if not math.isfinite(value) else float(f"{value:.{DIGITS}g}")
    if isinstance(value, dict):
        return {str(k): compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [compact(v) for v in value]
    return value


def json_blob(data: Any) -> str:
    """`data` as JSON that is safe inside a `<script>` element (no "</" can end it early)."""
    text = json.dumps(compact(data), separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


BOUNDS = re.compile(r"^(\S+) ([\[(][^\[\]()]*[\])])$")
"""A cell "value [lower, upper]" or "value (lower end)": the value and its bounds, which html stacks."""


CODE = re.compile(r"`([^`]+)`")
"""Inline code in markdown: `name`."""


def inline(text: str) -> str:
    """Escaped text with markdown's inline code (`name`) as <code>.

    Example:
        >>> inline("see `edges` & more")
        'see <code>edges</code> &amp; more'
    """
    return CODE.sub(r"<code>\1</code>", html.escape(text))


def stacked(cell: str) -> str:
    """One escaped table cell; bounds after a value go on a second, smaller line."""
    found = BOUNDS.match(cell)
    if found is None:
        return html.escape(cell)
    value, bounds = found.groups()
    return f'{html.escape(value)}<br><span class="ci">{html.escape(bounds)}</span>'


WRAP_ABOVE = 40
"""Cells longer than this many characters (definitions, notes) wrap instead of widening the table."""


def table_html(t: Any) -> str:
    """A `document.Table`: optional header groups, headers, cells; marked cells get class "decided"."""
    e = html.escape
    marked = set(map(tuple, t.marked))
    head = ""
    if t.groups:
        head = "<tr>" + "".join(f'<th colspan="{n}" class="group">{e(g)}</th>' for g, n in t.groups) + "</tr>"
    head += "<tr>" + "".join(f"<th>{e(h)}</th>" for h in t.headers) + "</tr>"
    decided = ' class="decided" title="decided the result"'

    def attributes(r: int, i: int, cell: str) -> str:
        if (r, i) in marked:
            return decided
        return ' class="text"' if len(cell) > WRAP_ABOVE else ""

    body = "".join(
        "<tr>" + "".join(f"<td{attributes(r, i, c)}>{stacked(c)}</td>" for i, c in enumerate(row)) + "</tr>"
        for r, row in enumerate(t.cells())
    )
    caption = f"<caption>{e(t.caption)}</caption>" if t.caption else ""
    return f'<div class="scroll"><table>{caption}<thead>{head}</thead><tbody>{body}</tbody></table></div>'


def section_html(s: Any) -> str:
    """One `document.Section`, collapsible: lines, interactive views (the script draws them), tables."""
    e = html.escape
    parts = [f'<details class="section" id="{e(s.key)}" open><summary><h2>{e(s.title)}</h2></summary>']
    if s.skipped:
        return parts[0] + f'<p class="skip">Skipped: {e(s.skipped)}</p></details>'
    if s.lines:
        parts.append("<ul>" + "".join(f"<li>{inline(line)}</li>" for line in s.lines) + "</ul>")
    for view in s.interactive:
        parts.append(f'<div class="view" data-view="{e(view)}" data-section="{e(s.key)}"></div>')
    parts += [table_html(t) for t in s.tables]
    for name, png in s.figures.items():
        data = base64.b64encode(png).decode("ascii")
        parts.append(
            f'<figure><img alt="{e(s.key)} {e(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{e(name)}</figcaption></figure>"
        )
    parts.append("</details>")
    return "".join(parts)


def report_page(report: Any, summary: list[tuple[str, str]]) -> str:
    """The whole `document.Report` as one self-contained page; `summary` (label, text) rows open it."""
    e = html.escape
    data = {s.key: s.interactive for s in report.sections if s.interactive and not s.skipped}
    rows = "".join(f'<tr><th scope="row">{e(k)}</th><td>{e(v)}</td></tr>' for k, v in summary)
    toc = " · ".join(
        f'<a href="#{e(s.key)}"{" class=skipped" if s.skipped else ""}>{e(s.title.split(":")[0])}</a>'
        for s in report.sections
    )
    meta = "".join(f"<li>{e(str(k))}: {e(str(v))}</li>" for k, v in report.meta.items())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(report.title)}</title><style>{asset('report.css')}</style></head><body>"
        f'<div class="mm-report"><h1>{e(report.title)}</h1>'
        f'<p class="headline">{e(report.flagged_headline)}</p>'
        f'<table class="summary" id="summary">{rows}</table>'
        f'<nav class="toc">{toc} · <button type="button" id="mm-toggle">collapse all</button></nav>'
        f'<details class="meta"><summary>provenance</summary><ul>{meta}</ul></details>'
        + "".join(section_html(s) for s in report.sections)
        + f'</div><script type="application/json" id="mm-data">{json_blob(data)}</script>'
        f"<script>{asset('report.js')}</script></body></html>\n"
    )


INDEX_COLUMNS = (
    "model", "preset", "date (UTC)", "seed / samples", "headline", "named roles", "circuit confident",
    "faithfulness",
)  # fmt: skip


def index_page(entries: list[dict[str, Any]], *, title: str) -> str:
    """A sortable table of reports (click a header to sort by it); see `document.write_index`."""
    e = html.escape
    rows = []
    for x in entries:
        faith = x.get("faithfulness")
        faith_text = "n/a" if faith is None or not math.isfinite(faith) else f"{faith:.3f}"
        sort = "" if faith_text == "n/a" else f' data-sort="{faith:.6f}"'
        rows.append(
            f'<tr><td><a href="{e(x["href"])}">{e(x["name"])}</a></td>'
            + "".join(f"<td>{e(str(x.get(k, '')))}</td>" for k in ("preset", "date", "seed"))
            + f"<td>{inline(x.get('headline', ''))}</td><td>{inline(x.get('roles', ''))}</td>"
            f'<td class="verdict-{e(x.get("verdict", "n/a"))}">{e(x.get("verdict", "n/a"))}</td>'
            f'<td class="num"{sort}>{faith_text}</td></tr>'
        )
    head = "".join(
        f'<th scope="col" tabindex="0" data-col="{i}">{c}</th>' for i, c in enumerate(INDEX_COLUMNS)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title><style>{asset('report.css')}</style></head><body>"
        f'<div class="mm-report"><h1>{e(title)}</h1>'
        "<p>Click a column header to sort by it (again to reverse). Each model links to its interactive "
        "report; 'circuit confident' and faithfulness are the edge circuit's (its <code>edges</code> "
        "section); the date is when the report was written.</p>"
        f'<div class="scroll"><table class="index" id="index"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div></div>"
        f"<script>{asset('index.js')}</script></body></html>\n"
    )


__all__ = [
    "asset",
    "compact",
    "index_page",
    "inline",
    "json_blob",
    "report_page",
    "section_html",
    "table_html",
]
