"""The test hosts themselves: separate networks joined by one link, separate /tmp, everything removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ddq.benchmarks.testhosts import TestHosts, _ip, deps_only_python
from hosts import skip_unless_root

pytestmark = skip_unless_root


def reaches(hosts: TestHosts, source: str, target: str, port: int = 8765) -> bool:
    code = f"import socket; socket.create_connection(({hosts.address(target)!r}, {port}), 1).close()"
    return hosts.run(source, [sys.executable, "-c", code]).returncode == 0


def child_pids(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # gone meanwhile
        return ""


def test_hosts_reach_each_other_on_their_link_and_nothing_else_and_leave_nothing_behind():
    with TestHosts(["h0", "h1"]) as hosts:
        tag = hosts.tag
        hosts.start("h1", [sys.executable, "-m", "http.server", "8765", "--bind", hosts.address("h1")])
        deadline = time.monotonic() + 30
        while not reaches(hosts, "h0", "h1"):
            assert time.monotonic() < deadline, "h0 never reached h1's server"
        assert hosts.run("h0", ["ip", "route"]).stdout.split()[0] == "198.18.74.0/24"  # no way out
        probe = hosts.start("h1", ["sh", "-c", "echo secret > /tmp/only-h1 && sleep 60"])
        deadline = time.monotonic() + 30
        while not (hosts.tmp("h1") / "only-h1").exists():
            assert time.monotonic() < deadline, "h1's shell never wrote its file"
            time.sleep(0.05)
        assert (hosts.tmp("h1") / "only-h1").exists() and not (hosts.tmp("h0") / "only-h1").exists()
        assert hosts.run("h0", ["sh", "-c", "test ! -e /tmp/only-h1"]).returncode == 0
        core = max(os.sched_getaffinity(0))  # a one-core host: it, and what it starts, run on that core alone
        pinned = hosts.start("h0", ["sh", "-c", "sleep 60 & wait"], core=core)
        deadline = time.monotonic() + 30
        while not (sleeps := [pid for pid in child_pids(pinned.pid) if comm(pid) == "sleep"]):
            assert time.monotonic() < deadline, "the pinned shell never started its sleep"
            time.sleep(0.01)  # (its host's /tmp is mounted first, by a child of its own)
        for pid in [pinned.pid, sleeps[0]]:
            assert os.sched_getaffinity(pid) == {core}
        hosts.link_down("h1")
        assert not reaches(hosts, "h0", "h1")
        hosts.link_up("h1")
        deadline = time.monotonic() + 30
        while not reaches(hosts, "h0", "h1"):
            assert time.monotonic() < deadline, "the link did not come back"
        assert probe.poll() is None and hosts.pids("h1")  # a cut link ends no process of its host
        hosts.crash("h1")
        probe.wait(10)
        assert hosts.pids("h1") == []
    assert not [name for name in _ip("netns", "list").stdout.split() if name.startswith(tag)]
    assert not hosts.folder.exists() and probe.poll() is not None


def test_the_deps_only_python_has_ddqs_dependencies_and_not_ddq(tmp_path):
    with TestHosts(["h0"]) as hosts:
        python = deps_only_python(hosts.folder)
        assert subprocess.run([str(python), "-c", "import torch, gymnasium, redis"]).returncode == 0
        missing = subprocess.run([str(python), "-c", "import ddq"], capture_output=True, text=True)
        assert missing.returncode != 0 and "No module named 'ddq'" in missing.stderr
