"""ddq's Redis connections against a real redis-server that is killed: they wait out a restart, and stop
waiting at once when told the server is gone for good."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from ddq.transport.redis_client import connect, give_up_waiting
from ddq.transport.redis_server import EmbeddedRedis


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
