"""`ddq bench peers` (its table, medians and ratios from known results, its one line for a missing peer, CleanRL's infos) and `ddq bench train --set`."""

import math
import os
import subprocess
import sys

import pytest

from ddq.benchmarks.peers import table


def _result(seed, steps, seconds):
    return {"seed": seed, "steps_to_target": steps, "time_to_target_s": seconds}


def test_table_shows_each_seed_the_medians_their_quartiles_and_the_ratios():
    results = {"ddq": [_result(0, 9002, 2.0), _result(1, 13001, 4.0), _result(2, 15000, 3.0)],
               "sb3": [_result(0, 5000, 15.0), _result(1, 36000, 80.0), _result(2, None, None)],
               "cleanrl": [_result(0, 90000, 60.0), _result(1, 120000, 70.0), _result(2, 100000, 65.0)]}
    text = table("CartPole-v1", results)
    assert "| 0 | 9,002 | 2.0 | 5,000 | 15.0 | 90,000 | 60.0 |" in text
    assert "| 2 | 15,000 | 3.0 | not reached | not reached | 100,000 | 65.0 |" in text
    # A seed that never reached the target counts as the slowest: SB3's median is its middle seed.
    assert "| **median** | 13,001 | 3.0 | 36,000 | 80.0 | 100,000 | 65.0 |" in text
    assert ("| quartiles | 11,002-14,000 | 2.5-3.5 | 20,500-not reached | 47.5-not reached | 95,000-110,000 | 62.5-67.5 |"
            in text)
    assert text.endswith("ddq's median time / Stable-Baselines3's: 0.04\nddq's median time / CleanRL's: 0.05")
    results["sb3"][1].update(steps_to_target=None, time_to_target_s=None)
    assert "ddq's median time / Stable-Baselines3's: —" in table("CartPole-v1", results)


def test_quartiles_count_a_run_that_never_reached_the_target_as_the_slowest():
    from ddq.benchmarks.peers import _median_and_quartiles

    assert _median_and_quartiles([1.0, 2.0, 3.0, 4.0, None]) == (3.0, "2.0-4.0")
    assert _median_and_quartiles([1.0, 2.0, None, None, None]) == (math.inf, "2.0-not reached")
    assert _median_and_quartiles([4.0, 1.0, 3.0, 2.0]) == (2.5, "1.8-3.2")  # 1.75 and 3.25
    assert _median_and_quartiles([None]) == (math.inf, "—")


def test_without_stable_baselines3_the_bench_says_how_to_get_it(tmp_path):
    (tmp_path / "stable_baselines3.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "ddq", "bench", "peers", "--seeds", "0"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "ddq: error: ddq bench peers needs Stable-Baselines3: pip install 'ddq[peers]' (or stable-baselines3)"]


def test_without_a_cleanrl_checkout_the_bench_says_where_to_get_one(tmp_path):
    result = subprocess.run([sys.executable, "-m", "ddq", "bench", "peers", "--seeds", "0", "--peers", "ddq", "cleanrl",
                             "--cleanrl", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"ddq: error: --cleanrl {tmp_path}: no cleanrl/dqn.py there;") and "--peers ddq sb3" in line


def test_cleanrl_reads_a_vector_info_as_gymnasium_029_gave_it():
    import numpy as np

    from ddq.benchmarks.peer_runs import _as_gymnasium_029_infos

    final = np.array([None, np.array([0.1, 0.2])], dtype=object)
    infos = {"final_obs": final, "_final_obs": np.array([False, True]),
             "final_info": {"episode": {"r": np.array([0.0, 31.0]), "l": np.array([0, 31])},
                            "_episode": np.array([False, True])},
             "_final_info": np.array([False, True])}
    old = _as_gymnasium_029_infos(infos, 2)
    assert old["final_observation"] is final
    assert old["final_info"][0] is None and old["final_info"][1] == {"episode": {"r": 31.0, "l": 31}}


def test_bench_train_set_reads_values_as_a_config_file_would():
    import argparse

    from ddq.benchmarks.commands import parse_setting

    assert parse_setting("n_step=3") == ("n_step", 3)
    assert parse_setting("dueling = true") == ("dueling", True)
    assert parse_setting("hidden=[64, 64]") == ("hidden", [64, 64])
    assert parse_setting("lr=2.5e-4") == ("lr", 2.5e-4)
    assert parse_setting("model=small-conv") == ("model", "small-conv")
    with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
        parse_setting("dueling")


def test_bench_train_runs_its_serial_default_and_tables_each_seed(capsys, tmp_path, monkeypatch):
    """The command as typed, to its table: one row per seed, its budget spent."""
    from ddq.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["bench", "train", "--env", "CartPole-v1", "--seeds", "0", "--total-steps", "600"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 0 |")]
    assert len(rows) == 1, rows
    env_steps = int(rows[0].split("|")[4].replace(",", ""))
    assert 600 <= env_steps < 700, rows  # the budget, and the few more of its last vector step


def test_every_benchs_median_counts_a_miss_as_the_slowest_run():
    """One rule for every bench's table (`ddq.benchmarks.stats`): the serial bench had printed "not all
    reached", MinAtar's and Grandio's "—", for a median that a miss among five runs does not decide."""
    from ddq.benchmarks.serial import _median as serial_cell
    from ddq.benchmarks.stats import median

    assert median([3.0, None, 1.0]) == 3.0 and median([None, None, 1.0]) is None and median([]) is None
    assert median([2.0, None, 5.0], worst=-math.inf) == 2.0  # a score: a miss is the lowest
    assert serial_cell([1.0, None, 2.0]) == "2.0" and serial_cell([None, None, 7]) == "—"
    assert serial_cell([1_000, 3_000, None]) == "3,000"
