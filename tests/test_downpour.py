"""Downpour training end to end: real Spark (local), real Redis, real parameter-server processes."""

from __future__ import annotations

import json

import pytest

from conftest import (
    assert_best_is_the_best_evaluation,
    assert_events_match_metrics,
    left_running,
    run_ddq,
    summary_of,
)

pytestmark = pytest.mark.slow  # each test starts a JVM

# what a distributed run's event files plot, at least (the driver writes them, from the workers' telemetry)
TAGS = {"train/episode_return", "eval/mean_return", "train/loss", "train/epsilon", "speed/env_steps_per_s",
        "speed/updates_per_s"}
SHORT = ["--mode", "downpour", "--workers", "2", "--env", "CartPole-v1", "--no-progress", "--eval-every", "2000",
         "--eval-episodes", "3"]


def test_two_workers_train_pqn_through_the_parameter_server(tmp_path):
    """PQN's Baristas push each minibatch of their rollouts to the shards, as DQN's push replayed ones (DQN's
    downpour runs are test_across_hosts.py's and test_failures.py's)."""
    run_dir = tmp_path / "run"  # given relative to the working folder, as people do
    budget = 20_000  # a few seconds of two PQN workers: long enough that neither's start decides where it ends
    result = run_ddq("train", *SHORT, "--algo", "pqn", "--total-steps", str(budget), "--run-dir", "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # a quiet console: ddq's own lines only; the JVM's start-up warnings and Spark's log go to spark.log
    assert [line for line in result.stderr.splitlines() if not line.startswith("ddq: ")] == []
    assert "WARN" in (run_dir / "spark.log").read_text()
    summary = summary_of(run_dir)
    assert summary["mode"] == "downpour" and summary["config"]["agent"]["algo"] == "pqn"
    # the budget spent, and not much more: each worker reports every few steps near the end instead of playing on
    # for a report interval (which had played 21,983-22,853 env steps; 20,194-20,833 since, 2026-11-29, and
    # 21,825 in a loaded fresh-clone suite, where a worker starved of its core sees the other's rate low)
    assert budget <= summary["env_steps"] <= budget * 1.10, summary["workers"]
    workers = sorted(summary["workers"], key=lambda w: w["worker"])
    assert [(w["worker"], w["state"], w["attempt"]) for w in workers] == [(0, "finished", 0), (1, "finished", 0)]
    # every gradient pushed was applied: the server's version is the sum of the workers' pushes
    assert summary["updates"] == sum(w["pushes"] for w in workers) > 0
    # the shard's exact account agrees: each worker's pushes sent, every one applied, none refused or lost
    assert [(row["worker"], row["sent"], row["applied"], row["repeats"], row["lost"])
            for row in summary["account"]["workers"]] == [(w["worker"], w["pushes"], w["pushes"], 0, 0) for w in workers]
    episodes = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {e["worker"] for e in episodes if e["kind"] == "episode"} == {0, 1}
    assert any(e["kind"] == "eval" for e in episodes)
    # a training point up to the last log_every mark the workers passed: most short runs pass it after the
    # driver's last look, and the driver logs it as the run ends
    every, trained = summary["config"]["run"]["log_every"], [e for e in episodes if e["kind"] == "train"]
    assert trained and trained[-1]["env_steps"] // every == summary["env_steps"] // every, (trained[-1], summary)
    assert_events_match_metrics(run_dir, TAGS | {"train/staleness"})
    assert_best_is_the_best_evaluation(run_dir)
    assert summary["best_checkpoint"] == "run/best.pt"
    assert (run_dir / "param-server-shard0.pt").exists() and (run_dir / "learning_curve.png").exists()
    evaluated = run_ddq("evaluate", str(run_dir), "--episodes", "2")
    assert summary["checkpoint"] == "run/checkpoint.pt"
    assert evaluated.returncode == 0, evaluated.stderr
    # the background-evaluation worker did no harm (it starts with the job: a run this short can end before it
    # has; test_failures.py and test_secure_redis.py wait for its evaluations)
    assert "Traceback" not in (run_dir / "celery.log").read_text() and "Celery worker exited early" not in result.stderr
    assert left_running(run_dir.resolve(), result.stderr) == []  # shards, Celery, Redis and Spark's JVM are gone


@pytest.mark.parametrize("mode", ["downpour", "data-parallel"])
def test_the_workers_stop_near_an_episode_budget(tmp_path, mode):
    """The workers hold themselves to --total-episodes, as to --total-steps: they had played on until the driver
    read their episodes and stopped the run (a downpour run of 200 CartPole episodes ended 511-941). Downpour's
    report more often near it; data-parallel's count every worker's at each vote, 16 vector steps apart."""
    run_dir = tmp_path / "run"
    flags = [mode if flag == "downpour" else flag for flag in SHORT]
    result = run_ddq("train", *flags, "--no-celery", "--no-dashboard", "--total-episodes", "200", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    summary = summary_of(run_dir)
    assert summary["stop_reason"] == "episode budget spent" and summary["mode"] == mode
    # CartPole's episodes last 8 steps or more: 16 votes' vector steps of 2 x 4 envs end 16 of them at most
    assert 200 <= summary["episodes"] <= (216 if mode == "data-parallel" else 300), summary["workers"]


def test_bench_throughput_measures_each_worker_count():
    result = run_ddq("bench", "throughput", "--workers", "1", "2", "--steps-per-worker", "150", "--latency-ms", "5")
    assert result.returncode == 0, result.stderr
    rows = [line.split("|") for line in result.stdout.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert [row[1].strip() for row in rows] == ["1", "2"]
    steps = [float(row[2].replace(",", "")) for row in rows]
    assert rows[0][5].strip() == "1.00x" and steps[1] > steps[0] > 0  # two slow workers play more than one
