"""A long-lived Barista behind a small HTTP server on 127.0.0.1, driven by hand or by Spark tasks.

Its replay memory outlives any one request, so a sequence of short Spark
stages (or a person with `ddq dummy-client`) can drive the same worker. The
API takes and returns JSON only:

    GET  /status             the worker's statistics
    POST /step {"steps": N}  play and learn N env steps (gradients go to the parameter server)
    POST /shutdown           finish and exit

Any web page the user opens can send requests to 127.0.0.1, so a POST must say
`Content-Type: application/json` (which a page cannot send across sites without
the browser asking first) and carry no `Origin` but the server's own; the Host
must name the server (127.0.0.1 or localhost and its port: a DNS-rebound name is
refused). Bodies are bounded, and a socket that stalls is given up after
REQUEST_TIMEOUT_S, so no request holds a thread past the server's shutdown.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ddq.transport.redis_client import StoreError
from ddq.workers.barista import Barista

MAX_REQUEST_BYTES = 4096
MAX_STEPS_PER_REQUEST = 10_000_000
REQUEST_TIMEOUT_S = 5.0  # for reading a request or writing an answer; a step itself may take longer


class Refused(Exception):
    """A request refused before its body is read: the status says why."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class BaristaServer(ThreadingHTTPServer):
    # Request threads are joined on close, not abandoned: a thread still inside torch or a socket
    # while the interpreter finalizes can abort the process.
    daemon_threads = False
    block_on_close = True

    def __init__(self, barista: Barista, port: int = 0):
        super().__init__(("127.0.0.1", port), _Handler)
        self.barista = barista
        self.lock = threading.Lock()  # one request drives the worker at a time

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def names(self) -> tuple[str, ...]:
        """The Host (and origins, with the scheme) a request to this server may name."""
        return tuple(f"{host}:{self.server_address[1]}" for host in ("127.0.0.1", "localhost"))


class _Handler(BaseHTTPRequestHandler):
    server: BaristaServer
    timeout = REQUEST_TIMEOUT_S  # socket reads and writes: a stalled client cannot hold a thread or shutdown

    def log_message(self, format: str, *args) -> None:  # quiet: the dummy client prints what matters
        pass

    def _reply(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _check_host(self) -> None:
        if self.headers.get("Host", "") not in self.server.names():
            raise Refused(HTTPStatus.FORBIDDEN, f"Host {self.headers.get('Host')!r} does not name this server; "
                                                f"use {self.server.url}")

    def _request_json(self) -> dict:
        """The body as a JSON object, once the headers show a request from this host's own programs."""
        self._check_host()
        origin = self.headers.get("Origin")
        if origin is not None and origin not in tuple(f"http://{name}" for name in self.server.names()):
            raise Refused(HTTPStatus.FORBIDDEN, f"requests from origin {origin!r} are refused; this server "
                                                "takes requests from programs on this host (no Origin)")
        kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            raise Refused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Type {kind or 'none'!r}: this server "
                                                             "takes application/json only")
        text = (self.headers.get("Content-Length") or "0").strip()
        if not text.isdigit():  # a negative length would read until the client hangs up
            raise Refused(HTTPStatus.BAD_REQUEST, f"Content-Length {text!r}: expected a whole number of bytes")
        if int(text) > MAX_REQUEST_BYTES:
            raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a body of {text} bytes; this server takes at "
                                                               f"most {MAX_REQUEST_BYTES}")
        try:
            body = json.loads(self.rfile.read(int(text)) or b"{}")
        except RecursionError:  # 4 kB of brackets nests deeper than the decoder's stack
            raise ValueError("the request body nests too deep") from None
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def do_GET(self) -> None:
        try:
            self._check_host()
        except Refused as refused:
            return self._reply(refused.status, {"error": str(refused)})
        if self.path != "/status":
            return self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}; try /status"})
        self._reply(HTTPStatus.OK, asdict(self.server.barista.stats))

    def do_POST(self) -> None:
        try:
            body = self._request_json()
            if self.path == "/step":
                steps = body.get("steps", 1)
                if not isinstance(steps, int) or isinstance(steps, bool) or not 0 < steps <= MAX_STEPS_PER_REQUEST:
                    raise ValueError(f"steps must be an integer in 1..{MAX_STEPS_PER_REQUEST}, got {steps!r}")
                with self.server.lock:
                    stats = self.server.barista.advance(steps)
                return self._reply(HTTPStatus.OK, asdict(stats))
            if self.path == "/shutdown":
                self._reply(HTTPStatus.OK, {"state": "shutting down"})
                threading.Thread(target=self.server.shutdown, name="shutdown").start()
                return None
            self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}; try /step or /shutdown"})
        except Refused as refused:
            self.close_connection = True  # the body, if any, stays unread
            self._reply(refused.status, {"error": str(refused)})
        except (ValueError, json.JSONDecodeError) as error:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        except (RuntimeError, ConnectionError, StoreError) as error:  # the run's parts, not the request: no weights
            # served yet, or the run's Redis out of reach
            self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"the worker could not step: {error}"})
