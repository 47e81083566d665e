"""How the dashboard listens: a threaded WSGI server whose connections time out and whose exchanges have a
deadline, a bounded number of connections (and fewer per client), and beyond loopback only TLS, with a
certificate made for it whose fingerprint the user checks in the browser's warning."""

from __future__ import annotations

import contextlib
import hashlib
import socket
import ssl
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from werkzeug.serving import BaseWSGIServer, ThreadedWSGIServer, WSGIRequestHandler

from ddq.transport.tls import make_server_certificates

# A connection silent this long is closed: a client that never finishes its request (or its TLS handshake)
# held a server thread for good. The page asks every second or two, so a live one is never cut.
CONNECTION_TIMEOUT_S = 30.0
# The most connections served at once (a thread each); one more is closed as it comes: the threads are made
# before a request's token is checked, so without a bound anyone reaching the port could make them by the
# thousand. A page holds a few.
MAX_CONNECTIONS = 64
# The most of them one client address holds: one client sending a byte every 29 s on each of its connections
# (never silent for CONNECTION_TIMEOUT_S) would otherwise hold every slot, the token's holder locked out.
MAX_PER_CLIENT = 16
# A request's whole exchange, from the wait for its first byte (its TLS handshake's, on a new connection) to
# its answer written: past it the connection is shut, however steadily its client trickles. The page's own
# take milliseconds.
EXCHANGE_DEADLINE_S = 60.0


class Deadlines:
    """Connections' deadlines, watched by one thread: a connection past its own is shut (its reads and writes
    then fail, and its thread ends). Started with its server, stopped by `stop`."""

    def __init__(self, every_s: float = 0.5):
        self.lock = threading.Lock()
        self.due: dict[socket.socket, float] = {}
        self.stopped = threading.Event()
        self.every_s = every_s
        self.thread = threading.Thread(target=self._watch, name="dashboard-deadlines", daemon=True)
        self.thread.start()

    def arm(self, connection: socket.socket, seconds: float) -> None:
        with self.lock:
            self.due[connection] = time.monotonic() + seconds

    def disarm(self, connection: socket.socket) -> None:
        with self.lock:
            self.due.pop(connection, None)

    def _watch(self) -> None:
        while not self.stopped.wait(self.every_s):
            now = time.monotonic()
            with self.lock:
                late = [connection for connection, due in self.due.items() if due < now]
                for connection in late:
                    del self.due[connection]
            for connection in late:
                with contextlib.suppress(OSError):  # closed meanwhile
                    # the plain socket's shutdown: an SSLSocket's own drops its TLS state under the reading thread
                    socket.socket.shutdown(connection, socket.SHUT_RDWR)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()  # within `every_s`


class _TimedHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S  # each read and write on the connection (socketserver's setup sets it)

    def handle_one_request(self) -> None:
        deadlines: Deadlines = self.server.deadlines  # type: ignore[attr-defined]
        deadlines.arm(self.connection, EXCHANGE_DEADLINE_S)
        try:
            super().handle_one_request()
        finally:
            deadlines.disarm(self.connection)


class _BoundedServer(ThreadedWSGIServer):
    """werkzeug's threaded server, serving at most MAX_CONNECTIONS connections at once, MAX_PER_CLIENT of one
    client address, each exchange within EXCHANGE_DEADLINE_S."""

    def __init__(self, host: str, port: int, app: Any):
        self.per_client: dict[str, int] = {}  # connections served, by client address
        self.per_client_lock = threading.Lock()
        self.deadlines = Deadlines()  # before werkzeug's bind, whose failure calls server_close
        super().__init__(host, port, app, handler=_TimedHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._take_slot(client_address[0]):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to give the slot back
            self._give_slot(client_address[0])
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give_slot(client_address[0])

    def _take_slot(self, client: str) -> bool:
        with self.per_client_lock:
            held = self.per_client.get(client, 0)
            if held >= MAX_PER_CLIENT or sum(self.per_client.values()) >= MAX_CONNECTIONS:
                return False
            self.per_client[client] = held + 1
            return True

    def _give_slot(self, client: str) -> None:
        with self.per_client_lock:
            self.per_client[client] -= 1
            if not self.per_client[client]:
                del self.per_client[client]

    def server_close(self) -> None:
        self.deadlines.stop()
        super().server_close()


def listening_server(host: str, port: int, app: Any, tls: bool, run: str) -> tuple[BaseWSGIServer, str | None]:
    """The server for `app` (run `run`'s dashboard) on host:port, and with `tls` the SHA-256 fingerprint of the
    certificate it serves (made for this host's names and `host`; its key is kept in memory only)."""
    server = _BoundedServer(host, port, app)
    if not tls:
        return server, None
    names = sorted({host, socket.gethostname(), socket.getfqdn(), "127.0.0.1", "localhost"} - {"0.0.0.0", "::"})
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="ddq-dashboard-tls-") as folder:  # 0700, gone once loaded
        made = make_server_certificates(Path(folder), names, run, server="dashboard")
        context.load_cert_chain(made.cert_file, made.key_file)
        certificate = x509.load_pem_x509_certificate(made.cert_file.read_bytes())
    # the handshake happens on the connection's first read, in its own thread and under its timeout: done in
    # accept, as by default, one silent client would hold every other's
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    server.ssl_context = context  # (werkzeug's: requests' url scheme is https)
    return server, fingerprint(certificate)


def fingerprint(certificate: x509.Certificate) -> str:
    """SHA-256 of the certificate's DER bytes, as browsers show it: hex pairs joined by colons."""
    digest = hashlib.sha256(certificate.public_bytes(Encoding.DER)).hexdigest().upper()
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))
