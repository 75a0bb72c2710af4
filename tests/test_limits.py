"""Limits the command line enforces: every number flag in a stated range, memory budgets the patching sweeps
keep (their peak follows the budget), weights whose forward pass overflows refused, a progress line within
every long report step, output in any locale, --hf names that are no local folder refused at once, torch's
thread count chosen from the free CPUs. The flags' one-line errors through the scripts are in
test_bad_inputs.py."""

import os
import re
import subprocess
import sys
import time
import weakref

import pytest
import torch
from helpers import ROOT, load_script
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from mechmem.analysis.patching import run_sweeps
from mechmem.analysis.planted import planted_induction_model
from mechmem.cli import run_script
from mechmem.errors import MechmemError
from mechmem.models.checks import check_finite_weights
from mechmem.models.transformer import build_transformer
from mechmem.models.transformer_config import TransformerConfig
from mechmem.report import ReportCost
from mechmem.tasks.generic import RepeatsConfig, RepeatsTask
from mechmem.threads import THREADS_ENV, choose_threads, default_threads, use_threads


def test_no_command_line_flag_takes_an_unchecked_number():
    """Every numeric flag has a range-checked type from mechmem.cli.args (never the bare int or float)."""
    for path in sorted((ROOT / "src/mechmem/cli").glob("*.py")):
        bare = re.findall(r"type=(?:int|float)\b", path.read_text(encoding="utf-8"))
        assert not bare, f"{path.name}: {bare}"


class LiveBytes(TorchDispatchMode):
    """The peak of the bytes held by the CPU tensors torch creates inside the block (a tensor's storage counts
    from the first op that returns it until the last tensor object on it is gone)."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.now = self.peak = 0

    def _drop(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            self.now -= self.size.pop(key)
            del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                key = t.untyped_storage().data_ptr()
                if key not in self.refs:
                    self.refs[key], self.size[key] = 0, t.untyped_storage().nbytes()
                    self.now += self.size[key]
                    self.peak = max(self.peak, self.now)
                self.refs[key] += 1
                weakref.finalize(t, self._drop, key)
        return out


def test_patching_peak_memory_follows_the_budget():
    """A random 2 x 64 model, 32 pairs: at 2 MB the sweep's peak stays within twice the budget, at 64 MB it is
    the unchunked peak (the whole cached run, several times more); the values are the same."""
    cfg = TransformerConfig(
        n_layers=2,
        d_model=64,
        n_heads=4,
        d_vocab=64,
        n_ctx=32,
        d_mlp=256,
        act_fn="gelu",
        normalization_type="LN",
    )
    model = build_transformer(cfg, generator=torch.Generator().manual_seed(0)).eval()
    pair = RepeatsTask(RepeatsConfig.for_model(model)).patching_pair(
        32, generator=torch.Generator().manual_seed(0)
    )
    peaks, values = {}, {}
    for budget in (2.0, 64.0):
        with torch.no_grad(), LiveBytes() as live:
            found = run_sweeps(model, pair, ["attn_head_out_all_pos"], memory_mb=budget)
        peaks[budget], values[budget] = live.peak / 2**20, found["attn_head_out_all_pos"].values
    print("peak MB by budget:", {k: round(v, 2) for k, v in peaks.items()})
    assert peaks[2.0] < 2 * 2.0 and peaks[64.0] > 3 * peaks[2.0]
    torch.testing.assert_close(values[2.0], values[64.0], atol=1e-5, rtol=1e-5)


def test_weights_whose_forward_pass_overflows_are_refused_like_nan():
    model = planted_induction_model()
    with torch.no_grad():
        model.embed.W_E.mul_(1e3)  # large, but every activation stays far below the bound: analysed
    check_finite_weights(model)
    with torch.no_grad():
        model.embed.W_E.mul_(1e35)  # finite weights (1e38 at most), activations beyond sqrt(float32 max)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    with pytest.raises(MechmemError, match=r"forward pass overflows \((hook_embed|embed\.hook_out) "):
        check_finite_weights(model, what="ckpt.pt")
    check_finite_weights(model, allow=True)


def test_a_long_report_step_prints_progress_while_it_runs(monkeypatch, capsys):
    from mechmem import report

    monkeypatch.setattr(report, "STEP_BEAT_S", 0.05)
    with ReportCost(1, planted_induction_model(), progress=True, every_s=1e9) as cost:
        cost.run("slow_section", lambda: time.sleep(0.3))
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("report: slow: elapsed") for line in lines), lines


def test_output_survives_an_ascii_locale(tmp_path):
    """Under LC_ALL=C without UTF-8 mode stdout is ASCII: a title it cannot encode is escaped, not a crash."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8")}
    env |= {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONPATH": str(ROOT / "src")}
    code = (
        "from mechmem.cli import run_script; raise SystemExit(run_script(lambda a: print('\\u03a9 report')))"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"\\u03a9 report"


def test_hf_name_that_is_no_local_folder_is_refused_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))  # nothing cached: the name alone
    start = time.perf_counter()
    status = run_script(load_script("detect_heads").main, ["--hf", "no-such-org/no-such-model"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and time.perf_counter() - start < 10
    assert err.startswith("error: --hf no-such-org/no-such-model: no such folder") and "\n" not in err


def test_thread_count_follows_the_free_cpus_and_the_overrides(monkeypatch):
    assert [default_threads(cpus=2, load=x) for x in (0.0, 0.6, 1.4, 7.0)] == [2, 1, 1, 1]
    assert default_threads(cpus=16, load=3.6) == 12
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(THREADS_ENV, "3")
    assert choose_threads() == 3 and choose_threads(flag=1) == 1
    for bad in ("0", "many", str(10**6)):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(MechmemError, match=THREADS_ENV):
            choose_threads()
    monkeypatch.delenv(THREADS_ENV)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert choose_threads() is None  # torch read OMP_NUM_THREADS itself
    before = torch.get_num_threads()
    try:
        assert use_threads(1) == 1
    finally:
        torch.set_num_threads(before)


def test_train_save_every_zero_is_a_usage_error(tmp_path, capsys):
    argv = ["permutation", "--preset", "task1-quick", "--save-every", "0", "--out", str(tmp_path / "run")]
    assert run_script(load_script("train").main, argv) == 2
    err = capsys.readouterr().err.strip()
    assert "argument --save-every: 0 must be at least 1" in err and "\n" not in err
    assert not (tmp_path / "run").exists()
