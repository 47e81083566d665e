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
at most about two evaluations behind its point. Threads: one while the
evaluations keep a core busy (the time their threads spend on a core or
queued for one, over the time any plays), since Python's lock lets one
thread compute at a time and a second would only slow the first; where they
leave it idle more than half that time (a simulator that waits on each
step), up to `MAX_THREADS` play side by side.
"""

from __future__ import annotations

import collections
import copy
import math
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from ddq.bookkeeping import evaluation_seed, play_evaluation
from ddq.config import TrainConfig
from ddq.core.evaluate import Evaluation
from ddq.models import FlatParameters
from ddq.transport.eval_points import EvaluationPoint

MAX_THREADS = 16
BUSY_SHARE_FOR_ONE_THREAD = 0.5  # of the time any evaluation plays: their threads on a core or queued for one


class Finished(NamedTuple):
    point: EvaluationPoint
    result: Evaluation
    arrived: float  # time.monotonic() when the point was submitted


class Waiting(NamedTuple):
    point: EvaluationPoint
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


def busy_seconds(before: ThreadTimes | None, after: ThreadTimes | None) -> float | None:
    """A thread's time on a core or queued for one between two readings; None where the kernel does not
    say (then one thread plays: evaluations are taken to keep a core busy)."""
    if before is None or after is None:
        return None
    return (after.on_core - before.on_core) + (after.queued - before.queued)


class BackgroundEvaluations:
    """Plays submitted points' evaluations on threads (how many, and which points are skipped: the module's
    docstring); `finished` hands back results in the order their points arrived."""

    def __init__(self, network: nn.Module, config: TrainConfig, device: torch.device,
                 max_threads: int = MAX_THREADS, on_result: Callable[[], None] = lambda: None):
        """Each point plays the episodes of the mark of the env steps it was trained on (as serial training's
        evaluation at that mark: `ddq.bookkeeping.evaluation_seed`). `on_result`: called on an evaluation's
        thread as each result is done, or an evaluation failed (it wakes the driver's loop)."""
        self.config, self.device, self.network = config, device, network
        self.on_result, self.max_threads = on_result, max_threads
        self.limit = 1  # evaluations playing at once: one, until they show they leave the core idle
        self.changed = threading.Condition()
        self.waiting: collections.deque[Waiting] = collections.deque()
        self.playing: dict[int, float] = {}  # order of each evaluation begun and not done: its point's arrival
        self.done: dict[int, Finished] = {}
        self.begun = self.reported = self.skipped = 0
        self.newest_mark = 0  # of the points submitted: how many eval_every marks their trained steps passed
        self.idle_threads = 0  # threads started that take a point as soon as one waits and the limit allows
        self.busy_s = self.played_s = 0.0  # the evaluations' threads on a core or queued; the time any played
        self.playing_since = 0.0
        self.failed: BaseException | None = None  # an evaluation's error: the driver raises it
        self.stopping = False
        self.threads: list[threading.Thread] = []

    def submit(self, point: EvaluationPoint) -> None:
        """Evaluates `point` when a thread is free, unless a newer point comes first. A point of a mark already
        submitted is dropped: a data-parallel stage started again publishes once more the mark its rank 0's
        count had run ahead to (up to a quarter second ahead of the run's), and a mark is evaluated once."""
        mark = point.trained_steps // self.config.run.eval_every
        with self.changed:
            if mark <= self.newest_mark:
                return
            self.newest_mark = mark
            self.waiting.append(Waiting(point, time.monotonic()))
            thread = None
            if len(self.waiting) > self.idle_threads and len(self.threads) < self.limit:
                thread = threading.Thread(target=self._work, args=(copy.deepcopy(self.network),), daemon=True,
                                          name=f"evaluate-{len(self.threads)}")
                self.threads.append(thread)
                self.idle_threads += 1
            while len(self.waiting) > self._free() + 1:  # beyond those taken now, one waits for a busy thread
                self.waiting.popleft()
                self.skipped += 1
            self.changed.notify_all()
        if thread is not None:
            thread.start()

    def _free(self) -> int:
        """Threads that take a waiting point at once."""
        return max(0, min(self.idle_threads, self.limit - len(self.playing)))

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

    def _take(self, counted: bool) -> tuple[int, Waiting] | None:
        """The oldest waiting point once the limit lets one more play, with its evaluation's order; None once
        stopping. `counted`: this thread is among the idle already (it has just started)."""
        with self.changed:
            self.idle_threads += not counted
            while not self.stopping and not (self.waiting and len(self.playing) < self.limit):
                self.changed.wait()
            self.idle_threads -= 1
            if self.stopping:
                return None
            taken = self.waiting.popleft()
            if not self.playing:
                self.playing_since = time.monotonic()
            order, self.begun = self.begun, self.begun + 1
            self.playing[order] = taken.arrived
            return order, taken

    def _work(self, network: nn.Module) -> None:
        flat = FlatParameters(network)  # this thread's own weights
        counted = True
        while (taken := self._take(counted)) is not None:
            counted = False
            order, (point, arrived) = taken
            before = ThreadTimes.now()
            try:
                flat.assign(point.weights)
                result = play_evaluation(network, self.config, evaluation_seed(self.config, point.trained_steps),
                                         self.device, should_stop=lambda: self.stopping)
            except BaseException as error:  # the run must not go on without its evaluations
                with self.changed:
                    self.failed = self.failed or error
                    self.stopping = True
                    self.changed.notify_all()
                self.on_result()
                return
            busy = busy_seconds(before, ThreadTimes.now())
            with self.changed:
                del self.playing[order]
                self.done[order] = Finished(point, result, arrived)
                self._note_busy(busy)
                self.changed.notify_all()  # a thread may take the next point, or more may play now
            self.on_result()

    def _note_busy(self, busy: float | None) -> None:
        """Adds an evaluation's busy time and sets how many may play at once (under the lock)."""
        now = time.monotonic()
        self.busy_s += busy if busy is not None else math.inf
        if not self.playing:
            self.played_s += now - self.playing_since
        played = self.played_s + (now - self.playing_since if self.playing else 0.0)
        waits = played > 0 and self.busy_s < BUSY_SHARE_FOR_ONE_THREAD * played
        self.limit = self.max_threads if waits else 1

    def close(self, timeout: float = 10.0) -> None:
        """Abandons what is not finished; each thread ends within one env step of its evaluation."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        for thread in self.threads:
            thread.join(timeout)
