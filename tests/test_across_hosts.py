"""Runs across hosts: a driver host (h0: the Spark master, `ddq train` and its private Redis) and two
worker hosts (h1, h2: a Spark worker daemon each), made by the test-hosts harness on this machine.

Executors run only on the worker hosts, with a Python environment that has ddq's dependencies and not
ddq: the job carries ddq to them. They reach the driver's Redis over TLS at h0's address, with the
password made for the run. Each host has its own /tmp, so nothing of the run passes through a shared path.
"""

from __future__ import annotations

import json
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

    def train(self, name: str, *flags: str, timeout: float = 500) -> tuple[int, dict, str]:
        """`ddq train` on h0 against the cluster, into h0's /tmp/<name>; (exit code, summary, log)."""
        log = self.hosts.folder / f"{name}.log"
        driver = self.hosts.start("h0", [sys.executable, "-m", "ddq", "train", "--spark-master", self.master,
                                         "--env", "CartPole-v1", "--workers", "2", "--no-progress", "--no-dashboard",
                                         "--no-celery", "--run-dir", f"/tmp/{name}", *flags], log,
                                  {"PYSPARK_PYTHON": str(self.python), "PYTHONUNBUFFERED": "1"})
        code = driver.wait(timeout)
        summary_file = self.hosts.tmp("h0") / name / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        return code, summary, log.read_text(errors="replace")


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
