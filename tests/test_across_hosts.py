"""Runs across hosts (the suite's proof that both distributed modes learn): a driver host (h0: the Spark master, `ddq train` and its private Redis) and two
worker hosts (h1, h2: a Spark worker daemon each), made by the test-hosts harness on this machine.

Executors run only on the worker hosts, with a Python environment that has ddq's dependencies and not
ddq: the job carries ddq to them. They reach the driver's Redis over TLS at h0's address, with the
password made for the run. Each host has its own /tmp, so nothing of the run passes through a shared path.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import assert_events_match_metrics
from ddq.benchmarks.chaos import task_processes
from ddq.benchmarks.procfs import child_named, processes_mentioning
from ddq.benchmarks.spark_cluster import (
    SPARK_HOME,
    Cluster,
    latency_proxy_on_h0,
    tls_redis_on_h0,
    wait_for_worker_steps,
)
from ddq.benchmarks.testhosts import TestHosts, deps_only_python, executor_environment
from ddq.modes.driver import JOB_CANCEL_WAIT_S
from ddq.services.telemetry import collective_share
from ddq.spark.start import SPARK_STOP_WAIT_S
from ddq.transport.keys import run_ids
from hosts import skip_unless_root
from test_data_parallel import evaluation_points
from test_downpour import TAGS

pytestmark = [skip_unless_root, pytest.mark.slow]

# The fault tests train DQN, not CartPole's default PQN: a fault lands mid-run, and PQN's run can end first.
DQN_PACE = ("--algo", "dqn")


@pytest.fixture
def run_ddq_package():
    """`ddq package FOLDER --env ENV` (gzip level 0: the suite's time); the spark-submit command it prints."""
    def package(folder: Path, environment: Path) -> list[str]:
        done = subprocess.run([sys.executable, "-m", "ddq", "package", str(folder), "--env", str(environment),
                               "--compress-level", "0"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()
    return package


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with TestHosts(["h0", "h1", "h2"]) as hosts:
        cluster = Cluster(hosts, deps_only_python(hosts.folder))
        cluster.start()
        yield cluster


@pytest.fixture(autouse=True)
def whole_cluster(cluster: Cluster) -> Iterator[None]:
    """Each test starts on the whole cluster, whatever the one before it left (a failure mid-fault included):
    every link up, a crashed host's worker daemon started again, and the master counting each worker free.
    After it, with the cluster whole again, nothing of its runs runs on any host (`Cluster.left_running`)."""
    restore(cluster)
    yield
    runs = sorted(cluster.runs)
    cluster.runs.clear()  # (the next test's look is for its own runs, whatever this one's raises)
    restore(cluster)
    left = cluster.left_running(*runs)
    assert not left, f"left running by {runs}: {left}"


def restore(cluster: Cluster) -> None:
    for host in ("h0", *cluster.workers):
        cluster.hosts.link_up(host)
    for index, host in enumerate(cluster.workers, start=1):
        if cluster.daemons[index].poll() is not None:
            cluster.daemons[index] = cluster.worker_daemon(host)
    cluster.wait_for_workers()


@pytest.mark.parametrize("mode, seed", [("downpour", 21), ("actor-learner", 21), ("data-parallel", 21)])
def test_a_run_across_hosts_reaches_cartpole_475(cluster, mode, seed):
    """Downpour's run also meets fault a: a worker host's link cut for 20 s mid-run, then restored.
    Connections wait out the cut (their 30 s deadline is longer), Spark keeps the executor, and every
    gradient pushed is applied exactly once: the server's version is the sum of the workers' pushes.
    Data-parallel's workers form their process group across the hosts, at the executors' addresses.
    Downpour's two workers took 41,000-91,000 env steps to 475 on one machine (CartPole's PQN, seeds 1-5 and
    21, 2026-11-26; serial's took 7,000-21,000), hence its budget; a fresh clone's loaded suite once saw the
    cut one's spend 150,000 without it (2026-11-29), so it has 200,000."""
    name = f"cartpole-{mode}"
    budget = 200_000 if mode == "downpour" else 60_000
    # the executors' Python is the one spark-defaults.conf names (`Cluster`), as Spark's rule puts it above
    # $PYSPARK_PYTHON, here one left from another job: pyspark reads only the variable, and ddq once ran it
    left_over = {"PYSPARK_PYTHON": "/nonexistent/python-of-another-job"} if mode == "data-parallel" else None
    driver = cluster.start_training(name, "--mode", mode, "--seed", str(seed), "--target-return", "475",
                                    "--total-steps", str(budget), env=left_over)
    if mode == "downpour":
        wait_for_worker_steps(cluster, name, 1, 1500)  # worker 1: the task on h1 or h2, whichever Spark chose
        cluster.hosts.link_down("h1")
        time.sleep(20)  # the fault itself: 20 s without a link
        cluster.hosts.link_up("h1")
    code, summary, log = cluster.finish(name, driver)
    assert code == 0, log[-4000:]
    assert summary["reached_target"], {key: summary.get(key) for key in ("stop_reason", "env_steps", "updates",
                                                                         "best_eval_return", "lost", "workers")}
    metrics = (cluster.hosts.tmp("h0") / name / "metrics.jsonl").read_text().splitlines()
    assert any(point["kind"] == "eval" and point["mean_return"] >= 475 for point in map(json.loads, metrics))
    h0 = cluster.hosts.address("h0")
    assert f"serves other hosts at {h0} (TLS" in log  # the executors' Redis: h0's address, not a socket
    assert "not authenticated and encrypted" not in log  # Spark's are: the executors got the password from it
    for host in ("h1", "h2"):  # every executor ran on a worker host, from the job's own copy of ddq
        stderr = list((cluster.hosts.tmp(host) / "spark-work").rglob("stderr"))
        assert stderr, f"no executor ran on {host}"
        assert list((cluster.hosts.tmp(host) / "spark-work").rglob("ddq.zip")), f"ddq was not shipped to {host}"
    assert not (cluster.hosts.tmp("h1") / name).exists() and not (cluster.hosts.tmp("h2") / name).exists()
    assert len(summary["workers"]) == 2
    if mode == "actor-learner":  # eval_every marks (1000) of the env steps trained on were evaluated, in order,
        # every one but those a newer point replaced as they waited for the driver's evaluator
        points = [point for point in map(json.loads, metrics) if point["kind"] == "eval" and "trained_steps" in point]
        marks = [point["trained_steps"] // 1000 for point in points]
        assert marks == sorted(set(marks)) and marks[-1] <= len(marks) + summary["evaluation_points_skipped"]
        assert all(point["trained_steps"] % 1000 < 200 for point in points)  # within a message's worth of the mark
        first = next(point for point in points if point["mean_return"] >= 475)  # reported at its acted steps
        assert summary["steps_to_target"] == first["env_steps"] >= first["trained_steps"]
    elif mode == "data-parallel":  # one group across h1 and h2: each worker applied every averaged update
        assert {w["weights_version"] for w in summary["workers"]} == {summary["updates"]}, summary["workers"]
        assert summary["updates"] > 0
        assert summary["lost"] == []
    else:  # the cut: both first attempts finished, none lost, none applied twice
        workers = sorted(summary["workers"], key=lambda w: (w["worker"], w["attempt"]))
        assert [(w["worker"], w["attempt"], w["state"]) for w in workers] == [(0, 0, "finished"), (1, 0, "finished")], \
            (workers, log[-3000:])
        assert summary["updates"] == sum(w["pushes"] for w in workers) > 0, workers
        assert [row["sent"] for row in summary["account"]["workers"]] == [w["pushes"] for w in workers]
        assert summary["account"]["versions"] == [summary["account"]["applied"]]


def test_spark_submit_with_what_ddq_package_writes_under_latency_on_every_redis_connection(cluster,
                                                                                         run_ddq_package):
    """`ddq package --env` writes ddq.zip (--py-files), the script, and a venv-pack archive of an environment
    with ddq's dependencies (--archives); spark-submit on h0, as `ddq package` prints it, runs downpour with
    executors on h1 and h2 whose Python is the archive's own, unpacked by Spark beside each executor. Every
    Redis connection of the run (the driver's, the shard's, the executors') goes to a TLS Redis on h0 through
    a proxy that delays each direction by 1 ms +- 0.5 ms: every round trip grows by 1-3 ms."""
    h = cluster.hosts
    command = run_ddq_package(h.tmp("h0") / "package", executor_environment(h.folder))
    inside = [part.replace(str(h.tmp("h0")), "/tmp") for part in command]  # the same files, as h0 sees them
    inside[0], inside[inside.index("URL")] = str(SPARK_HOME / "bin" / "spark-submit"), cluster.master
    # the full JIT for the JVMs that encrypt and unpack the 1 GB archive (the cluster's light one is for its
    # one-core hosts' workers: `Cluster`)
    inside[1:1] = [part for jvm in ("driver", "executor")
                   for part in ("--conf", f"spark.{jvm}.defaultJavaOptions=-XX:+TieredCompilation")]
    url, _ = latency_proxy_on_h0(cluster, tls_redis_on_h0(cluster), delay_ms=1.0, jitter_ms=0.5)
    name = "submitted"
    cluster.runs.add(name)  # (spark-submit, not `start_training`: its processes are looked for all the same)
    flags = ["--workers", "2", "--env", "CartPole-v1", "--total-steps", "2000", "--eval-every", "2000",
             "--eval-episodes", "2", "--no-progress", "--no-dashboard", "--no-celery", "--run-dir", f"/tmp/{name}"]
    submit = h.start("h0", inside[:inside.index("[ddq")] + flags, h.folder / f"{name}.log",
                     {**cluster.spark_env("h0"), "DDQ_REDIS_URL": url})
    code, summary, log = cluster.finish(name, submit)
    assert code == 0, log[-4000:]
    # the printed command's spark.log.level: the context's first three INFO lines, where a start printed 100
    assert sum(" INFO " in line for line in log.splitlines()) < 10, log[-4000:]
    assert summary["mode"] == "downpour" and summary["env_steps"] >= 2000 and summary["stop_reason"] == "step budget spent"
    assert summary["updates"] == sum(w["pushes"] for w in summary["workers"]) > 0  # none lost, none twice
    assert url.split("@")[0].split(":")[-1] not in log  # the password stayed out of the log
    for host in ("h1", "h2"):  # the executors' Python came in the archive, without what no executor runs
        unpacked = list((h.tmp(host) / "spark-work").rglob("environment/bin/python"))
        assert unpacked, f"no archive unpacked on {host}"
        torch = next(unpacked[0].parents[1].glob("lib/python*/site-packages/torch"))
        assert (torch / "lib").is_dir() and not (torch / "include").exists() and not (torch / "test").exists()
        assert (torch / "bin" / "torch_shm_manager").exists() and not list((torch / "bin").glob("test_*"))


def test_a_driver_cut_off_from_every_worker_ends_within_its_stall_timeout_and_resume_continues(cluster):
    """h0 (the driver, its Redis and the Spark master) loses its link: no worker can add a step. The run
    ends with a summary and exit 1 within --stall-timeout plus Spark's cancellation wait, and once the link
    is back `--resume` finishes it, riding out its private Redis killed once on the way."""
    name = "driver-cut-off"
    driver = cluster.start_training(name, "--mode", "downpour", *DQN_PACE, "--total-steps", "200000", "--eval-every", "1000",
                                    "--eval-episodes", "2", "--stall-timeout", "15")
    wait_for_worker_steps(cluster, name, 0, 1500)  # past the first evaluation: a checkpoint to resume from
    cluster.hosts.link_down("h0")
    cut = time.monotonic()
    try:
        code, summary, log = cluster.finish(name, driver, timeout=15 + JOB_CANCEL_WAIT_S + SPARK_STOP_WAIT_S + 60)
        ended_after = time.monotonic() - cut
        print(f"the run ended {ended_after:.1f} s after the cut")
    finally:
        cluster.hosts.link_up("h0")
    assert code == 1, log[-4000:]
    assert "no worker added an env step for 15 s" in summary["stop_reason"], summary["stop_reason"]
    # Spark could not say goodbye to the executors cut off: its JVM was killed, not left to its shutdown hook
    # (which waits minutes on them). A JVM that did stop still takes a moment to exit after its driver: wait
    # for it, for at most 20 s
    first_run = run_ids(log)[0]
    deadline = time.monotonic() + 20
    while (jvms := processes_mentioning(f"spark.app.name=ddq-{first_run}")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jvms == [], log[-2000:]
    assert ended_after < 15 + JOB_CANCEL_WAIT_S + SPARK_STOP_WAIT_S + 30, ended_after  # the code's waits, and 30 s
    assert (cluster.hosts.tmp("h0") / name / "checkpoint.pt").exists() and summary["env_steps"] < 200000
    cluster.wait_for_workers()  # the worker daemons register with the master again
    budget = summary["env_steps"] + 4000
    # the resumed session rides out a Redis restart, which under the suite's load once kept the workers from
    # adding a step for longer than the first session's 15 s: the resumed session is given 120 s
    resumed = cluster.start_training(name, "--resume", f"/tmp/{name}", "--total-steps", str(budget),
                                     "--stall-timeout", "120")
    # and its private Redis, serving the executors over TLS, is killed once mid-run: restarted from its
    # snapshot, it is reached again at the same address, password and certificate
    # once both workers play, a few seconds in (20 episodes). Full suites saw worker 1's executor register
    # late after the link healed: before ddq waited for a task slot per worker, its task ran after worker 0's
    # (it played nothing), and once it was in its first second when Redis died (its task retried)
    wait_for_worker_steps(cluster, name, 1, summary["env_steps"], episodes=20)
    wait_for_worker_steps(cluster, name, 0, summary["env_steps"] + 1000)
    os.kill(child_named(resumed.pid, "redis-server"), signal.SIGKILL)
    first_session = len(log)
    code, after, log = cluster.finish(name, resumed)
    log = log[first_session:]  # the same log file: the resumed session's part
    assert code == 0, log[-4000:]
    assert after["stop_reason"] == "step budget spent" and after["env_steps"] >= budget
    assert after["restarts"] == {"redis-server": 1} and "ddq: error" not in log, log[-3000:]
    spark_log = (cluster.hosts.tmp("h0") / name / "spark.log").read_text(errors="replace")
    assert [(w["worker"], w["attempt"]) for w in after["workers"]] == [(0, 0), (1, 0)], (  # no task failed
        after["workers"], spark_log[spark_log.find("Lost task"):][:6000] if "Lost task" in spark_log else log[-4000:])


def test_a_worker_hosts_link_cut_for_good_mid_run_is_redone_elsewhere_and_the_run_completes(cluster):
    """h1 loses its link and never gets it back while the run lasts. Spark declares its executor lost once
    `spark.network.timeout` passes (20 s here, set the way any Spark setting is, in PYSPARK_SUBMIT_ARGS;
    Spark's default is 120 s) and retries its task on h2; the cut-off attempt is named as lost."""
    name = "cut-for-good"
    spark_settings = ("--conf spark.network.timeout=20s --conf spark.network.timeoutInterval=5s "
                      "--conf spark.executor.heartbeatInterval=2s pyspark-shell")
    driver = cluster.start_training(name, "--mode", "downpour", *DQN_PACE, "--total-steps", "6000", "--eval-every", "3000",
                                    "--eval-episodes", "2", env={"PYSPARK_SUBMIT_ARGS": spark_settings})
    wait_for_worker_steps(cluster, name, 0, 1500)
    wait_for_worker_steps(cluster, name, 1, 1500)
    cluster.hosts.link_down("h1")
    try:
        code, summary, log = cluster.finish(name, driver)
    finally:
        cluster.hosts.link_up("h1")
    assert code == 0, log[-4000:]
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= 6000
    lost = [(row["worker"], row["attempt"]) for row in summary["lost"]]
    assert len(lost) == 1 and [(row["worker"], row["attempt"]) for row in summary["redone"]] == [
        (lost[0][0], lost[0][1] + 1)], summary["workers"]
    # none applied twice: no more updates than gradients reached Redis; none lost but the cut-off attempt's.
    # That attempt's count can be off either way: it misses the pushes after its last heartbeat, which Redis
    # counted as they arrived, and it can count a push the cut caught mid-write, which never arrived (a fresh
    # clone's suite once saw 3,369 pushes counted against 3,368 applied)
    kept = sum(w["pushes"] for w in summary["workers"] if (w["worker"], w["attempt"]) not in lost)
    assert kept <= summary["updates"] <= summary["gradients_received"]
    assert summary["account"]["versions"] == [summary["account"]["applied"]] and summary["account"]["repeats"] == 0
    cluster.wait_for_workers()  # h1's worker daemon is back for the next test


def test_a_worker_host_down_as_the_run_starts_is_waited_for_and_one_never_up_is_named(cluster):
    """h2 is down as a run starts. Its daemon up once the master launched h1's executor: Spark holds the
    tasks until h2's executor registered too, and both workers play side by side (on Spark's defaults a
    cluster runs the tasks on the first executors to register: a worker whose executor came after the
    budget was spent played nothing). h2 down for good (Spark told to wait 2 s): the driver says that
    the executors offer fewer task slots than the run has workers."""
    late = "of the 2 task slots the workers need"
    cluster.hosts.crash("h2")
    cluster.wait_for_workers(alive=1)
    code, summary, log = cluster.train("h2-down", "--mode", "downpour", *DQN_PACE, "--total-steps", "500",
                                       env={"PYSPARK_SUBMIT_ARGS": "--conf spark.scheduler.maxRegisteredResourcesWaitingTime=2s pyspark-shell"})
    assert code == 0 and late in log, log[-4000:]
    name = "h2-late"
    # (Spark waits 30 s for the executors by default: on a loaded machine h2's daemon and executor, two JVMs,
    # may take longer to start and register, so this run waits up to 180 s)
    driver = cluster.start_training(name, "--mode", "downpour", *DQN_PACE, "--total-steps", "3000", "--eval-every", "3000",
                                    "--eval-episodes", "2", env={"PYSPARK_SUBMIT_ARGS": "--conf spark.scheduler."
                                                                 "maxRegisteredResourcesWaitingTime=180s pyspark-shell"})
    deadline = time.monotonic() + 120
    while not re.search(rf"Registered app ddq-{name}-.*\n(.*\n)*.*Launching executor", cluster.log("master")):
        assert time.monotonic() < deadline and driver.poll() is None, cluster.log(name)[-3000:]
        time.sleep(0.2)
    cluster.daemons[cluster.workers.index("h2") + 1] = cluster.worker_daemon("h2")
    code, summary, log = cluster.finish(name, driver)
    assert code == 0 and late not in log, log[-4000:]
    played = {row["worker"]: row["env_steps"] for row in summary["workers"]}
    assert min(played.values()) > 500 and len(summary["workers"]) == 2, summary["workers"]
    cluster.wait_for_workers()  # both hosts up for the next test


def test_a_data_parallel_run_rides_out_a_killed_worker_then_a_crashed_worker_host(cluster):
    """Data-parallel across h1 and h2 (CartPole's PQN): the Python process of h2's worker is SIGKILLed by PID;
    once the stage's second start plays, every process of h1 is killed at once and its worker daemon started
    again (a host's reboot: the stage needs a task slot per worker). Each time the driver starts the barrier
    stage again from worker 0's newest snapshot: the run spends its budget with exit 0, and the summary's
    `lost` names every attempt of the two failed starts, `redone` the starts that replaced them."""
    name, budget = "dp-faults", 60_000  # each fault lands seconds into a start: its rows say what it played
    driver = cluster.start_training(name, "--mode", "data-parallel", "--total-steps", str(budget))

    def logged_steps() -> int:  # the run's env steps at its newest episode the driver logged
        metrics = cluster.hosts.tmp("h0") / name / "metrics.jsonl"
        return max([p.get("env_steps", 0) for p in map(json.loads, metrics.read_text().splitlines()[-200:])] + [0])

    def wait_for_log(text: str) -> None:
        deadline = time.monotonic() + 180
        while text not in cluster.log(name):
            assert driver.poll() is None and time.monotonic() < deadline, cluster.log(name)[-4000:]
            time.sleep(0.2)

    wait_for_worker_steps(cluster, name, 1, 20_000)
    [task] = task_processes(cluster.hosts, "h2")
    os.kill(task, signal.SIGKILL)
    wait_for_log("starting it again (1 of 3 within 10 minutes)")
    wait_for_worker_steps(cluster, name, 0, logged_steps() + 20_000)  # the second start plays
    cluster.hosts.crash("h1")
    assert cluster.hosts.pids("h1") == []
    cluster.daemons[1] = cluster.worker_daemon("h1")
    code, summary, log = cluster.finish(name, driver)
    assert code == 0 and "ddq: error" not in log, log[-4000:]
    assert "starting it again (2 of 3 within 10 minutes)" in log and "(3 of 3" not in log, log[-4000:]
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= budget
    lost = {(w["worker"], w["attempt"]): w for w in summary["lost"]}
    redone = {(w["worker"], w["attempt"]): w for w in summary["redone"]}
    assert set(lost) == {(0, 0), (1, 0), (0, 1), (1, 1)}, summary["workers"]
    assert all(w["env_steps"] > 0 and w["weights_version"] > w["started_from"] for w in lost.values()), lost
    last = [w for w in redone.values() if w["attempt"] == 2]
    assert len(last) == 2 and {w["state"] for w in last} == {"finished"}, summary["workers"]
    assert {w["weights_version"] for w in last} == {summary["updates"]}
    # the loss is named and bounded: each start began from the newest snapshot, never an older line's (a rank
    # 0 that outlived its start wrote its last as it ended; one on the crashed host wrote every snapshot_every
    # updates), and the lost rows' versions, up to a second old, are that far past it at most
    every = summary["config"]["distributed"]["server"]["snapshot_every"]
    for start, replaced in ((1, 0), (2, 1)):
        began = {w["started_from"] for w in summary["workers"] if w["attempt"] == start}
        was = [w for w in lost.values() if w["attempt"] == replaced]
        assert len(began) == 1, summary["workers"]
        snapshot = began.pop()
        assert was[0]["started_from"] <= snapshot and max(w["weights_version"] for w in was) - snapshot <= every, (
            summary["lost"], summary["redone"])
    # each worker's row says what share of its time went to the all-reduces (the dashboard's column)
    rows = [w for w in summary["workers"] if w["attempt"] == 2]
    assert len(rows) == 2 and all(0 < (collective_share(w) or 0) < 1 for w in rows), rows
    run_dir = cluster.hosts.tmp("h0") / name
    assert (run_dir / "data-parallel.pt").exists()
    assert_events_match_metrics(run_dir, TAGS)
    # each mark evaluated once (a point keeps its trained steps), though a start may publish once more the
    # mark its rank 0 had run ahead to
    marks = [steps // summary["config"]["run"]["eval_every"] for steps, _ in evaluation_points(run_dir)]
    assert marks == sorted(set(marks)), marks
    # worker 0 reported the updates where a parameter server's shard would: every one applied fresh
    points = [e for e in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if e["kind"] == "train"]
    judged = [p["staleness"] for p in points if p.get("staleness") is not None]
    assert judged and set(judged) == {0.0}


def test_a_worker_host_crash_mid_run_is_redone_elsewhere_and_the_run_completes(cluster):
    """Every process of h1 is killed at once (its Spark worker daemon and executor). Spark retries the lost
    task on the host left; the summary shows the crashed attempt as replaced, its pushes still counted.
    Runs last: h1 stays down."""
    name = "crash-h1"
    # 4,500 steps: h1 crashes once both workers passed 1,500 (the run's count), and the job cannot end before
    # Spark redid the lost task, so the run's length adds nothing to what is checked
    driver = cluster.start_training(name, "--mode", "downpour", *DQN_PACE, "--total-steps", "4500", "--eval-every", "3000",
                                    "--eval-episodes", "2")
    wait_for_worker_steps(cluster, name, 0, 1500)
    wait_for_worker_steps(cluster, name, 1, 1500)
    cluster.hosts.crash("h1")
    assert cluster.hosts.pids("h1") == []
    code, summary, log = cluster.finish(name, driver)
    assert code == 0, log[-4000:]
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= 4500
    attempts = sorted((w["worker"], w["attempt"], w["state"]) for w in summary["workers"])
    lost = [row for row in attempts if row[2] == "replaced"]
    assert len(lost) == 1 and (lost[0][0], lost[0][1] + 1, "finished") in attempts, attempts
    # the summary names them: what was lost with the host, and what was redone elsewhere
    assert [(row["worker"], row["attempt"]) for row in summary["lost"]] == [lost[0][:2]]
    assert [(row["worker"], row["attempt"], row["state"]) for row in summary["redone"]] == [
        (lost[0][0], lost[0][1] + 1, "finished")]
    # none applied twice: no more updates than gradients reached Redis (a crashed attempt's last heartbeat
    # misses at most its last second of pushes, which Redis counted as they arrived)
    assert sum(w["pushes"] for w in summary["workers"]) <= summary["updates"] <= summary["gradients_received"]
    assert summary["account"]["versions"] == [summary["account"]["applied"]] and summary["account"]["repeats"] == 0
