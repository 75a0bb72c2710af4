"""Reproduce a paper through its plugin: run (or reuse) its experiments, record every number, write its page.

    mechmem reproduce --list
    mechmem reproduce permutation --variant quick          # CPU minutes
    mechmem reproduce permutation --page-only              # the page again from the record
    mechmem reproduce birth --variant quick --set runs=runs/birth_repro

The record goes to docs/reproductions/data/NAME.json, the page to docs/reproductions/NAME.md (prose from
docs/reproductions/prose/NAME.md, figures to docs/reproductions/figures/NAME_*.png); a non-default variant
writes NAME-VARIANT.json / NAME-VARIANT.md.
"""

import json
from pathlib import Path

from mechmem.cli import ArgumentParser, write_json
from mechmem.errors import MechmemError
from mechmem.plugins import get_paper, paper_names


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    parser = ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("paper", nargs="?", help="paper name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the papers and their variants")
    parser.add_argument("--variant", default=None, help="which reproduction (default: the paper's first)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a spec option")
    parser.add_argument("--page-only", action="store_true", help="rebuild the page from the existing record")
    parser.add_argument("--docs", default="docs/reproductions", help="folder of pages, records and prose")
    args = parser.parse_args(argv)
    bad = [item for item in args.set if "=" not in item]
    if bad:
        raise MechmemError(f"--set takes KEY=VALUE, got {bad[0]!r}")
    options = dict(item.split("=", 1) for item in args.set)
    from mechmem.report.document import write_page  # torch is imported from here on (so are the papers)

    if args.list or not args.paper:
        for name in paper_names():
            paper = get_paper(name)
            print(f"{name:14s} {paper.title}  (variants: {', '.join(paper.variants)})")
        return 0
    paper, docs = get_paper(args.paper), Path(args.docs)
    variant = args.variant or paper.variants[0]
    stem = paper.name if variant == paper.variants[0] else f"{paper.name}-{variant}"
    record_path = docs / "data" / f"{stem}.json"
    if args.page_only:
        if not record_path.exists():
            raise MechmemError(f"no record at {record_path}: run without --page-only first")
        record = json.loads(record_path.read_text(encoding="utf-8"))
    else:
        spec = paper.spec(variant, options)
        record = paper.run(spec, lambda line: print(line, flush=True))
        write_json(record_path, record)
    prose = docs / "prose" / f"{paper.name}.md"
    shown = paper.references(record, docs / "data") if paper.references else record
    page = write_page(paper.page(shown), docs / f"{stem}.md", prose=prose if prose.exists() else None)
    print(f"wrote {page} from {record_path}")
    return 0
