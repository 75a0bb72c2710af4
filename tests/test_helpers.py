"""The test helpers themselves: the tolerant record comparison fails where it should, the script loader finds
scripts from the repository root whatever the working directory."""

import math

import numpy as np
import pytest
from helpers import ROOT, assert_records_close, load_script


def test_records_close_allows_last_digit_noise_only_in_floats():
    # The case that broke on another machine: np.polyfit's power_b differing in the last digit.
    record = {"fit": {"power_b": 2.6888906657695544, "n": 3}, "name": "2emb", "xs": [1.0, math.nan]}
    assert_records_close(
        {"fit": {"power_b": 2.688890665769554, "n": 3}, "name": "2emb", "xs": [1.0, math.nan]},
        record,
        rel=1e-9,
    )
    with pytest.raises(AssertionError, match=r"record\['fit'\]\['power_b'\]"):
        assert_records_close({**record, "fit": {"power_b": 2.69, "n": 3}}, record, rel=1e-9)


@pytest.mark.parametrize(
    "changed",
    [
        {"fit": {"power_b": 2.6888906657695544, "n": 4}},  # an int differs: exact
        {"fit": {"power_b": 2.6888906657695544}},  # a key is missing
        {"fit": {"power_b": "2.6888906657695544", "n": 3}},  # a string is no float
    ],
    ids=["int", "key", "type"],
)
def test_records_close_is_exact_for_everything_but_floats(changed):
    record = {"fit": {"power_b": 2.6888906657695544, "n": 3}}
    with pytest.raises(AssertionError):
        assert_records_close(changed, record, rel=1e-9)


def test_records_close_on_a_real_polyfit_with_reordered_data():
    """Two mathematically equal fits (the points in another order) agree to the stated tolerance."""
    x = np.log(np.array([16.0, 32.0, 64.0, 128.0]))
    y = 2.7 * x + np.sin(x)
    a = np.polyfit(x, y, 1).tolist()
    b = np.polyfit(x[::-1], y[::-1], 1).tolist()
    assert_records_close(a, b, rel=1e-9)


def test_load_script_is_independent_of_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert callable(load_script("report").main)
    assert load_script("analyses/train.py").__file__ == str(ROOT / "analyses" / "train.py")
