"""Who owns a distributed run's weights: the parameter-server shard fleet (downpour) or the learner process
(actor-learner), behind one small protocol the driver knows.

Both are child processes of the driver, supervised (a dead one is restarted
from its newest snapshot, a few times at most), publishing weights where
every worker reads them (`ParameterClient`), and stopped with the run. Every
wait has a deadline.
"""

from __future__ import annotations

import functools
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ddq.core.dqn import LinearSchedule, per_actor_epsilon
from ddq.learner_server.launch import start_learner
from ddq.param_server.launch import start_shard, stop_servers, wait_until_serving
from ddq.processes import Supervisor, Watched
from ddq.transport.redis_client import Connection
from ddq.transport.run_store import RunStore

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
    stopping: Callable[[], bool] = lambda: False  # the user asked the run to stop (a wait on a person ends)


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

    def keep(self) -> None:
        """Puts its newest snapshot where a resume finds it if the driver dies now (the run folder), as the
        driver writes its checkpoint; a service whose processes write their own files has nothing to do."""
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

    def keep(self) -> None:
        pass  # each shard, or the learner, writes its snapshot file itself

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
        store = RunStore(c.redis, c.run)
        queues_drained(store, self.slices, lambda: store.gradients_queued(self.slices),
                       lambda: all(p.poll() is not None for p in self.processes()), timeout or 60.0)

    def workers_epsilon(self, env_steps: int) -> float:
        return self.epsilon(env_steps)  # each worker's epsilon follows the run's global env steps


def queues_drained(store: RunStore, shards: int, queued: Callable[[], bool], ended: Callable[[], bool],
                   timeout: float) -> None:
    """Returns once `ended()`, or no shard's queue holds a gradient (`queued()` is false) and each shard
    reported after that (it applies what it took before it reports: a report that changed since the queues
    were seen empty), or `timeout` ran out. Counts would not do: a restarted shard counts from zero; clocks
    would not either: a shard started by hand runs on another host's."""
    deadline, seen_empty = time.monotonic() + timeout, None
    while time.monotonic() < deadline and not ended():
        if queued():
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
