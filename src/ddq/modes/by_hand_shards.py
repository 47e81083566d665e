"""Downpour's parameter server with every shard started by hand on a host of its own (`ddq train --shard-hosts
by-hand`): the weights service the driver knows, for shards it neither starts nor restarts.

Each shard (`ddq param-server --listen`, `ddq.param_server.shard_host`) serves from a Redis on its host and
registers it with every report. The driver says how to start them, waits for them as long as for its
workers, and asks them to stop with the run; each then hands its last weights back to the run's Redis. A
shard that dies is started again by hand and resumes from its snapshot in the run's Redis; workers that lost
it wait for it (`ddq.param_server.client`), then fail their task, which Spark retries.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

from ddq.config import REDIS_URL_ENV
from ddq.core.dqn import LinearSchedule
from ddq.modes.weights_service import ServiceContext, queues_drained
from ddq.param_server.launch import stop_servers
from ddq.transport.credentials import PASSWORD_VARIABLE, split_password
from ddq.transport.redis_client import StoreError
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.run_store import RunStore, json_object
from ddq.transport.shard_stores import store_urls

STOP_WAIT_S = 30.0  # for the shards' last reports, once the run stops: its Redis, where they go, stops with it


class ByHandShards:
    """Shards started by hand, each on a host of its own: `shards` of them, waited for up to `wait_s`."""

    name = "a parameter-server shard started by hand"

    def __init__(self, shards: int, epsilon: LinearSchedule, wait_s: float):
        self.slices, self.epsilon, self.wait_s = shards, epsilon, wait_s
        self.context: ServiceContext | None = None

    def _context(self) -> ServiceContext:
        assert self.context is not None, "start() first"
        return self.context

    def _store(self) -> RunStore:
        c = self._context()
        return RunStore(c.redis, c.run)

    def start(self, context: ServiceContext) -> None:
        """Forgets an earlier start's stores and reports (a resumed run's: its shards register anew), and says
        how to start the shards."""
        self.context = context
        self._store().forget_stores(self.slices)
        self._store().forget_shard_reports(self.slices)
        url = split_password(context.remote_url)[0]
        print(f"ddq: waiting up to {self.wait_s:.0f} s for {self.slices} parameter-server shard(s) started by "
              f"hand, each on a host of its own, with {PASSWORD_VARIABLE} set there:\n"
              f"  {REDIS_URL_ENV}='{url}' ddq param-server --run {context.run} --shard K --listen ADDR",
              file=sys.stderr, flush=True)

    def serving(self, timeout: float | None = None) -> None:
        """Returns once every shard registered its store and reported; a person starts them, so the wait is
        `wait_s` (`timeout` is for processes the driver starts), and it ends when the user stops the run."""
        c = self._context()
        deadline = time.monotonic() + self.wait_s
        while True:
            store = self._store()
            missing = [k for k, (url, report) in enumerate(zip(store.store_registrations(self.slices),
                                                                store.shard_reports(self.slices)))
                       if url is None or report is None]
            if not missing:
                return
            if c.stopping():
                raise RuntimeError(f"the run was stopped while it waited for shard(s) {', '.join(map(str, missing))}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"shard(s) {', '.join(map(str, missing))} of run {c.run} were not started by "
                                   f"hand within {self.wait_s:.0f} s (ddq param-server --run {c.run} --shard K "
                                   "--listen ADDR)")
            time.sleep(0.2)

    def drained(self, timeout: float | None = 60.0) -> None:
        """As `ShardFleet.drained`, reading each shard's queue in its store; a store that cannot be reached
        holds nothing to wait for (its host died, and its queue with it)."""
        c = self._context()
        try:
            urls = store_urls(self._store().store_registrations(self.slices), c.run, c.url)
        except (StoreError, ValueError):
            return
        # no retries: a store that does not answer is gone with its host, not restarting
        clients = {url: c.redis if url == c.url else connect_redis(url, retry=None) for url in set(urls)}

        def queued() -> bool:
            return any(_queue_length(RunStore(clients[url], c.run), k) for k, url in enumerate(urls))

        try:
            queues_drained(self._store(), self.slices, queued, self._stopped, timeout or 60.0)
        finally:
            for client in clients.values():
                if client is not c.redis:
                    client.close()

    def _stopped(self) -> bool:
        """Whether every shard that served said it stopped (after its final snapshot, its weights handed
        back); one that never reported is not waited for."""
        return all((json_object(r) or {"stopped": True}).get("stopped")
                   for r in self._store().shard_reports(self.slices))

    def stop(self) -> None:
        """Asks the shards to finish, then waits (STOP_WAIT_S at most) for each that served to report that
        it stopped."""
        c = self._context()
        stop_servers(c.redis, c.run, [])
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(StoreError):
                if self._stopped():
                    return
            time.sleep(0.1)

    def keep(self) -> None:
        pass  # each shard writes its snapshot file on its own host

    def restart(self, index: int = 0) -> Any:
        raise RuntimeError("a shard started by hand is started again by hand")

    def workers_epsilon(self, env_steps: int) -> float:
        return self.epsilon(env_steps)  # each worker's epsilon follows the run's global env steps


def _queue_length(store: RunStore, shard: int) -> int:
    """Shard `shard`'s queue in `store`'s Redis; 0 when that Redis cannot be reached (gone with its host)."""
    try:
        return store.shard_queue_length(shard)
    except StoreError:
        return 0
