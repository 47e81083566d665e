"""Who owns a distributed run's weights: the parameter-server shard fleet (downpour) or the learner process
(actor-learner), behind one small protocol the driver knows.

Both are child processes of the driver, supervised (a dead one is restarted
from its newest snapshot, a few times at most), publishing weights where
every worker reads them (`ParameterClient`), and stopped with the run. Every
wait has a deadline.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from ddq.config import REDIS_URL_ENV
from ddq.core.dqn import LinearSchedule, per_actor_epsilon
from ddq.learner_server.launch import start_learner
from ddq.param_server.launch import start_shard, stop_servers, wait_until_serving
from ddq.processes import Supervisor, Watched
from ddq.transport.credentials import PASSWORD_VARIABLE, split_password
from ddq.transport.redis_client import Connection, StoreError
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.run_store import RunStore, json_object
from ddq.transport.shard_stores import store_keys, store_urls

SERVING_TIMEOUT_S = 120.0


@dataclass
class ServiceContext:
    """What a weights service needs of the run: its settings file, its Redis and its supervisor."""

    settings: Path
    url: str
    run: str
    run_dir: Path
    redis: Connection
    supervisor: Supervisor
    remote_url: str = ""  # the run's Redis as other hosts reach it (default: `url`)


class WeightsService(Protocol):
    """Owns the weights: takes what workers send, publishes weights back."""

    slices: int  # how many slices of the weights a worker reads (one per shard)

    def start(self, context: ServiceContext) -> None:
        """Starts its processes under the run's supervisor, without waiting for them (`serving` does)."""
        ...

    def serving(self, timeout: float = SERVING_TIMEOUT_S) -> None:
        """Returns once every process published its weights; raises if one died or the time ran out."""
        ...

    def drained(self, timeout: float | None = None) -> None:
        """Returns once everything workers sent was applied, or the time (its own default) ran out."""
        ...

    def stop(self) -> None:
        """Asks its processes to finish (each snapshots and exits), then makes sure they did."""
        ...

    def restart(self, index: int = 0) -> subprocess.Popen:
        """Starts process `index` again; it resumes from its newest snapshot."""
        ...

    def workers_epsilon(self, env_steps: int) -> float:
        """The exploration rate the workers act with now, `env_steps` into the run (reported, not used)."""
        ...


class _Processes:
    """The processes a service watches, and how it stops them."""

    name: str  # of one process, for error lines

    def __init__(self) -> None:
        self.context: ServiceContext | None = None
        self.entries: list[Watched] = []

    def processes(self) -> list[subprocess.Popen]:
        return [entry.process for entry in self.entries]

    def stop(self) -> None:
        if self.context is not None:
            stop_servers(self.context.redis, self.context.run, self.processes())

    def serving(self, timeout: float = SERVING_TIMEOUT_S) -> None:
        assert self.context is not None, "start() first"
        wait_until_serving(self.context.redis, self.context.run, len(self.entries), self.processes(), timeout,
                           self.name)

    def _context(self) -> ServiceContext:
        assert self.context is not None, "start() first"
        return self.context


class ShardFleet(_Processes):
    """Downpour's parameter server: `shards` processes, shard k owning a slice of the flat weights."""

    name = "a parameter-server shard"

    def __init__(self, shards: int, epsilon: LinearSchedule):
        super().__init__()
        self.slices, self.epsilon = shards, epsilon

    def start(self, context: ServiceContext) -> None:
        self.context = context
        RunStore(context.redis, context.run).forget_stores(self.slices)  # a resumed run's, by hand: gone
        self.entries = [context.supervisor.watch(f"parameter-server shard {k}", self.restart(k),
                                                 context.run_dir / f"param-server-{k}.log",
                                                 restart=functools.partial(self.restart, k))
                        for k in range(self.slices)]

    def restart(self, index: int = 0) -> subprocess.Popen:
        c = self._context()
        return start_shard(c.settings, c.url, c.run, c.run_dir, index)

    def drained(self, timeout: float | None = 60.0) -> None:
        """Every shard process has ended (a stopped shard applies its queue before it exits), or every queue is
        empty and each shard reported after that (`queues_drained`)."""
        c = self._context()
        queues_drained(RunStore(c.redis, c.run), self.slices, [c.redis] * self.slices,
                       lambda: all(p.poll() is not None for p in self.processes()), timeout or 60.0)

    def workers_epsilon(self, env_steps: int) -> float:
        return self.epsilon(env_steps)  # each worker's epsilon follows the run's global env steps


class ByHandShards:
    """Downpour's parameter server with every shard started by hand on a host of its own, serving from a Redis
    there (`ddq param-server --listen`, `ddq.param_server.shard_host`). The driver says how to start them,
    waits for them (as long as for its workers: `wait_s`), and asks them to stop with the run; it neither
    starts nor restarts one. A shard that dies is started again by hand and resumes from its snapshot in the
    run's Redis; workers whose connection to it broke meanwhile fail their task, which Spark retries."""

    name = "a parameter-server shard started by hand"

    def __init__(self, shards: int, epsilon: LinearSchedule, wait_s: float):
        self.slices, self.epsilon, self.wait_s = shards, epsilon, wait_s
        self.context: ServiceContext | None = None

    def _context(self) -> ServiceContext:
        assert self.context is not None, "start() first"
        return self.context

    def start(self, context: ServiceContext) -> None:
        self.context = context
        store = RunStore(context.redis, context.run)
        store.forget_stores(self.slices)
        store.forget_shard_reports(self.slices)  # those of an earlier start: each shard reports once it serves
        url = split_password(context.remote_url)[0]
        print(f"ddq: waiting up to {self.wait_s:.0f} s for {self.slices} parameter-server shard(s) started by "
              f"hand, each on a host of its own, with {PASSWORD_VARIABLE} set there:\n"
              f"  {REDIS_URL_ENV}='{url}' ddq param-server --run {context.run} --shard K --listen ADDR",
              file=sys.stderr, flush=True)

    def _registered(self) -> list[str]:
        c = self._context()
        raw = cast(list, c.redis.mget(store_keys(c.run, self.slices)))
        return store_urls(raw, c.run, c.url)

    def serving(self, timeout: float = SERVING_TIMEOUT_S) -> None:
        """Every shard registered its store and reported; a person starts them, so the wait is `wait_s`."""
        c = self._context()
        store, deadline = RunStore(c.redis, c.run), time.monotonic() + self.wait_s
        while time.monotonic() < deadline:
            stores = cast(list, c.redis.mget(store_keys(c.run, self.slices)))
            missing = [k for k, (url, report) in enumerate(zip(stores, store.shard_reports(self.slices)))
                       if url is None or report is None]
            if not missing:
                return
            time.sleep(0.2)
        raise RuntimeError(f"shard(s) {', '.join(map(str, missing))} of run {c.run} were not started by hand within "
                           f"{self.wait_s:.0f} s (ddq param-server --run {c.run} --shard K --listen ADDR)")

    def drained(self, timeout: float | None = 60.0) -> None:
        """As `ShardFleet.drained`; a store that cannot be reached holds nothing to wait for (its host died, and
        its queue with it)."""
        c = self._context()
        with contextlib.suppress(StoreError, ValueError):
            stores = [c.redis if url == c.url else connect_redis(url) for url in self._registered()]
            queues_drained(RunStore(c.redis, c.run), self.slices, stores, self._stopped, timeout or 60.0)

    def _stopped(self) -> bool:
        """Whether every shard said it stopped (after its final snapshot, its weights handed back)."""
        c = self._context()
        return all((json_object(r) or {}).get("stopped") for r in RunStore(c.redis, c.run).shard_reports(self.slices))

    def stop(self) -> None:
        """Asks the shards to finish, then waits (30 s at most) for each to report that it stopped, after its
        final snapshot: the run's Redis, where that snapshot goes, stops with the run."""
        c = self._context()
        stop_servers(c.redis, c.run, [])
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            with contextlib.suppress(StoreError):
                if self._stopped():
                    return
            time.sleep(0.1)

    def restart(self, index: int = 0) -> subprocess.Popen:
        raise RuntimeError("a shard started by hand is started again by hand")

    def workers_epsilon(self, env_steps: int) -> float:
        return self.epsilon(env_steps)


def queues_drained(store: RunStore, shards: int, stores: list[Connection], ended: Callable[[], bool],
                   timeout: float) -> None:
    """Returns once `ended()`, or every shard's queue (shard k's in `stores[k]`) is empty and each shard
    reported after that (it applies what it took before it reports: a report that changed since the queues
    were seen empty), or `timeout` ran out. Counts would not do: a restarted shard counts from zero; clocks
    would not either: a shard started by hand runs on another host's."""
    deadline, seen_empty = time.monotonic() + timeout, None
    while time.monotonic() < deadline and not ended():
        if store.gradients_queued(shards, stores):
            seen_empty = None
        elif seen_empty is None:
            seen_empty = store.shard_reports(shards)
        elif all(now != then for now, then in zip(store.shard_reports(shards), seen_empty)):
            return
        time.sleep(0.05)


class LearnerProcess(_Processes):
    """Actor-learner's one `ddq learner` process: it trains on the actors' experience and publishes as the
    parameter server's one slice does, so workers read it through the same client."""

    slices = 1
    name = "the learner"

    def __init__(self, epsilon: LinearSchedule, actors: int, per_actor: bool, resumed_env_steps: int = 0):
        """`per_actor`: the actors act with Ape-X's fixed epsilons, not the schedule; `resumed_env_steps`: a
        resumed run's env steps, where its epsilon goes on from."""
        super().__init__()
        self.epsilon, self.actors, self.per_actor = epsilon, actors, per_actor
        self.resumed_env_steps = resumed_env_steps

    def start(self, context: ServiceContext) -> None:
        self.context = context
        RunStore(context.redis, context.run).start_trained_steps(self.resumed_env_steps)
        self.entries = [context.supervisor.watch("the learner", self.restart(), context.run_dir / "learner.log",
                                                 restart=self.restart)]

    def restart(self, index: int = 0) -> subprocess.Popen:
        c = self._context()
        return start_learner(c.settings, c.url, c.run, c.run_dir)

    def drained(self, timeout: float | None = 120.0) -> None:
        """The learner has trained on everything the actors sent and exited, as it does once the run stops
        (it publishes its final weights first)."""
        deadline = time.monotonic() + (timeout or 120.0)
        while time.monotonic() < deadline and self.entries[0].process.poll() is None:
            time.sleep(0.05)

    def workers_epsilon(self, env_steps: int) -> float:
        """The mean of Ape-X's per-actor values, or the schedule at the env steps the learner has trained on
        (the actors' epsilon follows what it knows)."""
        if self.per_actor:
            return sum(per_actor_epsilon(i, self.actors) for i in range(self.actors)) / self.actors
        c = self._context()
        return self.epsilon(RunStore(c.redis, c.run).trained_steps())
