"""`ddq bench snake`: the ablation's rows, its refusals and its table from known results; one tiny real run."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_ddq
from ddq.benchmarks.procfs import processes_mentioning
from ddq.benchmarks.snake import ROWS, Trial, run_ablation, table

REPOSITORY = Path(__file__).resolve().parents[1]


def _trial(row: int, seed: int, apples: float | None, minutes: float) -> Trial:
    return Trial(row, seed, Path("unused"), apples=apples, wall_time_s=minutes * 60, board=10)


def test_every_row_but_the_first_changes_make_runs_settings():
    assert ROWS[0].flags == () and all(row.flags for row in ROWS[1:])
    assert len({row.flags for row in ROWS}) == len(ROWS)


def _agent_of(config_file: Path, flags: tuple[str, ...]) -> dict:
    from dataclasses import asdict

    from ddq.cli import build_parser
    from ddq.core.settings import build_config

    args = build_parser().parse_args(["train", "--config", str(config_file), *flags])
    values = {k: v for k, v in vars(args).items()  # as `ddq train` passes them on
              if k not in ("func", "config", "resume", "command", "started_at", "solver", "debug", "help_all")}
    agent = asdict(build_config(values, str(config_file)).agent)
    return {k: v for k, v in agent.items() if k not in ("q_lambda", "rollout_steps", "epochs", "minibatches")}


def test_the_dqn_row_is_make_runs_dqn_settings_before_pqn():
    [flags] = [row.flags for row in ROWS if "dqn" in row.flags]  # the one row of another algorithm
    dqn_row = _agent_of(REPOSITORY / "configs/smart-snake.toml", flags)
    assert dqn_row["algo"] == "dqn"
    assert dqn_row == _agent_of(REPOSITORY / "configs/snake-dqn.toml", ())


def test_the_table_gives_each_seed_the_median_and_the_change_from_the_first_row():
    trials = [_trial(0, 0, 20.0, 10.0), _trial(0, 1, 16.5, 12.0), _trial(0, 2, 18.0, 11.0),
              _trial(1, 0, 4.0, 9.0), _trial(1, 1, 3.5, 9.0), _trial(1, 2, 5.25, 9.5)]
    lines = table(trials, 150_000).splitlines()
    assert "after 150,000 env steps" in lines[0]
    assert lines[2] == "| change | seed 0 | seed 1 | seed 2 | median | vs first row | minutes per run |"
    assert lines[4] == "| make run's settings | 20.00 | 16.50 | 18.00 | **18.00** | — | 11.0 |"
    assert lines[5] == "| without board symmetries | 4.00 | 3.50 | 5.25 | **4.00** | -14.00 | 9.0 |"
    assert "Snake 10x10, serial mode" in lines[0]
    trials[4].apples = None  # a run that failed: its row has no median
    assert table(trials, 150_000).splitlines()[5] == "| without board symmetries | 4.00 | failed | 5.25 | — | — | — |"


def test_unknown_rows_and_missing_config_files_are_refused_before_any_run(tmp_path):
    with pytest.raises(ValueError, match="rows are 0 to"):
        run_ablation([len(ROWS)], [0], 1000, str(REPOSITORY / "configs/smart-snake.toml"))

    config = str(REPOSITORY / "configs/smart-snake.toml")
    with pytest.raises(ValueError, match="no such file"):
        run_ablation([0], [0], 1000, str(tmp_path / "missing.toml"))
    with pytest.raises(ValueError, match="--seeds 0 0: each may appear once"):
        run_ablation([0], [0, 0], 1000, config)
    with pytest.raises(ValueError, match="--jobs -1: must be positive"):
        run_ablation([0], [0], 1000, config, jobs=-1)


def test_a_tiny_ablation_runs_its_rows_side_by_side_and_leaves_nothing_running():
    result = run_ddq("bench", "snake", "--rows", "0", "1", "--seeds", "3", "--total-steps", "600",
                     "--config", str(REPOSITORY / "configs/smart-snake.toml"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "after 600 env steps" in lines[0]
    assert lines[4].startswith("| make run's settings | ") and lines[5].startswith("| without board symmetries | ")
    assert "make run's settings, seed 3:" in result.stderr
    assert processes_mentioning("ddq-bench-snake-") == []  # its runs' folders are named so
