"""The driver's dashboard: a `ddq dashboard` child process on 127.0.0.1, stopped with the run."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from ddq.config import REDIS_URL_ENV
from ddq.processes import Supervisor, spawn, stop

START_TIMEOUT_S = 60.0


@contextlib.contextmanager
def serve_dashboard(redis_url: str, run: str, run_dir: Path, port: int | None = None,
                    supervisor: Supervisor | None = None) -> Iterator[str | None]:
    """Starts the dashboard (a free port unless `port`), prints its URL, and stops it on exit.

    It runs in its own process at background priority, so serving the page neither holds the
    driver's interpreter nor takes CPU time the workers want. If it cannot start, training goes
    on without it, with a warning."""
    url_file = run_dir.resolve() / "dashboard.url"
    url_file.unlink(missing_ok=True)
    process = spawn([sys.executable, "-m", "ddq", "dashboard", "--run", run, "--port", str(port or 0),
                     "--url-file", str(url_file)], run_dir / "dashboard.log", env={REDIS_URL_ENV: redis_url},
                    background=True)
    url = None
    deadline = time.monotonic() + START_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline and not url_file.is_file():
        time.sleep(0.05)
    if url_file.is_file():
        url = url_file.read_text()
        print(f"ddq: dashboard at {url}", file=sys.stderr, flush=True)
        if supervisor is not None:
            supervisor.watch("the dashboard", process, run_dir / "dashboard.log", essential=False)
    else:
        print(f"ddq: warning: the dashboard did not start; see {run_dir / 'dashboard.log'}", file=sys.stderr)
    try:
        yield url
    finally:
        stop(process)
        url_file.unlink(missing_ok=True)  # the address is gone with the server
