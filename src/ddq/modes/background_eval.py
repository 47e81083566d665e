"""Greedy evaluations played on threads beside a run, their results reported in the order they were asked for.

Actor-learner's driver evaluates each of the learner's evaluation points
(`ddq.transport.eval_points`) while the actors and the learner go on. On a
slow simulator one evaluation can take longer than the learner needs to
reach the next mark, so several play side by side, each on its own copy of
the network; an evaluation mostly waits on its envs, so threads suffice. A
thread starts whenever a point would wait for a busy one, up to `MAX_THREADS`,
which is well above four: with 4 actors on a simulator slept 2 ms a step, four
threads fall about 100,000 env steps behind on LunarLander, and the run learns
of its target return that much later.
"""

from __future__ import annotations

import copy
import queue
import threading
from collections.abc import Callable

import torch
from torch import nn

from ddq.bookkeeping import play_evaluation
from ddq.config import TrainConfig
from ddq.core.evaluate import Evaluation
from ddq.models import FlatParameters
from ddq.transport.eval_points import EvaluationPoint

MAX_THREADS = 16


class BackgroundEvaluations:
    """Plays each submitted point's evaluation on one of at most `max_threads` threads; `finished` hands back
    results in submission order (a result waits for every earlier one)."""

    def __init__(self, network: nn.Module, config: TrainConfig, device: torch.device,
                 max_threads: int = MAX_THREADS, on_result: Callable[[], None] = lambda: None):
        """`on_result`: called on an evaluation's thread as each result is done (it wakes the driver's loop)."""
        self.config, self.device, self.network, self.max_threads = config, device, network, max_threads
        self.on_result = on_result
        self.todo: queue.Queue[tuple[int, int, EvaluationPoint] | None] = queue.Queue()
        self.done: dict[int, tuple[EvaluationPoint, Evaluation]] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.submitted = self.reported = 0
        self.threads: list[threading.Thread] = []

    def submit(self, point: EvaluationPoint, index: int) -> None:
        """Evaluates `point` as the run's `index`-th evaluation (which decides its episodes' seeds)."""
        with self.lock:  # unfinished points, this one included, beyond the threads: one more thread
            unfinished = self.submitted - self.reported - len(self.done) + 1
            wanted = unfinished > len(self.threads) and len(self.threads) < self.max_threads
        if wanted:
            thread = threading.Thread(target=self._work, args=(copy.deepcopy(self.network),), daemon=True,
                                      name=f"evaluate-{len(self.threads)}")
            self.threads.append(thread)
            thread.start()
        self.todo.put((self.submitted, index, point))
        self.submitted += 1

    def pending(self) -> int:
        """Submitted and not yet handed back."""
        return self.submitted - self.reported

    def finished(self) -> list[tuple[EvaluationPoint, Evaluation]]:
        """The results whose evaluation and every earlier one are done, in submission order."""
        results = []
        with self.lock:
            while self.reported in self.done:
                results.append(self.done.pop(self.reported))
                self.reported += 1
        return results

    def _work(self, network: nn.Module) -> None:
        flat = FlatParameters(network)  # this thread's own weights
        while (item := self.todo.get()) is not None and not self.stopping.is_set():
            order, index, point = item
            flat.assign(point.weights)
            result = play_evaluation(network, self.config, index, self.device, should_stop=self.stopping.is_set)
            with self.lock:
                self.done[order] = (point, result)
            self.on_result()

    def close(self, timeout: float = 10.0) -> None:
        """Abandons what is not finished; each thread ends within one env step of its evaluation."""
        self.stopping.set()
        for _ in self.threads:
            self.todo.put(None)
        for thread in self.threads:
            thread.join(timeout)
