"""What shards on hosts of their own buy when the parameter server's link is the bottleneck (`ddq bench
shard-links`, root): downpour with 2 shards started by hand, both on one host's link or each on a host of its
own, every shard host's link held to a rate by tbf both ways. Test hosts: h0 runs `ddq train` (its workers on
`local[2]`, its Redis serving the others over TLS); h1 and h2 are shard hosts.

The same processes run in both layouts, on the same cores; only the links the shards' bytes cross differ.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from ddq.benchmarks.testhosts import TestHosts

START = re.compile(r"DDQ_REDIS_URL='([^']+)' ddq param-server --run (\S+) --shard K --listen ADDR")
LAYOUTS = {"one link": ("h1", "h1"), "two links": ("h1", "h2")}  # the host of shard 0 and of shard 1


def printed_command(log: Path, driver: subprocess.Popen, timeout: float = 180) -> tuple[str, str]:
    """The run's Redis URL and run id in the command the driver printed for shards started by hand."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = START.search(log.read_text()) if log.exists() else None
        if found:
            return found.group(1), found.group(2)
        if driver.poll() is not None:
            raise RuntimeError(f"ddq train exited before it printed the shards' command:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"no command for the shards within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def start_run(hosts: TestHosts, log: Path, secret: dict[str, str], *train: str) -> tuple[subprocess.Popen, str, str]:
    """`ddq train` on h0, downpour with 2 shards started by hand, into h0's /tmp/run: its process, the Redis
    URL it printed for the shards, and the run id."""
    driver = hosts.start("h0", [sys.executable, "-m", "ddq", "train", "--env", "CartPole-v1", "--mode", "downpour",
                                "--shards", "2", "--shard-hosts", "by-hand", "--no-celery", "--no-dashboard",
                                "--no-progress", "--listen", hosts.address("h0"), "--run-dir", "/tmp/run", *train],
                         log, env=secret)
    return (driver, *printed_command(log, driver))


def start_shard(hosts: TestHosts, host: str, shard: int, url: str, run: str, log: Path,
                secret: dict[str, str]) -> subprocess.Popen:
    """Shard `shard` started by hand on `host`, with the command the driver printed."""
    return hosts.start(host, [sys.executable, "-m", "ddq", "param-server", "--run", run, "--shard", str(shard),
                              "--listen", hosts.address(host)], log, env={**secret, "DDQ_REDIS_URL": url})


@dataclass
class Outcome:
    layout: str
    seed: int
    env_steps_per_s: float  # between the run's first and last training points
    updates_per_s: float


def rates(metrics: Path) -> tuple[float, float]:
    """Env steps and updates a second between the first training point with an update and the last."""
    points = [p for p in map(json.loads, metrics.read_text().splitlines()) if p.get("kind") == "train"]
    points = [p for p in points if p.get("updates", 0) > 0]
    first, last = points[0], points[-1]
    seconds = last["wall_time_s"] - first["wall_time_s"]
    return (last["env_steps"] - first["env_steps"]) / seconds, (last["updates"] - first["updates"]) / seconds


def one_run(hosts: TestHosts, layout: str, seed: int, env_steps: int, folder: Path) -> Outcome:
    secret = {"DDQ_REDIS_PASSWORD": secrets.token_urlsafe(16)}
    log = folder / f"{layout.replace(' ', '-')}-{seed}.log"
    driver, url, run = start_run(hosts, log, secret, "--total-steps", str(env_steps), "--seed", str(seed))
    shards = [start_shard(hosts, host, k, url, run, log.with_suffix(f".shard{k}"), secret)
              for k, host in enumerate(LAYOUTS[layout])]
    if driver.wait(600) != 0:
        raise RuntimeError(f"ddq train failed:\n{log.read_text()[-3000:]}")
    for shard in shards:
        shard.wait(60)
    outcome = Outcome(layout, seed, *rates(hosts.tmp("h0") / "run" / "metrics.jsonl"))
    shutil.rmtree(hosts.tmp("h0") / "run")  # the next run's folder
    return outcome


def run_bench(seeds: list[int], rate_mbit: float, env_steps: int, folder: Path) -> list[Outcome]:
    """Each seed in each layout, the layouts taking turns; every shard host's link held to `rate_mbit`."""
    folder.mkdir(parents=True, exist_ok=True)
    outcomes = []
    with TestHosts(["h0", "h1", "h2"]) as hosts:
        for host in ("h1", "h2") if rate_mbit > 0 else ():
            hosts.limit_link(host, rate_mbit)
        for seed in seeds:
            for layout in LAYOUTS:
                outcomes.append(one_run(hosts, layout, seed, env_steps, folder))
                print(f"ddq: {layout}, seed {seed}: {outcomes[-1].env_steps_per_s:.0f} env steps/s, "
                      f"{outcomes[-1].updates_per_s:.1f} updates/s", file=sys.stderr, flush=True)
    return outcomes


def table(outcomes: list[Outcome], rate_mbit: float, env_steps: int) -> str:
    seeds = sorted({o.seed for o in outcomes})
    lines = [f"Downpour, CartPole-v1 (PQN), 2 workers on h0, 2 shards started by hand, {env_steps:,} env steps; "
             + (f"each shard host's link held to {rate_mbit:g} Mbit/s each way (tbf)" if rate_mbit > 0
                else "the links as they are (veth pairs, no limit)") + f", seeds {seeds}, the layouts "
             "taking turns, one run at a time", "",
             "| shards' links | env steps/s, median (range) | updates/s, median (range) |", "|---|---|---|"]
    for layout in LAYOUTS:
        mine = [o for o in outcomes if o.layout == layout]
        steps, updates = [o.env_steps_per_s for o in mine], [o.updates_per_s for o in mine]
        lines.append(f"| {layout} | {median(steps):.0f} ({min(steps):.0f}-{max(steps):.0f}) | "
                     f"{median(updates):.1f} ({min(updates):.1f}-{max(updates):.1f}) |")
    one = median(o.updates_per_s for o in outcomes if o.layout == "one link")
    two = median(o.updates_per_s for o in outcomes if o.layout == "two links")
    lines += ["", f"two links / one link, updates/s (medians): {two / one:.2f}x"]
    return "\n".join(lines)
