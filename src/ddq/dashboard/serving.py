"""How the dashboard listens: a threaded WSGI server whose connections time out, and beyond loopback only TLS,
with a certificate made for it whose fingerprint the user checks in the browser's warning."""

from __future__ import annotations

import hashlib
import socket
import ssl
import tempfile
import threading
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


class _TimedHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S  # each read and write on the connection (socketserver's setup sets it)


class _BoundedServer(ThreadedWSGIServer):
    """werkzeug's threaded server, serving at most MAX_CONNECTIONS connections at once."""

    def __init__(self, host: str, port: int, app: Any):
        super().__init__(host, port, app, handler=_TimedHandler)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to give the slot back
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


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
