"""A distributed run's services: its Redis (private, or given), control key, reporter and settings file, then
Celery and the dashboard. Each is supervised and stopped with the run's exit stack."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddq.bookkeeping import RunCounters
from ddq.config import TrainConfig, masked_url, settings_document, write_settings
from ddq.dashboard.launch import Dashboard
from ddq.lifecycle import RunControl
from ddq.processes import Supervisor, Watched, stop
from ddq.services.celery_launch import start_celery_worker
from ddq.services.telemetry import RunReporter
from ddq.transport.credentials import host_password
from ddq.transport.keys import RUN_ID_LINE
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.redis_client import give_up_waiting
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.run_store import RunStore


class RunServices:
    """Opened in two steps: `open` before the weights service starts (it needs Redis and the settings
    file), `start_helpers` once the workers' tasks have started (Celery evaluates the weights the service
    publishes)."""

    def __init__(self, config: TrainConfig, run: str, run_dir: Path, supervisor: Supervisor,
                 redis_back: Callable[[], None] = lambda: None):
        """`redis_back`: called once a restarted private Redis answers (the driver then raises the run's
        counts, which the Redis' snapshot may hold older, before the workers count on from them)."""
        self.config, self.run, self.run_dir, self.supervisor = config, run, run_dir, supervisor
        self.redis_back = redis_back
        self.redis_watch: Watched | None = None  # the private Redis's, when the run has one
        self.dashboard: Dashboard | None = None  # once the helpers start, if the run has one

    def open(self, stack: contextlib.ExitStack, info: dict[str, Any], slices: int, counters: RunCounters,
             listen: str | None = None, advertise: str | None = None, password: str | None = None) -> None:
        """Redis, the run's control key, its episodes list, its reporter (`info`: what the dashboard shows
        of the run) and its settings file. `counters`: the env steps and episodes a resumed run's workers go
        on from. `listen`: the private Redis also serves other hosts there (TLS, a password made for the run),
        reached at `advertise`, as the user `ddq` with `password` (default: one made now); `remote_url` is then
        theirs, `url` this host's processes'."""
        if self.config.distributed.redis_url:
            self.url = self.remote_url = self.config.distributed.redis_url
        else:
            embedded = stack.enter_context(EmbeddedRedis(log_dir=self.run_dir, listen=listen, advertise=advertise,
                                                         run=self.run, persist=self.run_dir / "redis",
                                                         password=password,
                                                         listen_port=self.config.distributed.redis_port))
            # every process waits on Redis: restarted at once from its snapshot, the run's keys come back, each
            # process reconnects, and the shards or the learner publish their weights again
            self.redis_watch = self.supervisor.watch("redis-server", embedded.process, embedded.log_path,
                                                     restart=lambda: self._restart_redis(embedded), promptly=True,
                                                     on_gone=self._stop_waiting_for_redis)
            stack.callback(self.supervisor.close)  # before Redis stops: that is no death
            self.url, self.remote_url = embedded.url, embedded.remote_url
            if listen:
                whose = "this host's password" if host_password() else "a password made for the run"
                print(f"ddq: the run's Redis serves other hosts at {advertise} (TLS on port {embedded.listen_port}, "
                      f"{whose})", file=sys.stderr, flush=True)
        self.redis = connect_redis(self.url)
        self.control = RunControl(self.redis, self.run)
        self.store = RunStore(self.redis, self.run)
        self.episodes = self.store.cursor("episodes")
        self.reporter = RunReporter(self.store, {**info, "settings": settings_document(self.config)}, slices)
        print(f"{RUN_ID_LINE}{self.run} (the Redis keys ddq:{self.run}:* at {masked_url(self.url)})", file=sys.stderr,
              flush=True)  # where `redis-cli` finds the control key
        self.store.set_env_steps(counters.env_steps)
        self.store.set_episode_count(counters.episodes)
        self.settings = write_settings(self.config, self.run_dir / "config.json")

    def redis_gone(self) -> bool:
        """Whether the run's private Redis died for good (and was not restarted)."""
        return self.redis_watch is not None and self.redis_watch.gone

    def _restart_redis(self, embedded: EmbeddedRedis) -> subprocess.Popen:
        process = embedded.restart()
        self.redis_back()
        return process

    def _stop_waiting_for_redis(self) -> None:
        """The private Redis stays dead: the driver's commands fail at once from now on, and the supervisor's
        next look ends the run, instead of a command waiting out an outage that will not end."""
        if hasattr(self, "redis"):
            give_up_waiting(self.redis)

    def start_helpers(self, stack: contextlib.ExitStack) -> None:
        """Celery (background evaluation of snapshots) and the dashboard, when the run wants them; the run
        goes on without either if it dies."""
        if self.config.services.celery:
            worker = start_celery_worker(self.url, self.run, self.run_dir, self.settings)
            self.supervisor.watch("the Celery worker", worker, self.run_dir / "celery.log", essential=False)
            stack.callback(stop, worker)
        if self.config.services.dashboard:
            self.dashboard = Dashboard(self.url, self.run, self.run_dir, self.config.services.dashboard_port,
                                       self.supervisor)
            stack.callback(self.dashboard.stop)

    def announce_helpers(self) -> str | None:
        """The line with the dashboard's URL, once, when it serves (the driver's loop asks each time round;
        nothing waits for it)."""
        return self.dashboard.announce() if self.dashboard is not None else None
