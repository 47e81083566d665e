"""Actor-learner training end to end: real Spark tasks as actors, a real learner process, real Redis.

Actors only play and send experience; one learner trains at the replay ratio and publishes weights.
The tests check that the learner keeps the replay ratio whatever the actors do, that --sync rounds meet
(a Spark barrier stage's process group), and Ctrl-C and --resume. What the mode survives (a killed Redis, learner and actor)
is test_failures.py's, beside downpour; that it learns (CartPole's 475 within a number of env steps)
is test_across_hosts.py's, beside downpour.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from conftest import (
    assert_best_is_the_best_evaluation,
    assert_events_match_metrics,
    left_running,
    run_ddq,
    summary_of,
)
from ddq.transport.keys import RunKeys
from ddq.transport.redis_server import EmbeddedRedis
from test_dashboard_browser import _serve_dashboard, _stop
from test_downpour import TAGS
from test_failures import finish, wait_for_progress

pytestmark = pytest.mark.slow  # each test starts a JVM

RUN = ["--mode", "actor-learner", "--workers", "2", "--env", "CartPole-v1", "--no-progress", "--eval-every", "4000",
       "--eval-episodes", "3", "--no-dashboard", "--no-celery"]


@pytest.fixture
def start():
    """Starts `ddq train` of RUN into a run folder; whatever the test's outcome, stops what it started."""
    started: list[subprocess.Popen] = []

    def start_training(run_dir: Path, *flags: str) -> tuple[subprocess.Popen, Path]:
        log = run_dir.parent / "train.log"
        process = subprocess.Popen([sys.executable, "-m", "ddq", "train", *RUN, *flags, "--run-dir", str(run_dir)],
                                   stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"))
        started.append(process)
        return process, log

    yield start_training
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def assert_the_replay_ratio_held(summary: dict, since_steps: int = 0) -> None:
    """Updates are replay_ratio (1.0 for CartPole) per env step received after learning_starts (1000),
    give or take one training round (16 steps) per actor and the steps of a message a kill lost."""
    trained_steps = summary["env_steps"] - since_steps - 1000
    assert 0.9 * trained_steps <= summary["updates"] - summary.get("updates_before", 0) <= trained_steps + 200


def test_ctrl_c_then_resume_with_prioritized_replay_and_the_ratio_holds(tmp_path, start):
    run_dir = tmp_path / "run"
    process, log = start(run_dir, "--total-steps", "40000", "--prioritized")
    wait_for_progress(run_dir, process, log, 3_000)
    process.send_signal(signal.SIGINT)
    code, _ = finish(process, log, timeout=60)
    assert code == 130, log.read_text()[-3000:]
    stopped = summary_of(run_dir)
    assert stopped["mode"] == "actor-learner" and stopped["stop_reason"] == "stopped by the user"
    assert 3_000 < stopped["env_steps"] < 40_000 and (run_dir / "learner.pt").exists()
    assert_the_replay_ratio_held(stopped)
    assert [line for line in log.read_text().splitlines() if not line.startswith("ddq: ")] == []
    assert "learner stopped at version" in (run_dir / "learner.log").read_text()
    assert left_running(run_dir, log.read_text()) == []
    assert_events_match_metrics(run_dir, TAGS | {"train/policy_lag"})  # Ctrl-C lost no event

    resumed = run_ddq("train", "--resume", str(run_dir), "--total-steps", str(stopped["env_steps"] + 2500))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = summary_of(run_dir)
    assert after["env_steps"] >= stopped["env_steps"] + 2500 and after["updates"] > stopped["updates"]
    assert "resumed from its snapshot" in (run_dir / "learner.log").read_text()
    # the replay memory refilled from the actors: learning_starts again, then the ratio
    assert_the_replay_ratio_held({**after, "updates_before": stopped["updates"]}, since_steps=stopped["env_steps"])
    episodes = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {e["worker"] for e in episodes if e["kind"] == "episode"} == {0, 1}
    # max-Q is the learner's (the actors train nothing), measured as it trains: on every point but each
    # session's closing one, which may come once its learner has stopped
    trained = [e["mean_max_q"] for e in episodes if e["kind"] == "train" and e["updates"]]
    assert len(trained) >= 3 and sum(isinstance(q, float) for q in trained) >= len(trained) - 2, trained
    assert left_running(run_dir, resumed.stderr) == []
    assert_events_match_metrics(run_dir, TAGS | {"train/policy_lag"})
    assert_best_is_the_best_evaluation(run_dir)


def test_sync_rounds_meet_at_a_spark_barrier_and_start_with_the_same_weights(tmp_path):
    """With Celery and the dashboard on: the finished run's dashboard shows the learner's numbers."""
    run_dir = tmp_path / "run"
    services = [flag for flag in RUN if flag not in ("--no-dashboard", "--no-celery")]
    with EmbeddedRedis() as server:
        result = run_ddq("train", *services, "--sync", "--sync-every", "2", "--total-episodes", "100", "--redis-url",
                         server.url, "--run-dir", str(run_dir))
        assert result.returncode == 0, result.stderr[-3000:]
        client = redis.Redis.from_url(server.url)
        keys = RunKeys(next(client.scan_iter("ddq:*:workers")).decode().split(":")[1])
        rounds_done = int(client.get(keys.round_done)) + 1
    summary = summary_of(run_dir)
    # the driver counts every actor's episodes and stops the run at the episode budget, as Grandio's study did
    assert summary["stop_reason"] == "episode budget spent" and summary["episodes"] >= 100
    assert summary["env_steps"] >= 1500 and rounds_done >= 3
    # every actor played every round, each with the same weights as every other actor; the driver's stop (the
    # episode budget) can end the run while the learner trains on the round the actors last sent, and after
    # some actors have begun the next with the new weights
    rounds = {w["rounds"] for w in summary["workers"]}
    assert len(rounds) == 1 and rounds_done <= rounds.pop() <= rounds_done + 1
    played = [dict(map(tuple, w["round_weights"])) for w in summary["workers"]]
    common = set.intersection(*(set(rounds_played) for rounds_played in played))
    assert common and max(common) >= rounds_done - 1
    assert all(len({rounds_played[number] for rounds_played in played}) == 1 for number in common)
    assert_the_replay_ratio_held(summary)
    assert "Traceback" not in (run_dir / "celery.log").read_text()
    dashboard, url = _serve_dashboard([str(run_dir)], tmp_path)
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/server", timeout=30) as answer:
            learner = json.loads(answer.read())["learner"]
    finally:
        _stop(dashboard)
    assert learner["replay_size"] > 0 and learner["publications"] >= rounds_done
    assert 0.5 < learner["updates_per_env_step"] <= 1.0  # the replay ratio, less learning_starts
    assert left_running(run_dir, result.stderr) == []


def wait_for_file(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, f"no {path.name} was written"
        time.sleep(0.1)
