"""A Spark standalone cluster on test hosts (`testhosts`): a master on h0 and worker daemons on the others,
with what the suite's runs across hosts and `ddq bench chaos` put beside it (an operator's TLS Redis on h0,
the latency proxy in front of it). Needs root."""

from __future__ import annotations

import importlib.util
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from ddq.benchmarks.procfs import command_of, processes_mentioning
from ddq.benchmarks.testhosts import TestHosts
from ddq.spark.context import LOCAL_JVM_OPTIONS
from ddq.transport.keys import run_ids

SPARK_HOME = Path(str(getattr(importlib.util.find_spec("pyspark"), "origin", ""))).parent  # found, not imported
SPARK_CLASS = str(SPARK_HOME / "bin" / "spark-class")
MASTER_PORT = 7077
REDIS_PORT, PROXY_PORT = 6390, 6391  # on h0, a namespace of the test's own


class ClusterError(RuntimeError):
    """What the cluster or a run on it did not do in time (a test's failure, a bench's stop)."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ClusterError(message)


class Cluster:
    """Test hosts with a Spark standalone master on h0 and a worker daemon (of `cores`, 1 unless told) on each
    of `workers`, a ddq worker per core. Spark authenticates and encrypts its channels with a secret of the
    cluster's (its operator's spark-defaults.conf, which every host and the driver read), so ddq sends the
    run's Redis password to the executors. The same file names the executors' Python (`python`), as
    docs/cluster.md tells an operator to."""

    def __init__(self, hosts: TestHosts, python: Path, workers: tuple[str, ...] = ("h1", "h2"), cores: int = 1,
                 pin: dict[str, int] | None = None):
        self.hosts, self.python, self.workers, self.cores = hosts, python, list(workers), cores
        self.pin = pin or {}  # host -> the CPU core its processes are held to (a one-core machine)
        self.runs: set[str] = set()  # the names of the runs started, whose processes `left_running` looks for
        self.master = f"spark://{hosts.address('h0')}:{MASTER_PORT}"
        self.conf_dir = hosts.folder / "spark-conf"
        self.conf_dir.mkdir(mode=0o700)
        defaults = self.conf_dir / "spark-defaults.conf"
        defaults.touch(mode=0o600)
        # The light JIT ddq gives a local master's JVM, as an operator of one-core hosts would give theirs: the
        # optimising compiler's threads took the core from the worker beside it (a data-parallel CartPole run
        # across h1 and h2, 2026-11-27: 21 s where it took 28; Spark's start 5.7 s where it took 8.3). A job that
        # ships a large archive wants it back: AES runs on the optimising compiler's intrinsics (the spark-submit
        # test's 1 GB archive took 139 s with the light JIT, 86-96 without), so that test asks for it.
        defaults.write_text(f"spark.authenticate true\nspark.authenticate.secret {secrets.token_hex(16)}\n"
                            "spark.network.crypto.enabled true\n"
                            f"spark.pyspark.python {python}\n"
                            f"spark.driver.defaultJavaOptions {LOCAL_JVM_OPTIONS}\n"
                            f"spark.executor.defaultJavaOptions {LOCAL_JVM_OPTIONS}\n")

    def spark_env(self, host: str) -> dict[str, str]:
        return {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": self.hosts.address(host),
                "PYSPARK_PYTHON": str(self.python), "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_DAEMON_JAVA_OPTS": LOCAL_JVM_OPTIONS}  # the master and worker daemons move no data

    def start(self) -> None:
        h = self.hosts
        master = [SPARK_CLASS, "org.apache.spark.deploy.master.Master", "--host", h.address("h0"), "--port",
                  str(MASTER_PORT), "--webui-port", "18080"]
        self.daemons = [h.start("h0", master, h.folder / "master.log", self.spark_env("h0"), core=self.pin.get("h0"))]
        for host in self.workers:
            self.daemons.append(self.worker_daemon(host))
        self.wait_until_registered(self.workers)

    def worker_daemon(self, host: str) -> subprocess.Popen:
        """A Spark worker daemon (of the cluster's cores) on `host`, as a host's boot would start it."""
        h = self.hosts
        return h.start(host, [SPARK_CLASS, "org.apache.spark.deploy.worker.Worker", self.master, "--host",
                              h.address(host), "--cores", str(self.cores), "--memory", "1g", "--webui-port", "18081",
                              "--work-dir", "/tmp/spark-work"], h.folder / f"worker-{host}.log", self.spark_env(host),
                       core=self.pin.get(host))

    def wait_until_registered(self, hosts: list[str]) -> None:
        deadline = time.monotonic() + 120
        while not all("Successfully registered with master" in self.log(f"worker-{host}") for host in hosts):
            logs = "\n".join(self.log(name)[-1500:] for name in ("master", *(f"worker-{host}" for host in hosts)))
            expect(time.monotonic() < deadline, "the Spark workers did not register:\n" + logs)
            expect(all(daemon.poll() is None for daemon in self.daemons), "a Spark daemon exited:\n" + logs)
            time.sleep(0.2)

    def wait_for_workers(self, timeout: float = 180, alive: int | None = None) -> None:
        """Until the master counts every worker (or `alive` of them) alive with every core free (as after a
        cut link heals)."""
        url = f"http://{self.hosts.address('h0')}:18080/json/"
        ask = f"import json, urllib.request; s = json.load(urllib.request.urlopen({url!r})); " \
              "print(s['aliveworkers'], s['coresused'])"
        deadline, wanted = time.monotonic() + timeout, [str(alive or len(self.workers)), "0"]
        while (answer := self.hosts.run("h0", [sys.executable, "-c", ask]).stdout.split()) != wanted:
            expect(time.monotonic() < deadline, f"the master has {answer} (alive workers, cores used)")
            time.sleep(1)

    def log(self, name: str) -> str:
        path = self.hosts.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_training(self, name: str, *flags: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """`ddq train` (CartPole, a task per worker core) on h0 against the cluster, into h0's /tmp/<name>."""
        self.runs.add(name)
        return self.hosts.start("h0", [sys.executable, "-m", "ddq", "train", "--spark-master", self.master,
                                       "--env", "CartPole-v1", "--workers", str(len(self.workers) * self.cores),
                                       "--no-progress", "--no-dashboard", "--no-celery", "--run-dir", f"/tmp/{name}",
                                       *flags],
                                self.hosts.folder / f"{name}.log",
                                {"PYTHONUNBUFFERED": "1", "SPARK_CONF_DIR": str(self.conf_dir), **(env or {})})

    def finish(self, name: str, driver: subprocess.Popen, timeout: float = 500) -> tuple[int, dict, str]:
        """(exit code, summary, log) of the run `start_training` started."""
        try:
            code = driver.wait(timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"the run {name} did not end within {timeout} s:\n{self.log(name)[-4000:]}") from None
        summary_file = self.hosts.tmp("h0") / name / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        return code, summary, self.log(name)

    def train(self, name: str, *flags: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
        return self.finish(name, self.start_training(name, *flags, env=env))

    def left_running(self, *names: str, out_of_reach: Sequence[str] = (), timeout: float = 60) -> list[tuple[str, str]]:
        """(host, process) for what the runs `start_training` started into h0's /tmp/<name> left running, once
        the master counts every worker's cores free again (a cluster's executors are its worker daemons' to
        stop when the driver ends its application), waited for up to `timeout` s: on any host, a process
        naming a run's folder or a run id its log printed (its JVM; its Redis by its folder or log), and on
        every host but h0 (a worker host, or one cut off) any process but its daemon (an executor, its Python
        workers). Hosts `out_of_reach` (cut off for good: nothing can stop what runs there) are not waited
        for."""
        self.wait_for_workers()
        deadline = time.monotonic() + timeout
        while (left := self._of_runs(names)) and time.monotonic() < deadline:
            if all(host in out_of_reach for host in left.values()):
                break
            time.sleep(0.5)
        return [(host, command_of(pid, left)) for pid, host in sorted(left.items())]

    def _of_runs(self, names: Sequence[str]) -> dict[int, str]:
        where = {pid: host for host in self.hosts.names for pid in self.hosts.pids(host)}
        daemons = {daemon.pid for daemon in self.daemons if daemon.poll() is None}
        runs = [run for name in names for run in run_ids(self.log(name))]
        found = {pid for mark in (*(f"/tmp/{name}" for name in names), *runs) for pid in processes_mentioning(mark)}
        found |= {pid for pid, host in where.items() if host != "h0" and pid not in daemons}  # (a cut-off one's too)
        return {pid: where.get(pid, "no test host") for pid in found}


def wait_for_worker_steps(cluster: Cluster, name: str, worker: int, env_steps: int, timeout: float = 180,
                          episodes: int = 1) -> None:
    """Until the driver logged `episodes` episodes of `worker` ended past the run's `env_steps` (a condition,
    not a time)."""
    metrics = cluster.hosts.tmp("h0") / name / "metrics.jsonl"
    deadline = time.monotonic() + timeout
    while True:
        expect(time.monotonic() < deadline, f"worker {worker} never passed {env_steps} env steps:\n"
               + cluster.log(name)[-3000:])
        if metrics.exists() and sum(point.get("worker") == worker and point.get("env_steps", 0) > env_steps
                                    for point in map(json.loads, metrics.read_text().splitlines()[-500:])) >= episodes:
            return
        time.sleep(0.2)


def tls_redis_on_h0(cluster: Cluster) -> str:
    """A password-protected TLS redis-server on h0 (its settings on its stdin); the URL that reaches it,
    whose secrets go to ddq in the environment, never on a command line."""
    from ddq.transport.redis_server import redis_server_binary  # here: `ddq bench`'s parser imports this module
    from ddq.transport.tls import make_server_certificates

    h, h0 = cluster.hosts, cluster.hosts.address("h0")
    certificates = make_server_certificates(h.tmp("h0") / "proxied-tls", [h0], "latency")
    inside = lambda path: f"/tmp/{Path(path).relative_to(h.tmp('h0'))}"  # noqa: E731 - the path on h0
    password = secrets.token_urlsafe(24)
    settings = {"port": "0", "bind": h0, "tls-port": str(REDIS_PORT), "tls-cert-file": inside(certificates.cert_file),
                "tls-key-file": inside(certificates.key_file), "tls-ca-cert-file": inside(certificates.ca_file),
                "tls-auth-clients": "no", "save": '""', "appendonly": "no", "dir": "/tmp",
                "proto-max-bulk-len": str(512 * 2**20), "user default": "off",
                "user ddq": f"on >{password} ~* &* +@all"}
    h.start("h0", [redis_server_binary(), "-"], h.folder / "proxied-redis.log",
            stdin_text="".join(f"{key} {value}\n" for key, value in settings.items()))
    deadline = time.monotonic() + 60
    while "Ready to accept" not in cluster.log("proxied-redis"):
        expect(time.monotonic() < deadline, cluster.log("proxied-redis"))
        time.sleep(0.1)
    return f"rediss://ddq:{password}@{h0}:{REDIS_PORT}/0?ssl_ca_data={quote(certificates.ca_pem)}"


def latency_proxy_on_h0(cluster: Cluster, url: str, delay_ms: float, jitter_ms: float,
                        traffic: str | None = None, off: bool = False) -> tuple[str, subprocess.Popen]:
    """The latency proxy on h0 in front of the Redis at `url` (writing its byte counts to `traffic`, a path
    on h0, when stopped; its delay `off` until SIGUSR1 when told); the URL through it, and the proxy process."""
    h0 = cluster.hosts.address("h0")
    log = cluster.hosts.folder / "proxy.log"
    log.unlink(missing_ok=True)
    proxy = cluster.hosts.start("h0", [sys.executable, "-m", "ddq.benchmarks.latency_proxy", "--listen",
                                       f"{h0}:{PROXY_PORT}", "--to", f"{h0}:{REDIS_PORT}", "--delay-ms", str(delay_ms),
                                       "--jitter-ms", str(jitter_ms), *(["--traffic", traffic] if traffic else []),
                                       *(["--off"] if off else [])],
                                log)
    deadline = time.monotonic() + 60
    while "latency proxy on" not in cluster.log("proxy"):
        expect(time.monotonic() < deadline and proxy.poll() is None, cluster.log("proxy"))
        time.sleep(0.1)
    return url.replace(f":{REDIS_PORT}/", f":{PROXY_PORT}/"), proxy
