"""`ddq bench chaos`: a run across test hosts under a fault every so often, then Ctrl-C and a resume.

    sudo .venv/bin/ddq bench chaos [--minutes 5] [--fault-every 30] [--seed 0] [--topology private]

Needs root (the test hosts are network and mount namespaces of this machine, `ddq.benchmarks.testhosts`).

`--topology private`: a driver host (h0: the Spark master, `ddq train`, its private TLS Redis) and three
worker hosts (h1-h3, a Spark worker daemon of one core each), with a spare (h4) that joins when a host is
cut off for good. For each mode (downpour, actor-learner, then data-parallel; DQN on CartPole, a task per
worker core) the run trains for `--minutes` while, every `--fault-every` seconds, a fault drawn at random
(seeded) strikes:

- a worker process SIGKILLed (a Barista or an actor, by PID);
- a worker host's link cut for 20 s, then restored;
- a worker host crashed (every process of it killed at once), its worker daemon started again 10 s later;
- a worker host cut for good, and the spare host's worker daemon started (once);
- the run's Redis SIGKILLed;
- the weights' owner SIGKILLed (a parameter-server shard, or the learner; in data-parallel, where every
  worker holds the weights, a worker process).

Then Ctrl-C, and `--resume` with 3,000 more env steps. It prints each fault and the checks: the resume
exits 0 having spent its budget; every gradient (or experience message) was applied at most once (the
owner's exact account: what it applied equals its version, nothing refused was applied, each worker's
`applied + stale + lost == sent`; in data-parallel, every worker that finished on the run's update count);
nothing of either session left running; no namespace left afterwards.

`--topology proxied`: two worker hosts of two cores each (h1, h2: four workers), a spare (h3), and an
operator's TLS Redis on h0 (`DDQ_REDIS_URL`) that every connection reaches through the latency proxy. Its
faults: the first four above, the weights' owner SIGKILLed, the proxy SIGKILLed (every connection dropped at
once) and started again 5 s later, and 2 +- 1 ms of latency on every connection for a minute (the proxy's
delay turned on and off). The operator's Redis keeps nothing on disk, so it is not among what is killed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from ddq.benchmarks.procfs import child_named, parent_and_command
from ddq.benchmarks.spark_cluster import (
    Cluster,
    ClusterError,
    latency_proxy_on_h0,
    tls_redis_on_h0,
    wait_for_worker_steps,
)
from ddq.benchmarks.testhosts import PREFIX, TestHosts, deps_only_python, why_not_here

HOST_FAULTS = ("worker process killed", "link cut for 20 s", "host crashed, rebooted", "host cut for good",
               "weights owner killed")
FAULTS = {"private": (*HOST_FAULTS, "Redis killed"),
          "proxied": (*HOST_FAULTS, "proxy killed, restarted", "2 +- 1 ms latency for a minute")}
# `ddq <this>`: the JVM's app name has them too; data-parallel's workers each hold the weights
OWNER: dict[str, str | None] = {"downpour": "param-server", "actor-learner": "learner", "data-parallel": None}


def task_processes(hosts: TestHosts, host: str) -> list[int]:
    """The PIDs of `host`'s Python workers running a task: pyspark daemons' children (the daemon forks one
    per task)."""
    daemons = {pid for pid in hosts.pids(host) if b"pyspark.daemon" in parent_and_command(pid)[1]}
    return [pid for pid in daemons if parent_and_command(pid)[0] in daemons]


class ProxiedRedis:
    """An operator's TLS Redis on h0, and the latency proxy in front of it (its delay off until turned on)."""

    def __init__(self, cluster: Cluster):
        self.cluster, self.redis_url = cluster, tls_redis_on_h0(cluster)
        self._start_proxy()

    def _start_proxy(self) -> None:
        self.url, self.proxy = latency_proxy_on_h0(self.cluster, self.redis_url, delay_ms=2.0, jitter_ms=1.0, off=True)

    def restart(self) -> str:
        old = self.proxy.pid
        self.proxy.kill()
        self.proxy.wait(10)
        time.sleep(5)
        self._start_proxy()
        return f"pid {old}, then pid {self.proxy.pid}"

    def latency(self, seconds: float) -> str:
        self.proxy.send_signal(signal.SIGUSR1)
        time.sleep(seconds)
        self.proxy.send_signal(signal.SIGUSR1)
        return f"proxy pid {self.proxy.pid}"


class Chaos:
    """Strikes the cluster's worker hosts and the driver's processes, one fault at a time: the `faults` of
    the topology, with its `redis` when it is the operator's behind the proxy."""

    def __init__(self, cluster: Cluster, rng: random.Random, spare: str, faults: tuple[str, ...],
                 redis: ProxiedRedis | None = None):
        self.cluster, self.rng, self.spare, self.faults, self.redis = cluster, rng, spare, faults, redis
        self.live = list(cluster.workers)  # worker hosts still reachable
        self.cut_off: list[str] = []

    def strike(self, fault: str, driver: subprocess.Popen, mode: str) -> str:
        """Does `fault`; returns what it struck."""
        hosts, host = self.cluster.hosts, self.rng.choice(self.live)
        if fault == "worker process killed" or (fault == "weights owner killed" and OWNER[mode] is None):
            tasks = task_processes(hosts, host)
            if not tasks:
                return f"{host}: no task running"
            pid = self.rng.choice(tasks)
            os.kill(pid, signal.SIGKILL)
            return f"{host}, pid {pid}"
        if fault == "link cut for 20 s":
            hosts.link_down(host)
            time.sleep(20)
            hosts.link_up(host)
            return host
        if fault == "host crashed, rebooted":
            hosts.crash(host)
            time.sleep(10)
            self.cluster.daemons.append(self.cluster.worker_daemon(host))
            return host
        if fault == "host cut for good":
            hosts.link_down(host)
            self.live.remove(host)
            self.cut_off.append(host)
            self.cluster.workers = [*self.live, self.spare]
            self.cluster.daemons.append(self.cluster.worker_daemon(self.spare))
            self.live.append(self.spare)
            self.spare = ""
            return f"{host}, {self.live[-1]} added"
        if self.redis is not None and fault == "proxy killed, restarted":
            return self.redis.restart()
        if self.redis is not None and fault == "2 +- 1 ms latency for a minute":
            return self.redis.latency(60)
        name = "redis-server" if fault == "Redis killed" else OWNER[mode]
        assert name is not None  # data-parallel's owner fault kills a worker, above
        victim = child_named(driver.pid, name if fault == "Redis killed" else f"ddq\0{name}", missing_ok=True)
        if victim is None:
            return f"no {name} running"
        os.kill(victim, signal.SIGKILL)
        return f"{name}, pid {victim}"

    def draw(self) -> str:
        return self.rng.choice([fault for fault in self.faults if fault != "host cut for good" or self.spare])


def chaos_run(cluster: Cluster, chaos: Chaos, mode: str, minutes: float, every: float) -> dict:
    name = f"chaos-{mode}"
    flags = ("--mode", mode, "--algo", "dqn", "--eval-every", "5000", "--eval-episodes", "2")
    env = {"DDQ_REDIS_URL": chaos.redis.url} if chaos.redis else None  # the proxy's address stays the same
    driver = cluster.start_training(name, *flags, "--total-steps", "100000000", env=env)
    wait_for_worker_steps(cluster, name, 0, 1000)
    faults: list[dict] = []
    started = time.monotonic()
    while time.monotonic() - started < minutes * 60 and driver.poll() is None:
        time.sleep(max(0.0, started + (len(faults) + 1) * every - time.monotonic()))
        fault = chaos.draw()
        at = time.monotonic() - started
        faults.append({"at_s": round(at), "fault": fault, "struck": chaos.strike(fault, driver, mode)})
        print(json.dumps({"mode": mode, **faults[-1]}), flush=True)
    driver.send_signal(signal.SIGINT)
    code, first, log = cluster.finish(name, driver, timeout=300)
    budget = first.get("env_steps", 0) + 3000
    cluster.wait_for_workers()
    resumed = cluster.start_training(name, "--resume", f"/tmp/{name}", "--total-steps", str(budget), env=env)
    code2, after, log2 = cluster.finish(name, resumed, timeout=600)
    left = cluster.left_running(name, out_of_reach=chaos.cut_off)
    return {"mode": mode, "faults": faults, "interrupted": code, "resumed": code2, "budget": budget, "first": first,
            "after": after, "left_running": [command for host, command in left if host not in chaos.cut_off],
            "left_on_cut_off_hosts": [command for host, command in left if host in chaos.cut_off],
            "log_tail": log2[-2000:]}


def checks(result: dict) -> dict[str, bool | None]:
    """Each check: True, False, or None where the run left nothing to check (a session that ended with its
    Redis gone for good has no account in its summary)."""
    first, after = result["first"], result["after"]
    checked: dict[str, bool | None] = {"resume exit 0": result["resumed"] == 0,
                                       "budget spent": after.get("env_steps", 0) >= result["budget"],
                                       "nothing left running": result["left_running"] == []}
    for session, summary in (("interrupted", first), ("resumed", after)):
        if result["mode"] == "data-parallel":  # no account: every update is every worker's averaged gradient
            finished = [w for w in summary.get("workers", []) if w.get("state") == "finished"]
            checked[f"{session}: every worker on every update"] = None if not finished else all(
                w["weights_version"] == summary.get("updates") for w in finished)
            continue
        account = summary.get("account") or {}
        rows = account.get("workers")
        checked[f"{session}: applied at most once"] = None if not rows else all(
            row["applied"] + row["dropped"] + row["lost"] == row["sent"] for row in rows) and account["shards_agree"]
        if result["mode"] == "downpour":  # each shard's version, as it reported its account, is what it applied
            versions = account.get("versions")
            checked[f"{session}: version = applied"] = None if not rows or not versions else \
                versions == [account["applied"]] * len(versions)
    return checked


def report(result: dict) -> str:
    first, after = result["first"], result["after"]
    lines = [f"### {result['mode']}", "", "| at (s) | fault | struck |", "|---|---|---|"]
    lines += [f"| {f['at_s']} | {f['fault']} | {f['struck']} |" for f in result["faults"]]
    account = after.get("account") or {}
    lines += ["", f"- interrupted session: exit {result['interrupted']}, {first.get('env_steps')} env steps, "
              f"{first.get('updates')} updates, lost {len(first.get('lost', []))} attempts, redone "
              f"{len(first.get('redone', []))}, restarts {first.get('restarts')}",
              f"- resumed session: exit {result['resumed']}, {after.get('env_steps')} env steps of "
              f"{result['budget']}, restarts {after.get('restarts')}",
              f"- account (resumed run's owner): applied {account.get('applied')}, repeats refused "
              f"{account.get('repeats')}, workers {account.get('workers')}" if account else
              f"- resumed run's updates: {after.get('updates')}, each every worker's averaged gradient"]
    lines += [f"- {'NOT CHECKED' if ok is None else 'PASS' if ok else 'FAIL'}: {name}"
              for name, ok in checks(result).items()]
    lines += [f"- left running: {command}" for command in result["left_running"]]
    lines += [f"- left on hosts cut off for good: {command}" for command in result["left_on_cut_off_hosts"]]
    return "\n".join(lines)


def run_bench(minutes: float, every: float, seed: int, modes: list[str], topology: str) -> int:
    """Each mode's chaos run on hosts of its own; prints the faults as they strike, then each run's table
    and checks. 0 when every check holds and no namespace is left, 1 otherwise, 2 where no test host can be
    made."""
    cannot = why_not_here()
    if cannot is not None:
        print(f"ddq bench chaos: {cannot}", file=sys.stderr)
        return 2
    proxied = topology == "proxied"
    workers, spare, cores = (("h1", "h2"), "h3", 2) if proxied else (("h1", "h2", "h3"), "h4", 1)
    results, started = [], time.time()
    for mode in modes:
        with TestHosts(["h0", *workers, spare]) as hosts:
            try:
                cluster = Cluster(hosts, deps_only_python(hosts.folder), workers=workers, cores=cores)
                cluster.start()
                chaos = Chaos(cluster, random.Random(seed), spare, FAULTS[topology],
                              ProxiedRedis(cluster) if proxied else None)
                results.append(chaos_run(cluster, chaos, mode, minutes, every))
            except ClusterError as error:  # its logs follow its first line: the hosts' folder goes with them
                print(f"ddq bench chaos ({mode}): {error}", file=sys.stderr)
                return 1
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left = [line for line in namespaces.splitlines() if line.startswith(f"{PREFIX}-{os.getpid()}-")]
    print(f"\n{topology}: {minutes:g} minute{'' if minutes == 1 else 's'} of faults every {every:g} s per mode, "
          f"seed {seed}, {time.time() - started:.0f} s in all; namespaces left: {left or 'none'}\n")
    for result in results:
        print(report(result) + "\n")
    return 0 if all(ok is not False for r in results for ok in checks(r).values()) and not left else 1
