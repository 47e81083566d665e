"""Runs across hosts: a driver host (h0: the Spark master, `ddq train` and its private Redis) and two
worker hosts (h1, h2: a Spark worker daemon each), made by the test-hosts harness on this machine.

Executors run only on the worker hosts, with a Python environment that has ddq's dependencies and not
ddq: the job carries ddq to them. They reach the driver's Redis over TLS at h0's address, with the
password made for the run. Each host has its own /tmp, so nothing of the run passes through a shared path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from hosts import TestHosts, deps_only_python, skip_unless_root

pytestmark = [skip_unless_root, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = str(SPARK_HOME / "bin" / "spark-class")
MASTER_PORT = 7077


class Cluster:
    """Test hosts with a Spark standalone master on h0 and a worker daemon (1 core) on h1 and h2."""

    def __init__(self, hosts: TestHosts, python: Path):
        self.hosts, self.python = hosts, python
        self.master = f"spark://{hosts.address('h0')}:{MASTER_PORT}"

    def spark_env(self, host: str) -> dict[str, str]:
        return {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": self.hosts.address(host),
                "PYSPARK_PYTHON": str(self.python)}

    def start(self) -> None:
        h = self.hosts
        self.daemons = [h.start("h0", [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", h.address("h0"), "--port",
                       str(MASTER_PORT), "--webui-port", "18080"], h.folder / "master.log", self.spark_env("h0"))]
        for host in ("h1", "h2"):
            self.daemons.append(h.start(host, [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", self.master, "--host",
                           h.address(host), "--cores", "1", "--memory", "1g", "--webui-port", "18081",
                           "--work-dir", "/tmp/spark-work"], h.folder / f"worker-{host}.log", self.spark_env(host)))
        deadline = time.monotonic() + 120
        while not all("Successfully registered with master" in self.log(f"worker-{host}") for host in ("h1", "h2")):
            logs = "\n".join(self.log(name)[-1500:] for name in ("master", "worker-h1", "worker-h2"))
            assert time.monotonic() < deadline, "the Spark workers did not register:\n" + logs
            assert all(daemon.poll() is None for daemon in self.daemons), "a Spark daemon exited:\n" + logs
            time.sleep(0.2)

    def log(self, name: str) -> str:
        path = self.hosts.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_training(self, name: str, *flags: str) -> subprocess.Popen:
        """`ddq train` (CartPole, 2 workers) on h0 against the cluster, into h0's /tmp/<name>."""
        return self.hosts.start("h0", [sys.executable, "-m", "ddq", "train", "--spark-master", self.master,
                                       "--env", "CartPole-v1", "--workers", "2", "--no-progress", "--no-dashboard",
                                       "--no-celery", "--run-dir", f"/tmp/{name}", *flags],
                                self.hosts.folder / f"{name}.log",
                                {"PYSPARK_PYTHON": str(self.python), "PYTHONUNBUFFERED": "1"})

    def finish(self, name: str, driver: subprocess.Popen, timeout: float = 500) -> tuple[int, dict, str]:
        """(exit code, summary, log) of the run `start_training` started."""
        code = driver.wait(timeout)
        summary_file = self.hosts.tmp("h0") / name / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        return code, summary, self.log(name)

    def train(self, name: str, *flags: str) -> tuple[int, dict, str]:
        return self.finish(name, self.start_training(name, *flags))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with TestHosts(["h0", "h1", "h2"]) as hosts:
        cluster = Cluster(hosts, deps_only_python(hosts.folder))
        cluster.start()
        yield cluster


@pytest.mark.parametrize("mode, seed", [("downpour", 21), ("actor-learner", 21)])
def test_a_run_across_hosts_reaches_cartpole_475(cluster, mode, seed):
    name = f"cartpole-{mode}"
    code, summary, log = cluster.train(name, "--mode", mode, "--seed", str(seed), "--target-return", "475",
                                       "--total-steps", "60000")
    assert code == 0, log[-4000:]
    assert summary["reached_target"] and summary["steps_to_target"] <= 60000, summary
    metrics = (cluster.hosts.tmp("h0") / name / "metrics.jsonl").read_text().splitlines()
    assert any(point["kind"] == "eval" and point["mean_return"] >= 475 for point in map(json.loads, metrics))
    h0 = cluster.hosts.address("h0")
    assert f"serves other hosts at {h0} (TLS" in log  # the executors' Redis: h0's address, not a socket
    for host in ("h1", "h2"):  # every executor ran on a worker host, from the job's own copy of ddq
        stderr = list((cluster.hosts.tmp(host) / "spark-work").rglob("stderr"))
        assert stderr, f"no executor ran on {host}"
        assert list((cluster.hosts.tmp(host) / "spark-work").rglob("ddq.zip")), f"ddq was not shipped to {host}"
    assert not (cluster.hosts.tmp("h1") / name).exists() and not (cluster.hosts.tmp("h2") / name).exists()
    assert len(summary["workers"]) == 2


def wait_for_worker_steps(cluster: Cluster, name: str, worker: int, env_steps: int, timeout: float = 180) -> None:
    """Until the driver logged an episode of `worker` ended past `env_steps` (a condition, not a time)."""
    metrics = cluster.hosts.tmp("h0") / name / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"worker {worker} never passed {env_steps} env steps"
        if metrics.exists() and any(point.get("worker") == worker and point.get("env_steps", 0) > env_steps
                                    for point in map(json.loads, metrics.read_text().splitlines()[-200:])):
            return
        time.sleep(0.2)


def test_a_worker_hosts_link_cut_for_20_s_mid_run_and_the_run_completes_its_budget(cluster):
    """Connections wait out the cut (their 30 s deadline is longer), Spark keeps the executor, and every
    gradient pushed is applied exactly once: the server's version is the sum of the workers' pushes."""
    name = "cut-20s"
    driver = cluster.start_training(name, "--mode", "downpour", "--total-steps", "16000", "--eval-every", "8000",
                                    "--eval-episodes", "2")
    wait_for_worker_steps(cluster, name, 1, 1500)  # worker 1: the task on h1 or h2, whichever Spark chose
    cluster.hosts.link_down("h1")
    time.sleep(20)  # the fault itself: 20 s without a link
    cluster.hosts.link_up("h1")
    code, summary, log = cluster.finish(name, driver)
    assert code == 0, log[-4000:]
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= 16000
    workers = sorted(summary["workers"], key=lambda w: (w["worker"], w["attempt"]))
    assert [(w["worker"], w["attempt"], w["state"]) for w in workers] == [(0, 0, "finished"), (1, 0, "finished")]
    assert summary["updates"] == sum(w["pushes"] for w in workers) > 0  # none lost, none applied twice


def test_a_worker_host_crash_mid_run_is_redone_elsewhere_and_the_run_completes(cluster):
    """Every process of h1 is killed at once (its Spark worker daemon and executor). Spark retries the lost
    task on the host left; the summary shows the crashed attempt as replaced, its pushes still counted.
    Runs last: h1 stays down."""
    name = "crash-h1"
    driver = cluster.start_training(name, "--mode", "downpour", "--total-steps", "12000", "--eval-every", "6000",
                                    "--eval-episodes", "2")
    wait_for_worker_steps(cluster, name, 0, 1500)
    wait_for_worker_steps(cluster, name, 1, 1500)
    cluster.hosts.crash("h1")
    assert cluster.hosts.pids("h1") == []
    code, summary, log = cluster.finish(name, driver)
    assert code == 0, log[-4000:]
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= 12000
    attempts = sorted((w["worker"], w["attempt"], w["state"]) for w in summary["workers"])
    lost = [row for row in attempts if row[2] == "replaced"]
    assert len(lost) == 1 and (lost[0][0], lost[0][1] + 1, "finished") in attempts, attempts
    # the summary names them: what was lost with the host, and what was redone elsewhere
    assert [(row["worker"], row["attempt"]) for row in summary["lost"]] == [lost[0][:2]]
    assert [(row["worker"], row["attempt"], row["state"]) for row in summary["redone"]] == [
        (lost[0][0], lost[0][1] + 1, "finished")]
    # a crashed attempt's last heartbeat misses at most its last second of pushes: none is applied twice
    assert sum(w["pushes"] for w in summary["workers"]) <= summary["updates"]
