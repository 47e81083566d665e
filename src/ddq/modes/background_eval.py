"""Greedy evaluations played on threads beside a run; a point that waits gives way to a newer one.

Actor-learner's and data-parallel's drivers evaluate the learner's evaluation
points (`ddq.transport.eval_points`) while the run goes on. Points can come
faster than one evaluation takes: every 0.75 s from two data-parallel
LunarLander workers, whose one-core services host needed longer than that
for ten greedy episodes. Evaluated one by one in order, the results fell
further behind all run long (13-31 s when the target was found, 32-34 s
with one worker host), and the run learnt of its target that much late.

So a point that finds every thread busy waits for the next free one, and a
newer point takes its place: the older is skipped (counted), and a result is
at most about two evaluations behind its point. Threads: one per core the
process may use, for evaluations that keep their thread busy (more would
only share the cores and slow each one); where an evaluation spends most of
its time neither on a core nor waiting for one (a simulator that waits on
each step), threads are added as points would wait, up to `MAX_THREADS`.
"""

from __future__ import annotations

import collections
import copy
import os
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from ddq.bookkeeping import play_evaluation
from ddq.config import TrainConfig
from ddq.core.evaluate import Evaluation
from ddq.models import FlatParameters
from ddq.transport.eval_points import EvaluationPoint

MAX_THREADS = 16
IDLE_SHARE_FOR_MORE_THREADS = 0.5  # of an evaluation's wall time off the cores and not queued for one


class Finished(NamedTuple):
    point: EvaluationPoint
    result: Evaluation
    arrived: float  # time.monotonic() when the point was submitted


class Waiting(NamedTuple):
    point: EvaluationPoint
    evaluation_index: int  # the run's, which decides the episodes' seeds
    arrived: float


class ThreadTimes(NamedTuple):
    """This thread's time on a core and queued for one (Linux's /proc/thread-self/schedstat), in seconds."""

    on_core: float
    queued: float

    @classmethod
    def now(cls) -> ThreadTimes | None:
        try:
            with open("/proc/thread-self/schedstat") as stat:
                on_core, queued, _ = stat.read().split()
        except (OSError, ValueError):  # not Linux, or a kernel without scheduler statistics
            return None
        return cls(int(on_core) / 1e9, int(queued) / 1e9)


def idle_share(before: ThreadTimes | None, after: ThreadTimes | None, wall_s: float) -> float:
    """The share of `wall_s` a thread spent neither on a core nor queued for one (sleeping, waiting on
    I/O); 0 where the kernel does not say (taken as busy: no more threads than cores)."""
    if before is None or after is None or wall_s <= 0:
        return 0.0
    busy = (after.on_core - before.on_core) + (after.queued - before.queued)
    return max(0.0, 1.0 - busy / wall_s)


class BackgroundEvaluations:
    """Plays submitted points' evaluations on threads (how many, and which points are skipped: the module's
    docstring); `finished` hands back results in the order their points arrived."""

    def __init__(self, network: nn.Module, config: TrainConfig, device: torch.device, first_index: int = 0,
                 max_threads: int = MAX_THREADS, cores: int | None = None,
                 on_result: Callable[[], None] = lambda: None):
        """`first_index`: the run's index of the first point submitted here; each point's (skipped ones
        counted) decides its episodes' seeds, so a point plays the same episodes whichever others were
        skipped. `cores`: those the process may use (default: its affinity). `on_result`: called on an
        evaluation's thread as each result is done (it wakes the driver's loop)."""
        self.config, self.device, self.network, self.first_index = config, device, network, first_index
        self.on_result = on_result
        self.max_threads = max_threads
        self.busy_limit = min(max_threads, cores or len(os.sched_getaffinity(0)))
        self.limit = self.busy_limit  # until an evaluation shows it waits on something other than the cores
        self.changed = threading.Condition()
        self.waiting: collections.deque[Waiting] = collections.deque()
        self.playing: dict[int, float] = {}  # order of each evaluation begun and not done: its point's arrival
        self.done: dict[int, Finished] = {}
        self.submitted = self.begun = self.reported = self.skipped = 0
        self.idle_threads = 0  # threads started and not playing an evaluation
        self.stopping = False
        self.threads: list[threading.Thread] = []

    def submit(self, point: EvaluationPoint) -> None:
        """Evaluates `point` when a thread is free, unless a newer point comes first."""
        with self.changed:
            self.waiting.append(Waiting(point, self.first_index + self.submitted, time.monotonic()))
            self.submitted += 1
            wanted = len(self.waiting) > self.idle_threads and len(self.threads) < self.limit
            self.idle_threads += wanted  # the new thread's, from now: it takes a point as it starts
            while len(self.waiting) > max(1, self.idle_threads):  # one point waits for a busy thread, at most
                self.waiting.popleft()
                self.skipped += 1
            self.changed.notify_all()
        if wanted:
            thread = threading.Thread(target=self._work, args=(copy.deepcopy(self.network),), daemon=True,
                                      name=f"evaluate-{len(self.threads)}")
            self.threads.append(thread)
            thread.start()

    def pending(self) -> int:
        """Submitted, not skipped, and not yet handed back."""
        with self.changed:
            return len(self.waiting) + self.begun - self.reported

    def oldest_arrival(self) -> float | None:
        """When the oldest point not yet handed back (nor skipped) arrived; None if there is none."""
        with self.changed:
            arrivals = [*self.playing.values(), *(done.arrived for done in self.done.values())]
            return min([*arrivals, *(waiting.arrived for waiting in self.waiting)], default=None)

    def finished(self) -> list[Finished]:
        """The results whose evaluation and every earlier point's are done, in their points' order."""
        results = []
        with self.changed:
            while self.reported in self.done:
                results.append(self.done.pop(self.reported))
                self.reported += 1
        return results

    def _take(self) -> tuple[int, Waiting] | None:
        """The oldest waiting point, with its evaluation's order, once there is one; None once stopping. The
        calling thread counts as idle until it takes one."""
        with self.changed:
            while not self.waiting and not self.stopping:
                self.changed.wait()
            if self.stopping:
                return None
            taken = self.waiting.popleft()
            self.idle_threads -= 1
            order, self.begun = self.begun, self.begun + 1
            self.playing[order] = taken.arrived
            return order, taken

    def _work(self, network: nn.Module) -> None:
        flat = FlatParameters(network)  # this thread's own weights
        while (taken := self._take()) is not None:
            order, (point, index, arrived) = taken
            flat.assign(point.weights)
            before, started = ThreadTimes.now(), time.monotonic()
            result = play_evaluation(network, self.config, index, self.device,
                                     should_stop=lambda: self.stopping)
            idle = idle_share(before, ThreadTimes.now(), time.monotonic() - started)
            with self.changed:
                self.limit = self.max_threads if idle > IDLE_SHARE_FOR_MORE_THREADS else self.busy_limit
                del self.playing[order]
                self.done[order] = Finished(point, result, arrived)
                self.idle_threads += 1
            self.on_result()

    def close(self, timeout: float = 10.0) -> None:
        """Abandons what is not finished; each thread ends within one env step of its evaluation."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        for thread in self.threads:
            thread.join(timeout)
