"""How the dashboard listens: a threaded WSGI server whose connections time out, and beyond loopback only TLS,
with a certificate made for it whose fingerprint the user checks in the browser's warning."""

from __future__ import annotations

import hashlib
import socket
import ssl
import tempfile
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from ddq.transport.tls import make_server_certificates

# A connection silent this long is closed: a client that never finishes its request (or its TLS handshake)
# held a server thread for good. The page asks every second or two, so a live one is never cut.
CONNECTION_TIMEOUT_S = 30.0


class _TimedHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S  # each read and write on the connection (socketserver's setup sets it)


def listening_server(host: str, port: int, app: Any, tls: bool, run: str) -> tuple[BaseWSGIServer, str | None]:
    """The server for `app` (run `run`'s dashboard) on host:port, and with `tls` the SHA-256 fingerprint of the
    certificate it serves (made for this host's names and `host`; its key is kept in memory only)."""
    server = make_server(host, port, app, threaded=True, request_handler=_TimedHandler)
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
