"""Progress: lines at regular intervals when output is not a terminal;
the demo's log watcher picks them up."""

import io
import os

from mechmem.progress import LogRelay, Progress, format_seconds, last_progress_line


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


def test_log_relay_prints_each_moved_job_once_per_interval(tmp_path):
    """A job's newest log is read; a line is printed once,
    again only when it moves, never between intervals."""
    train, report = tmp_path / "train.log", tmp_path / "report.log"
    train.write_text("train t: step 1/2 (50%) elapsed 1s left ~1s\n")
    clock = FakeClock()
    out = io.StringIO()
    relay = LogRelay(every_s=10, stream=out, clock=clock)
    relay.poll({"a": [train, report]})
    assert out.getvalue() == ""  # the first interval has not passed
    clock.t = 10
    relay.poll({"a": [train, report]})
    clock.t = 20
    relay.poll({"a": [train, report]})  # unchanged: not repeated
    report.write_text("report: step 3/9 (33%) elapsed 2s\n")
    os.utime(report, (train.stat().st_mtime + 1,) * 2)
    clock.t = 25
    relay.poll({"a": [train, report]})  # moved, but within the interval
    clock.t = 30
    relay.poll({"a": [train, report]})
    assert out.getvalue().splitlines() == [
        "[a] train t: step 1/2 (50%) elapsed 1s left ~1s",
        "[a] report: step 3/9 (33%) elapsed 2s",
    ]


def test_demo_jobs_report_progress_and_completion(tmp_path, capsys, monkeypatch):
    """The demo's forked jobs: their progress lines are relayed while they run, each says when it ends,
    results come back in order, and a job that raises is reported failed without stopping the others."""
    import multiprocessing

    from mechmem.report import demo
    from mechmem.report.demo import run_jobs

    # Each job runs until the relay has read its progress line (an event the forked child inherits), not for
    # a fixed time.
    relayed = {f"j{i}": multiprocessing.get_context("fork").Event() for i in range(3)}

    class Relay(demo.LogRelay):
        def poll(self, logs):
            super().poll(logs)
            for name in logs:
                if name in self.shown:
                    relayed[name].set()

    monkeypatch.setattr(demo, "LogRelay", Relay)

    def job(i):
        def fn():
            (tmp_path / f"{i}.log").write_text("train t: step 1/2 (50%) elapsed 0s\n")
            relayed[f"j{i}"].wait(timeout=60)
            if i == 2:
                raise RuntimeError("boom")
            return {"i": i, "pid": os.getpid()}

        return (f"j{i}", fn, [tmp_path / f"{i}.log"])

    results = run_jobs([job(i) for i in range(3)], 2, every_s=0.1)
    assert [r.get("i") for r in results] == [0, 1, None] and results[2] == {"failed": 1}
    assert all(r["pid"] != os.getpid() for r in results[:2])  # ran in forked children
    out = capsys.readouterr().out
    assert "[j0] train t: step 1/2" in out and "[j1] done in" in out and "[j2] failed in" in out
