"""What crossing a network costs a distributed run, side by side in one run on the test hosts (needs root).

    sudo .venv/bin/python tests/bench_network.py [--steps 8000] [--repeats 2]

For downpour and actor-learner, CartPole-v1 with 2 workers, each of these in turn, `--repeats` times
(interleaved, so a slow minute of the machine hits every setup alike):

- one host: `ddq train` on h0 with local[2] (executors on h0, Redis through a unix socket);
- two hosts: the Spark master and the driver on h0, one executor on each of h1 and h2, reaching h0's
  private Redis over TLS;
- two hosts through the latency proxy on h0 (`ddq.benchmarks.latency_proxy`), 0 ms (it counts bytes)
  and 2 ms +- 1 ms each way: every Redis connection of the run passes through it.

Rates are the executors' own: env steps over their wall time (Spark's and the JVM's start left out), and
updates (applied gradients, or the learner's updates) over the longest worker's wall time. Bytes are
what the proxy forwarded each way, over every connection of the run, per update. The test hosts share
this machine's CPU: what this measures is the network path (TLS, TCP, Spark's executors elsewhere,
latency), not more compute.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from pathlib import Path

from ddq.benchmarks.spark_cluster import Cluster, latency_proxy_on_h0, tls_redis_on_h0
from ddq.benchmarks.testhosts import TestHosts, deps_only_python

SETUPS = ("one host", "two hosts", "two hosts, proxy 0 ms", "two hosts, proxy 2 ms +- 1")


def rates(summary: dict) -> tuple[float, float]:
    workers = [w for w in summary["workers"] if w.get("wall_time_s")]
    steps_per_s = sum(w["env_steps"] / w["wall_time_s"] for w in workers)
    updates_per_s = summary["updates"] / max(w["wall_time_s"] for w in workers)
    return steps_per_s, updates_per_s


def one_run(cluster: Cluster, mode: str, setup: str, steps: int, index: int, url: str) -> dict:
    name = f"bench-{mode}-{index}-{setup.split(',')[0].replace(' ', '-')}-{len(setup)}"
    flags = ["--mode", mode, "--total-steps", str(steps), "--eval-every", str(10 * steps), "--eval-episodes", "1"]
    proxy, env = None, {}
    if setup == "one host":
        driver = cluster.hosts.start("h0", [sys.executable, "-m", "ddq", "train", "--env", "CartPole-v1", "--workers",
                                            "2", "--no-progress", "--no-dashboard", "--no-celery", "--run-dir",
                                            f"/tmp/{name}", *flags], cluster.hosts.folder / f"{name}.log",
                                     {"PYTHONUNBUFFERED": "1"})
    else:
        if "proxy" in setup:
            delay, jitter = (0.0, 0.0) if "0 ms" in setup else (2.0, 1.0)
            proxied, proxy = latency_proxy_on_h0(cluster, url, delay, jitter, traffic=f"/tmp/{name}-traffic.json")
            env = {"DDQ_REDIS_URL": proxied}
        driver = cluster.start_training(name, *flags, env=env)
    code, summary, log = cluster.finish(name, driver, timeout=900)
    if code != 0:
        raise SystemExit(f"{mode}, {setup}: exit {code}\n{log[-3000:]}")
    steps_per_s, updates_per_s = rates(summary)
    row = {"mode": mode, "setup": setup, "env_steps_per_s": steps_per_s, "updates_per_s": updates_per_s,
           "updates": summary["updates"]}
    if proxy is not None:
        proxy.send_signal(signal.SIGTERM)
        proxy.wait(30)
        traffic = json.loads((cluster.hosts.tmp("h0") / f"{name}-traffic.json").read_text())
        row.update(up_bytes_per_update=traffic["upstream"] / summary["updates"],
                   down_bytes_per_update=traffic["downstream"] / summary["updates"])
    print(json.dumps(row), flush=True)
    return row


def _median(rows: list[dict], key: str) -> float | None:
    return statistics.median(r[key] for r in rows) if key in rows[0] else None


def table(rows: list[dict]) -> str:
    lines = ["| mode | setup | env steps/s | updates/s | bytes/update to Redis | bytes/update from Redis |",
             "|---|---|---|---|---|---|"]
    for mode in ("downpour", "actor-learner"):
        for setup in SETUPS:
            same = [r for r in rows if r["mode"] == mode and r["setup"] == setup]
            if not same:
                continue
            up, down = _median(same, "up_bytes_per_update"), _median(same, "down_bytes_per_update")
            lines.append(f"| {mode} | {setup} | {_median(same, 'env_steps_per_s'):,.0f} | "
                         f"{_median(same, 'updates_per_s'):,.0f} | "
                         f"{'—' if up is None else f'{up:,.0f}'} | {'—' if down is None else f'{down:,.0f}'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8000, help="env steps per run (default 8000)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setup (default 2; the table's "
                                                                "figures are their medians)")
    parser.add_argument("--modes", nargs="+", choices=("downpour", "actor-learner"),
                        default=["downpour", "actor-learner"], help="the modes to run (default both)")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON lines here")
    args = parser.parse_args()
    rows = []
    started = time.time()
    with TestHosts(["h0", "h1", "h2"]) as hosts:
        cluster = Cluster(hosts, deps_only_python(hosts.folder))
        cluster.start()
        url = tls_redis_on_h0(cluster)
        for index in range(args.repeats):
            for mode in args.modes:
                for setup in SETUPS:
                    rows.append(one_run(cluster, mode, setup, args.steps, index, url))
                    cluster.wait_for_workers()
    if args.out:
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"\n{args.repeats} runs of each, {args.steps} env steps each, {time.time() - started:.0f} s in all\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
