"""ddq's Redis connections against a real redis-server that is killed: they wait out a restart, and stop
waiting at once when told the server is gone for good."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis

from ddq.transport.redis_client import connect, give_up_waiting
from ddq.transport.redis_server import EmbeddedRedis, sweep_abandoned_folders
from ddq.transport.run_store import RunStore


def test_a_command_waits_out_a_restart_and_fails_at_once_once_the_server_is_gone_for_good(tmp_path):
    with EmbeddedRedis(log_dir=tmp_path, persist=tmp_path / "redis") as server:  # as a run's private Redis
        client = connect(server.url)
        client.set("kept", 1)
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        counted: list[int] = []
        waiting = threading.Thread(target=lambda: counted.append(client.incr("counted")))
        waiting.start()
        time.sleep(1.0)  # the fault: a second without a server
        assert waiting.is_alive() and counted == []  # the command waits, neither failing nor done
        server.restart()  # as the driver's supervisor does (from this thread: the server dies with its parent's)
        waiting.join()
        assert counted == [1]  # the command waited for the restarted server

        os.kill(server.process.pid, signal.SIGKILL)  # and now it stays dead
        server.process.wait()
        threading.Timer(1.0, give_up_waiting, [client]).start()
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            client.get("kept")
        assert 1.0 <= time.monotonic() - started < 5.0  # not the 30 s an outage may last
        with pytest.raises(redis.ConnectionError):
            client.get("kept")  # every later command too, on a new connection as well


def test_counts_a_redis_restart_rolled_back_are_raised_to_the_drivers_and_a_workers_later_count_kept(tmp_path):
    """A private Redis killed and restarted from its snapshot counts env steps and episodes from the snapshot;
    the workers read their budgets there, so the driver raises both back to what it had read."""
    with EmbeddedRedis(log_dir=tmp_path, persist=tmp_path / "redis") as server:
        store = RunStore(connect(server.url), "r")
        store.add_env_steps(1_000)
        store.set_episode_count(10)
        store.client.save()  # the snapshot the restart loads
        store.add_env_steps(500)  # counted after it, and read by the driver: 1,500 steps, 13 episodes
        store.set_episode_count(13)
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        server.restart()
        assert (store.env_steps(), store.episode_count()) == (1_000, 10)  # rolled back
        assert store.counts_at_least(1_500, 13) == 1_500 and store.episode_count() == 13
        store.add_env_steps(7)  # a worker's count after that is kept: the counts only rise
        assert store.counts_at_least(1_500, 12) == 1_507 and store.episode_count() == 13


def test_a_private_redis_whose_snapshot_fails_refuses_writes_rather_than_go_on_unsaved(tmp_path):
    """Its RDB cannot be written (here its name is taken by a folder, as a full disk fails it): Redis refuses
    writes until a snapshot succeeds, so a later restart cannot load an old snapshot without a word. With
    `stop-writes-on-bgsave-error no` it went on taking writes it would lose."""
    with EmbeddedRedis(log_dir=tmp_path, persist=tmp_path / "redis") as server:
        (tmp_path / "redis" / "redis.rdb" / "taken").mkdir(parents=True)  # the rename onto the RDB fails
        client = connect(server.url)
        client.set("ddq:disk:probe", b"1")  # a change, so the next periodic snapshot is due
        deadline = time.monotonic() + 20
        with pytest.raises(redis.ResponseError, match="MISCONF"):
            while time.monotonic() < deadline:
                client.set("ddq:disk:probe", b"2")
                time.sleep(0.2)
        client.close()


@pytest.mark.slow
def test_a_run_whose_redis_cannot_save_its_snapshot_ends_with_one_line(tmp_path):
    """The disk under the run's Redis fills mid-run: Redis refuses writes, and the run ends saying so in one
    line that names the log to read, not with Redis' four sentences."""
    run_dir = tmp_path / "run"
    train = subprocess.Popen([sys.executable, "-m", "ddq", "train", "--mode", "downpour", "--workers", "1", "--env",
                              "CartPole-v1", "--total-steps", "10000000", "--time-budget-s", "150", "--no-celery",
                              "--no-dashboard", "--no-progress", "--run-dir", str(run_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        rdb = run_dir / "redis" / "redis.rdb"
        deadline = time.monotonic() + 120
        while not rdb.is_file():
            assert train.poll() is None and time.monotonic() < deadline, "the run's Redis saved no snapshot"
            time.sleep(0.2)
        while not (rdb / "taken").is_dir():  # its next snapshot fails, as on a full disk
            rdb.unlink(missing_ok=True)
            try:
                (rdb / "taken").mkdir(parents=True)
            except (FileExistsError, NotADirectoryError):  # a snapshot of Redis's own landed in between: again
                pass
        _, err = train.communicate(timeout=300)
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
    assert train.returncode == 1, err[-3000:]
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == [f"ddq: error: the run cannot go on: the run's Redis cannot save its snapshot (a full disk?) "
                      f"and refuses writes until it can; see {run_dir / 'redis.log'}"], err[-3000:]
    assert "Traceback" not in err


def test_the_folders_of_servers_whose_owner_was_killed_are_swept_and_a_live_ones_kept():
    """A private Redis's folder outlives an owner killed with SIGKILL (its log; a dashboard's copy of a run's
    telemetry): the next start removes those whose owner has exited and whose socket is gone or refuses. A
    live owner's stays, its server restarting or not, and so does a folder whose server still answers."""
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait()  # an owner that has exited
    # a short folder of its own: a socket's path has at most 107 bytes, which pytest's tmp_path can pass
    with EmbeddedRedis() as live, tempfile.TemporaryDirectory(prefix="sweep-") as temp:
        tmp_path = Path(temp)
        folders = {name: tmp_path / f"ddq-redis-{pid}_{name}" for name, pid in (
            ("gone", gone.pid), ("refusing", gone.pid), ("answering", gone.pid), ("restarting", os.getpid()))}
        folders["no-pid"] = tmp_path / "ddq-redis-abc_no-pid"
        for folder in folders.values():
            folder.mkdir()
        (folders["gone"] / "redis.log").write_text("the owner was killed\n")
        for name in ("refusing", "restarting"):  # a socket file nothing listens on
            with socket.socket(socket.AF_UNIX) as dead:
                dead.bind(str(folders[name] / "redis.sock"))
        (folders["answering"] / "redis.sock").symlink_to(live.socket_path)
        sweep_abandoned_folders(tmp_path)
        assert sorted(path.name.split("_", 1)[1] for path in tmp_path.iterdir()) == ["answering", "no-pid",
                                                                                    "restarting"]
        assert live.folder.name.startswith(f"ddq-redis-{os.getpid()}_")  # its owner, named for the sweep
        assert redis.Redis(unix_socket_path=str(live.socket_path)).ping()
