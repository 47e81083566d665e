"""A long-lived Barista behind a small HTTP server on 127.0.0.1, driven by hand or by Spark tasks.

Its replay memory outlives any one request, so a sequence of short Spark
stages (or a person with `ddq dummy-client`) can drive the same worker. The
API takes and returns JSON only:

    GET  /status             the worker's statistics
    POST /step {"steps": N}  play and learn N env steps (gradients go to the parameter server)
    POST /shutdown           finish and exit
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ddq.workers.barista import Barista

MAX_REQUEST_BYTES = 4096
MAX_STEPS_PER_REQUEST = 10_000_000


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


class _Handler(BaseHTTPRequestHandler):
    server: BaristaServer

    def log_message(self, format: str, *args) -> None:  # quiet: the dummy client prints what matters
        pass

    def _reply(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _request_json(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            raise ValueError(f"request body over {MAX_REQUEST_BYTES} bytes")
        body = json.loads(self.rfile.read(length) or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def do_GET(self) -> None:
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
        except (ValueError, json.JSONDecodeError) as error:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": str(error)})
