"""`ddq bench peers` (its table and ratio from known results, its one line without Stable-Baselines3) and `ddq bench train --set`."""

import os
import subprocess
import sys

from ddq.benchmarks.peers import table


def test_table_shows_each_seed_and_the_ratio_of_median_times():
    pairs = [({"seed": 0, "steps_to_target": 9002, "time_to_target_s": 12.0},
              {"seed": 0, "steps_to_target": 5000, "time_to_target_s": 15.0}),
             ({"seed": 1, "steps_to_target": 13001, "time_to_target_s": 20.0},
              {"seed": 1, "steps_to_target": 36000, "time_to_target_s": 80.0}),
             ({"seed": 2, "steps_to_target": 15000, "time_to_target_s": 16.0},
              {"seed": 2, "steps_to_target": None, "time_to_target_s": None})]
    text = table(pairs)
    assert "| 0 | 9,002 | 12.0 | 5,000 | 15.0 |" in text
    assert "| 2 | 15,000 | 16.0 | not reached | not reached |" in text
    # A seed that never reached the target has no time: Stable-Baselines3's median is then unknown.
    assert "| **median** | 13,001 | 16.0 | not reached | not reached |" in text and text.endswith(": —")
    pairs[2][1].update(steps_to_target=28000, time_to_target_s=64.0)
    assert table(pairs).endswith("ddq's median time / Stable-Baselines3's: 0.25")  # 16 / 64


def test_without_stable_baselines3_the_bench_says_how_to_get_it(tmp_path):
    (tmp_path / "stable_baselines3.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "ddq", "bench", "peers", "--seeds", "0"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "ddq: error: ddq bench peers needs Stable-Baselines3: pip install 'ddq[peers]' (or stable-baselines3)"]


def test_bench_train_set_reads_values_as_a_config_file_would():
    import argparse

    import pytest

    from ddq.benchmarks.commands import parse_setting

    assert parse_setting("n_step=3") == ("n_step", 3)
    assert parse_setting("dueling = true") == ("dueling", True)
    assert parse_setting("hidden=[64, 64]") == ("hidden", [64, 64])
    assert parse_setting("lr=2.5e-4") == ("lr", 2.5e-4)
    assert parse_setting("model=small-conv") == ("model", "small-conv")
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        parse_setting("dueling")
