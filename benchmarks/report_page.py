"""Size and load time of report pages in headless chromium, and screenshots of the index and one report.

    python analyses/demo.py --out runs/demo --reports reports          # or any folder of reports + index.html
    python benchmarks/report_page.py reports --shots docs/figures --shot-report permutation-task2

For `DIR/index.html` and every `DIR/*/report.html` it prints the file's size and its load time in chromium
(navigation start to the end of the load event, `PerformanceNavigationTiming.loadEventEnd`; the median of
`--repeat` loads in one browser at 1280 x 900), and fails (exit 1) when a page logs an error or requests
anything but itself. With `--shots`, writes `report_index.png` (the index) and `report_task2.png` (the top of
the report named by `--shot-report`, scaled to half size) and `report_graph.png` (its circuit graph with its
strongest kept edge selected) there. The browser is driven by the tests' DevTools
client (`tests/browser.py`).
"""

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the DevTools client the browser tests use

from browser import Browser


def measure(b: Browser, page: Path, repeat: int) -> dict[str, float]:
    times = [b.open(page) for _ in range(repeat)]
    if b.errors or b.external_requests():
        raise SystemExit(f"{page}: errors {b.errors}, requests {b.external_requests()}")
    return {"bytes": page.stat().st_size, "load_s": statistics.median(times), "max_s": max(times)}


def shrink(path: Path, height: int) -> None:
    """Crop a screenshot to its top `height` CSS pixels, halve it and keep 64 colours (small PNGs for the
    docs)."""
    from PIL import Image

    im = Image.open(path).convert("RGB")
    im = im.crop((0, 0, im.width, min(height, im.height)))
    im = im.resize((im.width // 2, im.height // 2), Image.LANCZOS)
    im.quantize(64).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("reports", type=Path, help="folder holding index.html and NAME/report.html")
    p.add_argument("--repeat", type=int, default=5, help="loads per page (the median is printed)")
    p.add_argument("--shots", type=Path, default=None, help="folder for the two screenshots")
    p.add_argument("--shot-report", default=None, help="report (folder name) to screenshot (default: first)")
    p.add_argument("--shot-height", type=int, default=2400, help="pixels of the report kept from its top")
    args = p.parse_args(argv)
    pages = [args.reports / "index.html", *sorted(args.reports.glob("*/report.html"))]
    with Browser(1280, 900) as b:
        print(f"{'page':<40} {'KiB':>8} {'load s':>8} {'max s':>8}")
        for page in pages:
            m = measure(b, page, args.repeat)
            name = str(page.relative_to(args.reports))
            print(f"{name:<40} {m['bytes'] / 1024:>8.0f} {m['load_s']:>8.3f} {m['max_s']:>8.3f}")
        if args.shots is not None:
            args.shots.mkdir(parents=True, exist_ok=True)
            b.open(pages[0])
            bottom = b.evaluate("document.querySelector('.mm-report').getBoundingClientRect().bottom")
            shrink(b.screenshot(args.shots / "report_index.png", full_page=True), int(bottom) + 10)
            report = args.reports / (args.shot_report or pages[1].parent.name) / "report.html"
            b.open(report)
            shrink(b.screenshot(args.shots / "report_task2.png", full_page=True), args.shot_height)
            b.click(
                ".mm-graph .edge-hit"
            )  # the kept edges are drawn strongest last: the first is any kept one
            shrink(b.screenshot_element(".view[data-view=graph]", args.shots / "report_graph.png"), 10_000)
            print(f"wrote report_index.png, report_task2.png and report_graph.png into {args.shots}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
