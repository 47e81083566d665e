"""The latency proxy the cross-host tests and benches put in front of Redis: its delay, and SIGUSR1's switch."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

DELAY_MS = 200  # each way: a round trip through the proxy takes at least 0.4 s while it delays


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback TCP server that sends back what it reads, on a free port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server:
            connection, _ = server.accept()
            with connection:
                while data := connection.recv(1024):
                    connection.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    thread.join(10)


def round_trip(client: socket.socket) -> float:
    started = time.monotonic()
    client.sendall(b"ping")
    assert client.recv(1024) == b"ping"
    return time.monotonic() - started


def test_the_proxy_starts_with_its_delay_off_and_sigusr1_turns_it_on(echo_port):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proxy = subprocess.Popen([sys.executable, "-m", "ddq.benchmarks.latency_proxy", "--listen", f"127.0.0.1:{port}",
                              "--to", f"127.0.0.1:{echo_port}", "--delay-ms", str(DELAY_MS), "--off"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert "(off until SIGUSR1)" in proxy.stdout.readline()  # listening
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            assert round_trip(client) < 2 * DELAY_MS / 1e3
            proxy.send_signal(signal.SIGUSR1)
            assert proxy.stdout.readline().strip() == "latency proxy: delay on"
            assert round_trip(client) >= 2 * DELAY_MS / 1e3  # on the connection already open too
    finally:
        proxy.terminate()
        proxy.wait(30)
