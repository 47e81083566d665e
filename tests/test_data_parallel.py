"""Data-parallel runs end to end (a real Spark barrier stage, torch.distributed's gloo, the run's Redis): it
learns, every worker applies every averaged update, and a hung worker restarts the stage from the newest
snapshot, with the loss in the summary (a killed worker and a crashed host: tests/test_across_hosts.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (
    assert_best_is_the_best_evaluation,
    assert_events_match_metrics,
    left_running,
    run_ddq,
    summary_of,
)
from ddq.config import config_of
from test_downpour import TAGS
from test_failures import finish, private_redis, wait_for, wait_for_progress

pytestmark = pytest.mark.slow  # each test starts a JVM

RUN = ["train", "--mode", "data-parallel", "--workers", "2", "--env", "CartPole-v1", "--no-progress",
       "--no-dashboard", "--no-celery"]


def test_two_workers_learn_cartpole_as_one_and_apply_every_update(tmp_path):
    """PQN (CartPole's default): a greedy 400 within 60,000 env steps, both workers ending on the same
    update count, which is the run's (each update is both workers' mean gradient); a second run of the seed
    evaluates the same weights at the same env steps."""
    run_dir = tmp_path / "run"
    done = run_ddq(*RUN, "--total-steps", "60000", "--target-return", "400", "--run-dir", str(run_dir), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_of(run_dir)
    assert summary["reached_target"] and summary["steps_to_target"] <= 60_000, summary["stop_reason"]
    assert {w["weights_version"] for w in summary["workers"]} == {summary["updates"]}
    assert {w["pushes"] for w in summary["workers"]} == {summary["updates"]} and summary["lost"] == []
    shown = json.loads(done.stdout)  # the summary printed, for a person: the workers' rows are in summary.json
    assert "workers" not in shown and shown["updates"] == summary["updates"]
    assert f"every setting and each worker's row, is in {run_dir / 'summary.json'}" in done.stderr
    # what each worker spent in the all-reduces, waiting for the other included, a share of its time
    assert all(0 < w["collective_s"] < w["wall_time_s"] for w in summary["workers"]), summary["workers"]
    assert 0 < summary["evaluation_lag_s"] < summary["wall_time_s"], summary  # the driver's evaluations of its points
    evaluations = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                   if '"kind": "eval"' in line]
    assert len(evaluations) >= 3 and all(e["updates"] <= summary["updates"] for e in evaluations)
    # one seed, one run: a second, shorter run publishes the same points (the workers count the run's env steps
    # themselves; read back from Redis, which lags their reports, epsilon and the marks followed timing)
    again = tmp_path / "again"
    repeat = run_ddq(*RUN, "--total-steps", "6000", "--run-dir", str(again), timeout=300)
    assert repeat.returncode == 0, repeat.stderr[-3000:]
    # (the points both evaluated: on a busy machine the evaluator can skip one a newer replaced as it waited,
    # 4,004 in one run of a loaded fresh-clone suite)
    first, second = dict(evaluation_points(run_dir)), dict(evaluation_points(again))
    both = sorted(set(first) & set(second))[:5]
    assert len(both) >= 3 and [first[steps] for steps in both] == [second[steps] for steps in both], (first, second)
    # it stops about a second after its first update, before a worker's heartbeat carries a loss: the killed
    # worker's run, below, has every tag
    assert_events_match_metrics(run_dir, TAGS - {"train/loss"})
    assert_best_is_the_best_evaluation(run_dir)
    assert left_running(run_dir, done.stderr) == [] and left_running(again, repeat.stderr) == []


def test_dqn_workers_pair_every_update_though_their_episodes_end_apart(tmp_path):
    """DQN: each worker replays its own memory, and the workers' updates pair up, all-reduce by all-reduce,
    though their episodes end at different steps (counted by transitions, their update schedules drifted
    apart and gloo failed on the mismatch: every such run crashed)."""
    run_dir = tmp_path / "run"
    done = run_ddq(*RUN, "--algo", "dqn", "--total-steps", "4000", "--run-dir", str(run_dir), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = summary_of(run_dir)
    assert summary["stop_reason"] == "step budget spent" and summary["lost"] == [], summary["stop_reason"]
    assert summary["config"]["agent"]["algo"] == "dqn" and summary["updates"] > 0
    # near the budget the workers vote every vector step: it ends within one of theirs (it had run on for up to 16)
    assert 4000 <= summary["env_steps"] < 4000 + 2 * summary["config"]["agent"]["num_envs"], summary["env_steps"]
    assert {(w["pushes"], w["weights_version"]) for w in summary["workers"]} == {(summary["updates"],) * 2}
    assert {w["episodes"] for w in summary["workers"]} != {0}  # episodes ended: the streams reset as they went


def evaluation_points(run_dir) -> list[tuple[int, float]]:
    """The env steps and greedy return of each point the workers published, in order."""
    return [(e["env_steps"], e["mean_return"]) for e in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if e["kind"] == "eval" and "trained_steps" in e]


def test_a_hung_worker_stalls_the_stage_which_starts_again_and_once_the_run_stops_ends(tmp_path):
    """Worker 1's Python process is stopped by PID (SIGSTOP: alive, hung), so worker 0 waits in its all-reduce
    and no env step is added: after --stall-timeout the driver ends the stage's start, Spark kills the hung
    process, and the stage starts again from worker 0's newest snapshot, the hung attempt named lost. (The
    collectives' own timeout is twice the stall timeout: before, at the stall timeout itself, the run ended
    with exit 1.) Once the next start plays, its worker 1 is stopped too and the run told to stop (SIGTERM):
    its workers cannot leave, so after the stall timeout the driver ends their stage for good, no third start,
    and the run ends as asked (143), nothing left running. (Before, a stop waited on the stage for good.)"""
    run_dir, stall = tmp_path / "run", 15
    log = tmp_path / "train.log"
    process = subprocess.Popen([sys.executable, "-m", "ddq", *RUN, "--total-steps", "1000000", "--stall-timeout",
                                str(stall), "--run-dir", str(run_dir)], stdout=subprocess.PIPE,
                               stderr=log.open("w"), text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    hung: list[int] = []
    try:
        wait_for_progress(run_dir, process, log, 10_000)
        with private_redis(run_dir, process) as client:
            workers = wait_for(lambda: next(client.scan_iter("ddq:*:workers"), None), process)
            hung.append(json.loads(client.hget(workers, "1:0"))["pid"])
            os.kill(hung[0], signal.SIGSTOP)
            wait_for(lambda: "starting it again (1 of 3 within 10 minutes)" in log.read_text(), process, timeout=120)
            played = max(json.loads(line).get("env_steps", 0) for line in (run_dir / "metrics.jsonl").open())
            wait_for_progress(run_dir, process, log, played + 2_000)  # the second start plays
            hung.append(json.loads(wait_for(lambda: client.hget(workers, "1:1"), process))["pid"])
        os.kill(hung[1], signal.SIGSTOP)
        process.send_signal(signal.SIGTERM)
        code, _ = finish(process, log)
    finally:
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    left = [pid for pid in hung if still_there(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert code == 143 and "ddq: error" not in text and "(2 of 3" not in text, text[-3000:]
    assert f"ddq: no worker added an env step for {stall} s as the run stops" in text, text[-3000:]
    assert (f"the workers' stage failed (no worker added an env step for {stall} s: a worker hung?); "
            "starting it again (1 of 3 within 10 minutes)") in text, text[-3000:]
    summary = summary_of(run_dir)
    assert summary["stop_reason"] == "stopped by the user" and summary["stopped_by"] == "SIGTERM"
    lost = {(w["worker"], w["attempt"]): w for w in summary["lost"]}
    redone = {(w["worker"], w["attempt"]): w for w in summary["redone"]}
    assert (1, 0) in lost and {(0, 1), (1, 1)} <= set(redone), summary["workers"]
    # the loss is named: the hung start's updates since the snapshot its successor began from (worker 0 wrote
    # none as it was killed, blocked in its all-reduce: up to --snapshot-every updates)
    assert lost[1, 0]["weights_version"] >= redone[1, 1]["started_from"]
    assert left == [] and left_running(run_dir, text) == []


def still_there(pid: int, timeout: float = 20) -> bool:
    """Whether process `pid` is still there (a zombie counts as gone) after up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                return False
        except (FileNotFoundError, ProcessLookupError):
            return False
        time.sleep(0.2)
    return True


def test_a_killed_driver_leaves_worker_zeros_snapshot_and_the_resume_goes_on_from_it(tmp_path):
    """The driver is SIGKILLed mid-run: worker 0's snapshot, copied into the run folder beside each checkpoint,
    is there (it had been written only as the run ended, so a resume began from new weights and wrote them
    over the checkpoint), and `--resume` trains on from it to its budget, leaving nothing running."""
    run_dir, snapshot = tmp_path / "run", tmp_path / "run" / "data-parallel.pt"
    log = tmp_path / "train.log"
    process = subprocess.Popen([sys.executable, "-m", "ddq", *RUN, "--total-steps", "400000", "--eval-every",
                                "2000", "--snapshot-every", "20", "--run-dir", str(run_dir)],
                               stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        wait_for(snapshot.exists, process, timeout=300)
        wait_for_progress(run_dir, process, log, 6_000)  # a checkpoint or two later
    finally:
        process.kill()  # SIGKILL: no summary, no final snapshot; its children die with it
        process.wait()
    first = log.read_text()
    assert not (run_dir / "summary.json").exists() and left_running(run_dir, first) == [], first[-3000:]
    resumed = run_ddq("train", "--resume", str(run_dir), "--total-steps", "20000", "--no-progress", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = summary_of(run_dir)
    assert summary["env_steps"] >= 20_000 and summary["stop_reason"] == "step budget spent"
    began = {w["started_from"] for w in summary["workers"]}
    assert len(began) == 1 and began.pop() >= 20, summary["workers"]  # worker 0's snapshot, not new weights
    assert left_running(run_dir, resumed.stderr) == []


def test_the_run_folder_keeps_the_newest_snapshot_though_redis_comes_back_older(tmp_path):
    """The driver copies worker 0's snapshot into the run folder with each checkpoint, and only a newer one: a
    Redis restarted from its own snapshot, a second or two old, holds an older one for a while, which had
    overwritten the file (and a checkpoint that finds nothing new writes nothing)."""
    from ddq.core.agent import epsilon_schedule, model_parameters
    from ddq.modes.data_parallel import SNAPSHOT_FILE, WorkerZeroPublishes
    from ddq.modes.weights_service import ServiceContext
    from ddq.processes import Supervisor
    from ddq.transport.learner_channel import LearnerChannel
    from ddq.transport.redis_client import connect
    from ddq.transport.redis_server import EmbeddedRedis
    from ddq.transport.snapshots import ShardState, load_newest

    config = config_of(env="CartPole-v1")
    service = WorkerZeroPublishes(model_parameters(config.agent), epsilon_schedule(config.agent))
    with EmbeddedRedis() as server:
        client = connect(server.url)
        service.start(ServiceContext(tmp_path / "settings", server.url, "r", tmp_path, client, Supervisor()))
        channel, layout, bounds = LearnerChannel(client, "r"), service.layout, service.bounds
        weights = service.initial.data.clone()

        def snapshot(version: int) -> None:  # as worker 0 writes one, into Redis alone
            channel.save_snapshot(ShardState(version, version, weights, weights, {"config": {}, "steps": version,
                                                                                  "state": {}}),
                                  None, layout, bounds)

        def kept() -> int:
            return load_newest(client, "no-such-key", tmp_path / SNAPSHOT_FILE, layout, bounds).version

        snapshot(500)
        service.keep()
        assert kept() == 500
        (tmp_path / SNAPSHOT_FILE).unlink()
        service.keep()  # nothing newer in Redis: nothing written
        assert not (tmp_path / SNAPSHOT_FILE).exists()
        snapshot(900)
        service.keep()
        snapshot(700)  # Redis back from its own snapshot, older than the file
        service.keep()
        assert kept() == 900


def test_an_earlier_starts_snapshot_is_refused_once_a_later_start_has_begun():
    """Where a cluster has task slots to spare, the next start of the stage can read the snapshot it resumes
    from while the failed start's worker 0 still writes its last: that one is refused, not kept beside
    (or after) the new start's, so a later restart cannot resume from the other lineage."""
    import torch

    from ddq.transport.learner_channel import LearnerChannel
    from ddq.transport.redis_client import connect
    from ddq.transport.redis_server import EmbeddedRedis
    from ddq.transport.snapshots import ShardState

    weights, layout, bounds = torch.zeros(4), b"L" * 8, (0, 4)

    def state(version: int) -> ShardState:
        return ShardState(version, version, weights, weights, {"config": {}, "steps": version, "state": {}})

    with EmbeddedRedis() as server:
        channel = LearnerChannel(connect(server.url), "r")
        assert channel.save_stage_snapshot(state(100), layout, bounds, start=0)  # a fresh run's first start
        channel.begin_stage_start(1)
        assert not channel.save_stage_snapshot(state(300), layout, bounds, start=0)  # start 0's last, too late
        assert channel.newest_snapshot(None, layout, bounds).version == 100
        assert channel.save_stage_snapshot(state(150), layout, bounds, start=1)
        channel.begin_stage_start(0)  # an earlier start that begins late never takes the lead back
        assert not channel.save_stage_snapshot(state(400), layout, bounds, start=0)
        assert channel.newest_snapshot(None, layout, bounds).version == 150
        channel.client.delete(channel.keys.stage_start)  # a Redis rolled back past the claim: its snapshot
        assert channel.save_stage_snapshot(state(200), layout, bounds, start=1)  # writes it again
        assert not channel.save_stage_snapshot(state(500), layout, bounds, start=0)


class StageJob:
    """What the stall watch asks of a Spark job (pure logic): its start, and what the watch told it."""

    def __init__(self, restarts: int = 3):
        self.start_index, self.restarts_left, self.told = 0, restarts, []

    def start_again(self, start: int, why: str) -> bool:
        self.told.append(("start again", start))
        self.restarts_left -= 1
        return self.restarts_left >= 0

    def end_start(self, start: int, why: str) -> None:
        self.told.append(("end", start))

    def kill_wait_s(self) -> float:
        return 12.0


def test_the_stall_watch_starts_a_stage_that_trained_again_once_ends_a_stopping_one_and_else_ends_the_run(
        monkeypatch):
    from ddq.modes import driver

    clock = [0.0]
    monkeypatch.setattr(driver.time, "monotonic", lambda: clock[0])

    def watch(starts_again: bool) -> driver.StallWatch:
        clock[0] = 0.0
        return driver.StallWatch(100, 15.0, starts_again, "resume it")

    def after(seconds: float, stall: driver.StallWatch, steps: int, job: StageJob, stopping: bool = False) -> None:
        clock[0] += seconds
        stall.look(steps, job, stopping)

    job, stall = StageJob(), watch(True)
    after(1, stall, 500, job)  # the start trains, then stops adding steps
    after(15.5, stall, 500, job)
    assert job.told == [("start again", 0)]
    after(15.5, stall, 500, job)  # given the stall timeout from Spark's kill of the hung task: 12 s on
    assert job.told == [("start again", 0)]
    job.start_index = 1
    after(5, stall, 500, job)  # the next start begins, and never trains: the run ends
    with pytest.raises(driver.RunStalled, match="no worker added an env step for 15 s"):
        after(15.5, stall, 500, job)
    job, stall = StageJob(), watch(True)
    after(1, stall, 500, job)
    after(15.5, stall, 500, job)
    with pytest.raises(driver.RunStalled):  # the start it ended goes on stalling (the cancel did not take)
        after(28, stall, 500, job)
    job, stall = StageJob(), watch(False)  # downpour's, whose workers wait on nothing but the shards
    after(1, stall, 500, job)
    with pytest.raises(driver.RunStalled):
        after(15.5, stall, 500, job)
    assert job.told == []
    job, stall = StageJob(), watch(True)  # the run stops, and its workers neither end nor play
    after(1, stall, 500, job, stopping=True)
    after(15.5, stall, 500, job, stopping=True)
    after(30, stall, 500, job, stopping=True)
    assert job.told == [("end", 0)]


class FailingStarts:
    """A Spark context whose stage fails its first `failures` starts, each `apart_s` after the one before on
    `clock` (pure logic: what SparkJob asks of a context)."""

    def __init__(self, failures: int, apart_s: float, clock: list[float]):
        self.failures, self.apart_s, self.clock, self.starts = failures, apart_s, clock, 0

    def setJobGroup(self, group: str, description: str) -> None:  # noqa: N802 - Spark's name
        pass

    def parallelize(self, items: object, slices: int) -> FailingStarts:
        return self

    def barrier(self) -> FailingStarts:
        return self

    def mapPartitionsWithIndex(self, function: object) -> FailingStarts:  # noqa: N802 - Spark's name
        return self

    def collect(self) -> list:
        self.starts += 1
        self.clock[0] += self.apart_s
        if self.starts <= self.failures:
            raise RuntimeError("Python worker exited unexpectedly (crashed)")
        return []


@pytest.mark.parametrize("minutes_apart, failures, ends", [(0, 3, False), (0, 4, True), (3, 4, True), (4, 6, False),
                                                          (11, 7, False)])
def test_a_barrier_stage_is_started_again_at_most_3_times_within_10_minutes(capsys, minutes_apart, failures, ends):
    """As the supervisor restarts a process: a stage that keeps failing ends the run, and a long run outlives
    a fault now and then (before, the fourth start was the last, however far apart the faults came)."""
    from ddq.spark.job import SparkJob

    clock = [0.0]
    context = FailingStarts(failures, minutes_apart * 60.0, clock)
    job = SparkJob(context, lambda *_: iter(()), 2, True, "", "", "r")
    job.restarts.clock = lambda: clock[0]
    job._run(lambda *_: iter(()), 2, True, "", "", "r")  # the job's thread's work, on this one
    assert job.ended.is_set() and (job.error is not None) == ends, job.error
    said = capsys.readouterr().err
    if ends:
        assert str(job.error).endswith("(after 3 restarts of the stage within 10 minutes)"), job.error
        assert context.starts == 4 and "starting it again (3 of 3 within 10 minutes)" in said
    else:
        assert context.starts == failures + 1 and job.start_index == failures
        assert said.count("starting it again (") == failures  # each failure started it again
        assert ("(3 of 3 within 10 minutes)" in said) == (minutes_apart < 10), said  # its last allowed, or none near


def test_settings_data_parallel_refuses(tmp_path):
    """Shards belong to downpour's parameter server: one line, before anything starts."""
    done = run_ddq(*RUN, "--shards", "2", "--run-dir", str(tmp_path / "run"), timeout=120)
    assert done.returncode == 2 and "shards must be 1 in data-parallel mode" in done.stderr
    assert not (tmp_path / "run").exists()
