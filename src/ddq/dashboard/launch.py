"""The driver's dashboard: a `ddq dashboard` child process on 127.0.0.1, stopped with the run."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ddq.config import REDIS_URL_ENV
from ddq.processes import Supervisor, spawn, stop

START_TIMEOUT_S = 60.0


class Dashboard:
    """Starts the dashboard (a free port unless `port`) in its own process at background priority, so that
    serving the page neither holds the driver's interpreter nor takes CPU time the workers want. Nobody
    waits for it to start: the driver's loop calls `announce`, which gives its URL once the process has
    written it. If it cannot start, training goes on without it, with a warning."""

    def __init__(self, redis_url: str, run: str, run_dir: Path, port: int | None = None,
                 supervisor: Supervisor | None = None):
        self.log_path, self.supervisor = run_dir / "dashboard.log", supervisor
        self.url_file = run_dir.resolve() / "dashboard.url"
        self.url_file.unlink(missing_ok=True)
        self.log_start = self.log_path.stat().st_size if self.log_path.exists() else 0  # a resumed run's log goes on
        self.process = spawn([sys.executable, "-m", "ddq", "dashboard", "--run", run, "--port", str(port or 0),
                              "--url-file", str(self.url_file)], self.log_path, env={REDIS_URL_ENV: redis_url},
                             background=True)
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self.url: str | None = None
        self.settled = False  # its URL printed, or the warning that it did not start

    def announce(self) -> str | None:
        """The line that gives the URL once the dashboard wrote it (the supervisor watches it from then on),
        or a warning once it died or START_TIMEOUT_S passed without one; after that, and before, None. The
        caller prints it (the driver, above its progress bar)."""
        if self.settled:
            return None
        if self.url_file.is_file():
            self.url = self.url_file.read_text()
            line = f"ddq: dashboard at {self.url}"
            if self.supervisor is not None:
                self.supervisor.watch("the dashboard", self.process, self.log_path, essential=False)
        elif self.process.poll() is not None or time.monotonic() > self.deadline:
            reason = last_line(self.log_path, self.log_start) if self.process.poll() is not None else None
            said = f" ({reason.removeprefix('ddq: error: ')})" if reason else ""
            line = f"ddq: warning: the dashboard did not start{said}; see {self.log_path}"
        else:
            return None
        self.settled = True
        return line

    def stop(self) -> None:
        stop(self.process)
        self.url_file.unlink(missing_ok=True)  # the address is gone with the server


def last_line(path: Path, start: int = 0) -> str | None:
    """The last line a process wrote to its log from byte `start` on (an exited dashboard's one-line error: a
    port in use), not an earlier session's."""
    try:
        with open(path, "rb") as log:
            log.seek(start)
            lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1] if lines else None
