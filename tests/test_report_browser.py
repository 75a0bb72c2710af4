"""The report html renders in a real headless browser (Debian's chromium), offline, with its figures.

Skips only when no chromium binary is installed (`apt-get install -y chromium`). The same check by hand:

    chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
        --window-size=1200,2400 --screenshot=shot.png file://$PWD/runs/task2/report/report.html
"""

import shutil
import subprocess

import numpy as np
import pytest

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
)


@pytest.mark.subprocess
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_html_renders_offline(tmp_path):
    from mechmem.plotting import plt
    from mechmem.report import build_report, write_report
    from mechmem.tasks import build_task
    from mechmem_papers.permutation import planted

    report = build_report(
        planted.planted_permutation_model(),
        build_task("permutation", {"repeat_ratio": 0.3}),
        title="browser check",
        n_samples=32,
    )
    page = write_report(report, tmp_path / "report")["html"]
    # Move the html away from its figures/ folder: a self-contained page must not need them.
    alone = tmp_path / "alone.html"
    alone.write_text(page.read_text())
    shot = tmp_path / "shot.png"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--hide-scrollbars",
        "--window-size=1000,3000",
        f"--screenshot={shot}",
        alone.as_uri(),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert shot.exists(), done.stderr[-2000:]
    pixels = plt.imread(shot)[..., :3]
    assert pixels.shape[:2] == (3000, 1000)
    # Not a blank page: text and figures put dark and coloured pixels on the white background.
    dark = (pixels.mean(-1) < 0.5).mean()
    coloured = (pixels.max(-1) - pixels.min(-1) > 0.25).mean()
    assert dark > 0.005 and coloured > 0.005, (dark, coloured)
    assert np.isfinite(pixels).all()
