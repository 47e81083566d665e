"""The dashboard's server against clients that hold its connections: one that trickles its request (never
silent long enough for the connection's timeout) and one that opens many. A real server on loopback, in this
process, answering a one-line WSGI app."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time

import pytest

from ddq.dashboard import serving


def _hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]


@pytest.fixture
def server():
    server, _ = serving.listening_server("127.0.0.1", 0, _hello, tls=False, run="test")
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)
    assert not thread.is_alive() and not server.deadlines.thread.is_alive()


def _answer(port: int, source: str = "127.0.0.1") -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        connection.request("GET", "/")
        return connection.getresponse().status
    finally:
        connection.close()


def _closed_by_server(sock: socket.socket, within_s: float = 10.0) -> bool:
    """Whether the server closes `sock` (its read ends) within `within_s`."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_client_trickling_its_request_is_cut_at_the_exchange_deadline(server, monkeypatch):
    """A byte every 0.2 s never lets the connection's 30 s timeout fire: the deadline on the whole exchange
    shuts it, and the server answers others meanwhile and after."""
    monkeypatch.setattr(serving, "EXCHANGE_DEADLINE_S", 1.5)
    port = server.server_port
    with socket.create_connection(("127.0.0.1", port)) as trickler:
        started = time.monotonic()
        trickler.sendall(b"GET / HTTP/1.1\r\n")
        cut = False
        while not cut and time.monotonic() - started < 20:
            with contextlib.suppress(OSError):  # a write to a connection the server shut
                trickler.sendall(b"X")
            cut = _closed_by_server(trickler, within_s=0.2)
        assert cut, "a trickling client kept its connection for 20 s"
        assert time.monotonic() - started >= 1.5 - 0.1  # cut by the deadline, not before
        assert _answer(port) == 200
    deadline = time.monotonic() + 10  # once the server sees the answered client gone, no deadline is left behind
    while server.deadlines.due:
        assert time.monotonic() < deadline, f"deadlines left: {server.deadlines.due}"
        time.sleep(0.05)


def test_one_client_holds_at_most_max_per_client_connections_and_another_is_still_served(server):
    port = server.server_port
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(serving.MAX_PER_CLIENT)]
    try:
        with socket.create_connection(("127.0.0.1", port)) as one_more:
            assert _closed_by_server(one_more)  # closed as it came, unanswered
        assert _answer(port, source="127.0.0.2") == 200  # another address: a slot of its own
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 30  # each thread sees its client gone and gives its slot back
    while server.per_client:
        assert time.monotonic() < deadline, f"slots still held: {server.per_client}"
        time.sleep(0.05)
    assert _answer(port) == 200
