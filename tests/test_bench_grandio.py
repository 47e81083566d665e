"""`ddq bench grandio`: its configurations and both of its tables (Grandio's figures beside each row) from known
results, and one tiny real run of the study's shape."""

import pytest

from conftest import run_ddq
from ddq.benchmarks.grandio import configurations, table


def _summary(time_s: float | None, steps: int | None) -> dict:
    return {"reached_target": time_s is not None, "time_to_target_s": time_s, "steps_to_target": steps, "seed": 5}


def test_the_target_table_puts_each_configuration_beside_serial_and_beside_grandios_figure():
    runs = configurations([1, 4], sync=True)
    assert runs[0].settings == {"mode": "serial", "algo": "dqn"}  # the modes compared on one algorithm
    assert [c.label for c in runs] == ["serial", "actor-learner, 1 actor", "actor-learner, 4 actors",
                                       "actor-learner --sync, 4 actors"]  # no collective round of one actor
    assert runs[3].settings == {"mode": "actor-learner", "workers": 4, "sync": True}
    times = [(300.0, 75_000), (150.0, 70_000), (100.0, 80_000), (None, None)]
    text = table("LunarLander-v3", 200, 2, [(c, [_summary(*t)]) for c, t in zip(runs, times)])
    lines = text.splitlines()
    assert "| serial | 1 of 1 | 300.0 | 75,000 | 1.00x | 1.00x (standard) |" in lines
    assert "| actor-learner, 1 actor | 1 of 1 | 150.0 | 70,000 | 2.00x | 1.35x (2 processes) |" in lines
    assert "| actor-learner, 4 actors | 1 of 1 | 100.0 | 80,000 | 3.00x | — |" in lines  # Grandio's async never ran
    assert "| actor-learner --sync, 4 actors | 0 of 1 | — | — | — | 3.32x (MP(4)) |" in lines
    assert "2 ms per env step" in lines[0]
    assert "- seed 5, actor-learner, 1 actor: 150.0 s and 70,000 env steps to 200" in lines  # each run, under it
    assert "- seed 5, actor-learner --sync, 4 actors: did not reach 200" in lines
    # An env Grandio did not run has no figures.
    rows = table("Acrobot-v1", -100, 0, [(runs[0], [_summary(10.0, 1000)])]).splitlines()
    assert [row for row in rows if row.startswith("| serial")][0].endswith("| — |")


def _episodes_summary(time_s: float, steps: int, final: float) -> dict:
    return {"wall_time_s": time_s, "env_steps": steps, "final_eval_return": final,
            "config": {"total_episodes": 500}, "seed": 0}


def test_the_episodes_table_has_time_speedup_and_final_return_beside_grandios_time_and_speedup():
    runs = configurations([1, 5], sync=True)
    measured = [(120.0, 60_000, 500.0), (80.0, 61_000, 480.5), (60.0, 70_000, 20.0), (40.0, 65_000, 9.5)]
    lines = table("CartPole-v1", None, 0, [(c, [_episodes_summary(*m)]) for c, m in zip(runs, measured)]).splitlines()
    assert lines[0].startswith("CartPole-v1, 500 training episodes, 0 ms per env step")
    assert "| serial | 1 | 120.0 | 60,000 | 1.00x | 500.0 | 110.5 | 1.00x (standard) |" in lines
    assert "| actor-learner, 1 actor | 1 | 80.0 | 61,000 | 1.50x | 480.5 | 73.4 | 1.51x (2 processes) |" in lines
    assert "| actor-learner, 5 actors | 1 | 60.0 | 70,000 | 2.00x | 20.0 | — | — |" in lines
    assert "| actor-learner --sync, 5 actors | 1 | 40.0 | 65,000 | 3.00x | 9.5 | 77.5 | 1.43x (MP(5)) |" in lines
    assert "- seed 0, serial: 120.0 s, 60,000 env steps, final greedy return 500.0" in lines


def test_a_tiny_study_stops_each_run_at_its_episode_budget():
    """Serial alone (`--actors` with no counts): an actor-learner run's episode budget is test_actor_learner.py's
    --sync test, which would start Spark once more here."""
    result = run_ddq("bench", "actors", "--envs", "CartPole-v1", "--actors", "--episodes", "20")
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): line.split("|") for line in result.stdout.splitlines() if line.startswith("| ")}
    assert set(rows) == {"configuration", "serial"}
    time_s, steps, final = (float(rows["serial"][k].replace(",", "")) for k in (3, 4, 6))
    assert time_s > 0 and 20 * 8 <= steps < 20 * 500 and 1 <= final <= 500  # 20 episodes, each 8 to 500 steps


def test_a_run_the_user_stops_ends_the_study_with_the_table_of_the_runs_that_finished(monkeypatch, capsys):
    """Seed 0's serial run trains for real; seed 1's comes back as a Ctrl-C'd run does (exit 130). The study
    prints seed 0's table and ends with 130, where it had gone on to the next env."""
    import ddq.benchmarks.serial as serial
    from ddq.cli import main

    real, calls = serial.run_training, []

    def seed_1_stopped(config, run_dir, started_at):
        calls.append(config.agent.seed)
        if config.agent.seed == 1:
            return {"stop_reason": "stopped by the user"}, 130
        return real(config, run_dir, started_at)

    monkeypatch.setattr(serial, "run_training", seed_1_stopped)
    with pytest.raises(SystemExit) as ended:
        main(["bench", "grandio", "--envs", "CartPole-v1", "Acrobot-v1", "--actors", "--seeds", "0", "1",
              "--episodes", "5"])
    out, err = capsys.readouterr()
    assert ended.value.code == 130 and calls == [0, 1]  # no Acrobot run
    assert "| serial |" in out and "- seed 0, serial:" in out and "seed 1" not in out
    assert err.splitlines()[-1] == "ddq: the bench stops: its run of CartPole-v1 (seed 1) was stopped by the user"
