"""The dashboard's Flask app: one page, and the read-only JSON API behind it.

Every route is a GET; nothing here can change training. Each request passes
`ddq.dashboard.access` first: a Host of its own, and beyond loopback the run's token. Series endpoints take
`?points=N` (default 500, at most 5000) and downsample to it, so a run of a
million updates costs the page what a short one does.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import sys
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from ddq.dashboard.access import COOKIE, HEADER, Access, token_terminal
from ddq.dashboard.reader import RunNotFound, RunReader, runs_in
from ddq.dashboard.serving import listening_server
from ddq.run_folder import write_whole
from ddq.transport.redis_client import Connection, OutageRetry, StoreError
from ddq.transport.redis_client import connect as connect_redis

DEFAULT_POINTS, MAX_POINTS = 500, 5000

DASHBOARD_OUTAGE_S = 2.0  # a page waits this long for a restarting Redis, then says it is unreachable (503)

API = {
    "/api/run": "the run: env, mode, workers, parameter-server shards, state, counters (env steps, updates, "
                "pushes the shards received, episodes)",
    "/api/returns?points=N": "training episode returns (bucket mean, min, max) and greedy evaluation scores, "
                             "against wall time and env steps",
    "/api/progress?points=N": "once-a-second points: updates/s, env steps/s, pushes/s, loss, mean max-Q, "
                              "epsilon, rejections, and each layer's update/weight ratio",
    "/api/server": "the parameter server now: updates/s, staleness histogram, rejections by reason, "
                   "per-layer weight, gradient and update norms",
    "/api/workers": "one row per worker: state, env steps/s, pushes/s, last heartbeat, restarts",
    "/api/first-layer": "the first layer's weights as grayscale images (base64 bytes)",
    "/api/replay": "the latest greedily evaluated board episode's frames (base64 bytes), or null",
    "/api/live?points=N": "run, returns, progress, server and workers in one answer (what the page polls)",
}


def _finite(value: Any) -> Any:
    """`value` with NaN and infinities as None: JSON has neither, and browsers refuse them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _json(value: Any, status: int = 200) -> Response:
    response = Response(json.dumps(_finite(value), allow_nan=False), status, mimetype="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


def _points() -> int:
    text = request.args.get("points", str(DEFAULT_POINTS))
    if not text.isdigit() or not 2 <= int(text) <= MAX_POINTS:
        raise ValueError(f"points must be a whole number from 2 to {MAX_POINTS}, got {text!r}")
    return int(text)


def create_app(client: Connection, run: str, access: Access | None = None, redis_url: str | None = None) -> Flask:
    """The dashboard of `run`; `access` (default: loopback, no token) says which requests it answers;
    `redis_url`: where `client` connects (the stores of shards started by hand take its password)."""
    app = Flask(__name__, static_folder="static", static_url_path="/static")
    reader = RunReader(client, run, redis_url)
    access = access or Access.for_host("127.0.0.1")

    @app.before_request
    def admit() -> Response | None:
        refused = access.refusal(request.headers.get("Host", ""), request.args.get("token"),
                                 request.cookies.get(COOKIE), request.headers.get(HEADER))
        g.token_in_query = refused is None and access.token is not None and "token" in request.args
        return None if refused is None else _json({"error": refused[1]}, refused[0])

    @app.after_request
    def remember(response: Response) -> Response:
        if g.get("token_in_query"):  # admitted by ?token=: the page's own requests carry it as a cookie
            response.set_cookie(COOKIE, str(access.token), httponly=True, samesite="Strict", secure=True)  # (TLS)
        return response

    routes = {
        "/api/run": reader.overview,
        "/api/returns": lambda: reader.returns(_points()),
        "/api/progress": lambda: reader.progress(_points()),
        "/api/server": reader.server,
        "/api/workers": reader.workers,
        "/api/first-layer": reader.first_layer,
        "/api/replay": reader.replay,
        "/api/live": lambda: reader.live(_points()),
    }
    for path, read in routes.items():
        app.add_url_rule(path, path, lambda read=read: _json(read()), methods=["GET"])

    @app.get("/")
    def page() -> Response:
        return app.send_static_file("index.html")

    @app.get("/api")
    def api() -> Response:
        return _json({"run": run, "endpoints": API})

    @app.errorhandler(ValueError)
    def bad_request(error: ValueError) -> Response:
        return _json({"error": str(error)}, 400)

    @app.errorhandler(RunNotFound)
    def no_run(error: RunNotFound) -> Response:
        return _json({"error": str(error)}, 404)

    @app.errorhandler(StoreError)
    def no_redis(error: StoreError) -> Response:
        return _json({"error": f"Redis is unreachable: {error}"}, 503)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        return _json({"error": error.description}, error.code or 500)

    return app


def pick_run(client: Connection, run: str | None) -> str:
    """`run`, or the only run in this Redis; an error names the runs there when it is ambiguous."""
    if run:
        return run
    runs = runs_in(client)
    if len(runs) != 1:
        if not runs:
            raise ValueError("this Redis holds no run that ddq train started (a parameter server and Baristas "
                             "started by hand record none for the dashboard)")
        raise ValueError(f"give --run: this Redis holds {len(runs)} runs ({', '.join(runs)})")
    return runs[0]


def browsable(host: str) -> str:
    """The bound address as a browser opens it: this host's name for all of its addresses (0.0.0.0 or ::,
    which a browser elsewhere cannot open, and which the dashboard accepts as a Host), an IPv6 address in
    brackets."""
    if host in ("0.0.0.0", "::"):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def serve(redis_url: str, run: str | None, host: str = "127.0.0.1", port: int = 0,
          url_file: str | None = None) -> None:
    """Serves the dashboard of `run` until the process is stopped; prints (and writes) its URL. Beyond
    loopback it shows the URL with the run's token once, on the terminal only (`ddq.dashboard.access`)."""
    access = Access.for_host(host)
    terminal = token_terminal(access)  # no terminal to show a needed token on: refused before anything starts
    client = connect_redis(redis_url, retry=OutageRetry(DASHBOARD_OUTAGE_S))
    run = pick_run(client, run)
    RunReader(client, run).info()  # a wrong run id fails at start, not as a blank page
    # Not a line per request; werkzeug's request lines would also carry a ?token= query.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = create_app(client, run, access, redis_url)
    server, certificate = listening_server(host, port, app, access.token is not None, run)
    url = f"{'https' if certificate else 'http'}://{browsable(host)}:{server.server_port}/"
    print(f"ddq: dashboard of run {run} at {url}", file=sys.stderr, flush=True)
    if terminal is not None:
        print(f"ddq: it listens beyond this host, over TLS with a certificate made for it, which a browser asks you "
              f"to trust: its SHA-256 fingerprint is {certificate}; open {url}?token={access.token} (this token is "
              "shown once, here, and kept nowhere)", file=terminal, flush=True)
    if url_file:
        # without the token: files are for programs, the token for the user; whole, as a program may read it
        # the moment it appears
        write_whole(url_file, url.encode())
    server.serve_forever()
