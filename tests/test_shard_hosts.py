"""Downpour's shards on hosts of their own (`ddq train --shard-hosts by-hand`, `ddq param-server --listen`):
each shard's gradients and weights go over its own host's link, in a Redis there, and not through the
driver's. Three test hosts: h0 runs `ddq train` (its Spark workers on `local[2]` and its Redis, serving the
others over TLS); h1 and h2 each run one shard, started by hand with the command the driver printed."""

from __future__ import annotations

import json
import re
import secrets

import pytest

from conftest import wait_for_progress
from ddq.benchmarks.shard_links import start_run, start_shard
from ddq.benchmarks.testhosts import TestHosts
from ddq.core.agent import model_parameters
from ddq.core.settings import build_config
from ddq.transport.keys import shard_bounds
from hosts import skip_unless_root

pytestmark = [skip_unless_root, pytest.mark.slow]

ENV_STEPS = 6000


def test_each_shard_host_link_carries_its_own_slice_and_the_run_spends_its_budget(tmp_path):
    secret = {"DDQ_REDIS_PASSWORD": secrets.token_urlsafe(16)}
    with TestHosts(["h0", "h1", "h2"]) as hosts:
        log = tmp_path / "train.log"
        driver, url, run = start_run(hosts, log, secret, "--total-steps", str(ENV_STEPS), "--seed", "3")
        assert "$DDQ_REDIS_PASSWORD" in url and secret["DDQ_REDIS_PASSWORD"] not in log.read_text()
        before = {host: hosts.link_bytes(host) for host in ("h1", "h2")}
        shards = [start_shard(hosts, f"h{k + 1}", k, url, run, tmp_path / f"shard{k}.log", secret) for k in range(2)]
        assert driver.wait(300) == 0, log.read_text()[-3000:]
        for k, shard in enumerate(shards):  # each stops with the run, after its final snapshot
            assert shard.wait(60) == 0, (tmp_path / f"shard{k}.log").read_text()[-2000:]
        received = {host: hosts.link_bytes(host)[0] - before[host][0] for host in ("h1", "h2")}
        summary = json.loads((hosts.tmp("h0") / "run" / "summary.json").read_text())
        assert not hosts.pids("h1") and not hosts.pids("h2")  # each shard's own Redis stopped with it
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= ENV_STEPS
    account = summary["account"]
    assert account["shards_agree"] and account["repeats"] == 0
    pushes = account["applied"]  # every gradient sent was applied once, by both shards
    assert pushes > 50 and all(w["applied"] == w["sent"] for w in account["workers"])
    size = model_parameters(build_config({"env": "CartPole-v1", "mode": "downpour"}).agent).size
    slices = [end - start for start, end in shard_bounds(size, 2)]
    for k, host in enumerate(("h1", "h2")):
        own, other = 4 * pushes * slices[k], 4 * pushes * slices[1 - k]
        # every gradient's slice for this shard came in over this host's link, and the other shard's did not
        assert own <= received[host] < own + other / 2, (host, received, own, other)


def test_a_crashed_shard_host_started_again_by_hand_resumes_from_its_snapshot_and_the_run_ends_well(tmp_path):
    """Every process of h2 (shard 1 and its Redis) killed at once mid-run, then shard 1 started again there
    with the same command: a new port and certificate authority, which the workers find in its registration.
    It resumes from its snapshot in the run's Redis (every 25 updates here); what it applied since is lost,
    and the summary says so: the shards' versions and accounts differ."""
    secret = {"DDQ_REDIS_PASSWORD": secrets.token_urlsafe(16)}
    with TestHosts(["h0", "h1", "h2"]) as hosts:
        log = tmp_path / "train.log"
        driver, url, run = start_run(hosts, log, secret, "--algo", "dqn", "--total-steps", "9000",
                                     "--snapshot-every", "25", "--seed", "4")
        first = [start_shard(hosts, f"h{k + 1}", k, url, run, tmp_path / f"shard{k}.log", secret) for k in range(2)]
        wait_for_progress(hosts.tmp("h0") / "run", driver, log, 3000)  # past learning_starts: updates applied
        hosts.crash("h2")
        again = start_shard(hosts, "h2", 1, url, run, tmp_path / "shard1.log", secret)
        assert driver.wait(300) == 0, log.read_text()[-3000:]
        for shard in (first[0], again):
            assert shard.wait(60) == 0, (tmp_path / "shard1.log").read_text()[-2000:]
        summary = json.loads((hosts.tmp("h0") / "run" / "summary.json").read_text())
        resumed = re.search(r"shard 1 resumed from its snapshot at version (\d+)", (tmp_path / "shard1.log").read_text())
    assert summary["stop_reason"] == "step budget spent" and summary["env_steps"] >= 9000
    assert resumed and int(resumed.group(1)) > 0
    account = summary["account"]
    assert not account["shards_agree"] and account["versions"][1] < account["versions"][0]
