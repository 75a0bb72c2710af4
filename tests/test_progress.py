"""Progress: lines at regular intervals when output is not a terminal; the demo's log watcher picks them up."""

import io
import threading

from mechmem.progress import Progress, format_seconds, last_progress_line, watch_logs


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lines_at_intervals_with_estimate(tmp_path):
    out, clock = io.StringIO(), FakeClock()
    with Progress(100, desc="train x", stream=out, every_s=10.0, clock=clock) as bar:
        for _ in range(100):
            clock.t += 1  # one second per step: a line every 10 steps
            bar.set_postfix(loss="0.5000")
            bar.update()
    lines = out.getvalue().splitlines()
    assert len(lines) == 11  # ten intervals and the closing line
    assert lines[2] == "train x: step 30/100 (30%) loss 0.5000 elapsed 30s left ~1m10s"
    assert lines[-1].startswith("train x: step 100/100 (100%)") and lines[-1].endswith("left ~0s")
    log = tmp_path / "train.log"
    log.write_text("starting\n" + out.getvalue() + "done\n")
    assert last_progress_line(log) == lines[-1]
    assert last_progress_line(tmp_path / "missing.log") is None
    assert (format_seconds(5), format_seconds(185), format_seconds(3720)) == ("5s", "3m05s", "1h02m")


def test_disabled_prints_nothing_and_resumed_runs_estimate_from_new_steps():
    out, clock = io.StringIO(), FakeClock()
    quiet = Progress(10, stream=out, enabled=False, every_s=0.0, clock=clock)
    quiet.update(5)
    quiet.close()
    assert out.getvalue() == ""
    resumed = Progress(100, initial=50, desc="d", stream=out, every_s=1e9, clock=clock)
    clock.t = 10
    resumed.update(10)  # 10 new steps in 10 s: 40 left, about 40 s
    assert resumed.line().endswith("elapsed 10s left ~40s")


def test_watch_logs_prints_each_moved_job_once(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("train t: step 1/2 (50%) elapsed 1s left ~1s\n")
    out, stop = io.StringIO(), threading.Event()
    thread = threading.Thread(
        target=watch_logs, args=({"a": log}, stop), kwargs={"every_s": 0.01, "stream": out}
    )
    thread.start()
    stop.wait(0.2)
    stop.set()
    thread.join()
    assert out.getvalue() == "[a] train t: step 1/2 (50%) elapsed 1s left ~1s\n"


def test_demo_jobs_report_progress_and_completion(tmp_path, capsys):
    """The demo's parallel jobs: their progress lines are relayed while they run, and each says when it ends."""
    import sys

    from mechmem.report.demo import parallel

    code = "import time; print('train t: step 1/2 (50%) elapsed 0s', flush=True); time.sleep(0.5)"
    tasks = [([sys.executable, "-c", code], tmp_path / f"{i}.log") for i in range(2)]
    results = parallel(tasks, 2, ["a", "b"], every_s=0.1)
    assert [rc for rc, _ in results] == [0, 0]
    out = capsys.readouterr().out
    assert "[a] train t: step 1/2" in out and "[b] done in" in out
