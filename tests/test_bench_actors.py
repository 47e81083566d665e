"""`ddq bench actors`: its configurations and its table (speedups, Grandio's figures) from known results."""

from ddq.benchmarks.actors import configurations, table


def _summary(time_s: float | None, steps: int | None) -> dict:
    return {"reached_target": time_s is not None, "time_to_target_s": time_s, "steps_to_target": steps}


def test_the_table_puts_each_configuration_beside_serial_and_beside_grandios_figure():
    runs = configurations([1, 4], sync=True)
    assert [c.label for c in runs] == ["serial", "actor-learner, 1 actor", "actor-learner, 4 actors",
                                       "actor-learner --sync, 1 actor", "actor-learner --sync, 4 actors"]
    assert runs[4].settings == {"mode": "actor-learner", "workers": 4, "sync": True}
    times = [(300.0, 75_000), (150.0, 70_000), (100.0, 80_000), (200.0, 60_000), (None, None)]
    text = table("LunarLander-v3", 200, 2, [(c, [_summary(*t)]) for c, t in zip(runs, times)])
    lines = text.splitlines()
    assert "| serial | 1 of 1 | 300.0 | 75,000 | 1.00x | 1.00x (standard) |" in lines
    assert "| actor-learner, 1 actor | 1 of 1 | 150.0 | 70,000 | 2.00x | 1.35x (2 processes) |" in lines
    assert "| actor-learner, 4 actors | 1 of 1 | 100.0 | 80,000 | 3.00x | — |" in lines  # Grandio's async never ran
    assert "| actor-learner --sync, 1 actor | 1 of 1 | 200.0 | 60,000 | 1.50x | — |" in lines  # no MP(1)
    assert "| actor-learner --sync, 4 actors | 0 of 1 | — | — | — | 3.32x (MP(4)) |" in lines
    assert "2 ms per env step" in lines[0]
    # An env Grandio did not run has no figures.
    assert table("Acrobot-v1", -100, 0, [(runs[0], [_summary(10.0, 1000)])]).splitlines()[-1].endswith("| — |")
