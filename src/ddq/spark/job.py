"""The run's Spark job, on a thread of the driver: the workers' tasks (`ddq.spark.tasks`) as one stage, a
barrier stage started again after a failure (at most 3 times within 10 minutes), each start in a job group
of its own that the driver can end alone."""

from __future__ import annotations

import itertools
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ddq.processes import RESTART_WINDOW_S, RestartIntensity
from ddq.spark.context import TASK_RETRIES, SparkJobFailed
from ddq.transport.credentials import executor_url

SparkTask = Callable[[int, Iterator, str, str, str, int], Iterator[dict]]  # one of ddq.spark.tasks'



def python_error(text: str) -> str:
    """The line that says what went wrong in a Spark error's text: a module a Python worker could not import
    (a daemon that could not start says so only inside a line of its own), else the last Python exception it
    quotes ("ValueError: ..."), else why Spark aborted the job, else its first line."""
    missing = re.findall(r"ModuleNotFoundError: No module named '[\w.]+'", text)
    if missing:
        return missing[-1]
    quoted = re.findall(r"^((?:\w+\.)*\w+(?:Error|Exception|Failed)\b.*)$", text, re.MULTILINE)
    if quoted:
        return quoted[-1]
    aborted = re.search(r"Job aborted due to stage failure: (.*)$", text, re.MULTILINE)
    return aborted.group(1) if aborted else text.splitlines()[0]


class SparkJob:
    """A run's Spark job, on a thread of the driver: `workers` tasks each running `task` (a module-level
    function: Spark ships it to the executors, not the driver), as a barrier stage when asked (Spark's
    barrier execution: its tasks start together, and one failing ends them all). Spark retries a failed task
    of a plain stage itself (spark.task.maxFailures). A failed barrier stage the driver starts again, up to
    TASK_RETRIES - 1 times within RESTART_WINDOW_S (as the supervisor restarts a process: a long run outlives
    a fault now and then, on any of its hosts), each start numbered (`start`) so that its tasks form their
    process group under keys of its own: Spark runs a barrier stage again only as a shuffle map stage, and
    its tasks could not tell that run from the one before."""

    def __init__(self, context: Any, task: SparkTask, workers: int, barrier: bool, settings: str, url: str,
                 run: str, on_end: Callable[[], None] = lambda: None):
        """`on_end`: called on the job's thread as the job ends, however it ends."""
        self.context, self.on_end = context, on_end
        self.ended = threading.Event()  # set before `on_end` is called: the job is over for whoever it wakes
        self.error: SparkJobFailed | None = None
        self.cancelled = threading.Event()
        self.restarts = RestartIntensity(TASK_RETRIES - 1 if barrier else 0, RESTART_WINDOW_S)
        self.start_index = 0  # of the stage's start now running
        self.ended_for: tuple[int, str] | None = None  # a start the driver ended, and why
        self.winding_down = threading.Event()  # the driver ended a start as the run stops: no start follows
        self.lock = threading.Lock()  # start_index and ended_for, between the job's thread and the driver's
        self.thread = threading.Thread(target=self._run, args=(task, workers, barrier, settings, url, run),
                                       name="spark-job", daemon=True)

    def _run(self, task: SparkTask, workers: int, barrier: bool, settings: str, url: str, run: str) -> None:
        try:
            self._starts(task, workers, barrier, settings, url, run)
        finally:
            self.ended.set()
            self.on_end()

    def _starts(self, task: SparkTask, workers: int, barrier: bool, settings: str, url: str, run: str) -> None:
        for start in itertools.count():
            with self.lock:
                if self.winding_down.is_set():  # the driver ended the start before this one as the run stops
                    return
                self.start_index = start
            try:
                self.context.setJobGroup(start_group(start), f"the workers' stage, start {start + 1}")
                rdd = self.context.parallelize(range(workers), workers)
                (rdd.barrier() if barrier else rdd).mapPartitionsWithIndex(
                    stage_function(task, settings, url, run, start)).collect()
                return
            except Exception as error:  # the driver reports it
                with self.lock:
                    ended_for, self.ended_for = self.ended_for, None
                ended_why = ended_for[1] if ended_for is not None and ended_for[0] == start else None
                if ended_why is not None and self.winding_down.is_set():
                    return  # the run stops, and the driver ended the start whose workers did not
                failure = ended_why or python_error(str(error))
                with self.lock:  # the driver's start_again reads the restarts too
                    ends = self.cancelled.is_set() or self.winding_down.is_set() or not self.restarts.allows()
                    count = 0 if ends else self.restarts.record()
                if ends:
                    self.error = SparkJobFailed(f"the Spark job failed: {failure}{self._after_restarts()}")
                    return
                print(f"ddq: the workers' stage failed ({failure}); starting it again ({count} of "
                      f"{self.restarts.most}{self.restarts.within()})", file=sys.stderr, flush=True)

    def _after_restarts(self) -> str:
        """What a failure that ends the job follows: the stage's restarts within the period, if any."""
        count = len(self.restarts.at)
        return f" (after {count} restart{'s' if count > 1 else ''} of the stage{self.restarts.within()})" \
            if count else ""

    def start(self) -> None:
        self.thread.start()

    def is_alive(self) -> bool:
        return not self.ended.is_set()

    def join(self, timeout: float | None) -> None:
        self.thread.join(timeout)

    def start_again(self, start: int, why: str) -> bool:
        """Ends start `start` of the barrier stage as a failed task would, so that the next start runs, from
        the newest snapshot; False where no restart is left within the period (or the stage is a plain one).
        A start that has ended already is left alone: the next one runs anyway."""
        with self.lock:
            if not self.restarts.allows() or self.cancelled.is_set() or self.winding_down.is_set():
                return False
            self._end(start, why)
            return True

    def end_start(self, start: int, why: str) -> None:
        """Ends start `start` for good, as the run stops and its workers did not: no start follows, and the job
        ends without an error."""
        with self.lock:
            self.winding_down.set()
            self._end(start, why)

    def _end(self, start: int, why: str) -> None:  # with self.lock held
        if start == self.start_index:
            self.ended_for = (start, why)
            self.context.cancelJobGroup(start_group(start))  # this start's alone, not the next one's

    def kill_wait_s(self) -> float:
        """How long Spark may take to end a cancelled start's tasks: a task that does not end by itself (a hung
        worker) is killed spark.python.task.killTimeout after Spark, looking every 2 s, saw it cancelled."""
        value = self.context.getConf().get("spark.python.task.killTimeout", "2s")
        return 2.0 + float(self.context._jvm.org.apache.spark.network.util.JavaUtils.timeStringAsSec(value))

    def cancel(self) -> None:
        self.cancelled.set()  # before Spark's cancelling: the job it fails is not started again
        self.context.cancelAllJobs()


def start_group(start: int) -> str:
    """The Spark job group of one start of the workers' stage, which the driver can cancel alone."""
    return f"ddq-stage-start-{start}"


def stage_function(task: SparkTask, settings: str, url: str, run: str, start: int = 0
                   ) -> Callable[[int, Iterator], Iterator[dict]]:
    """What Spark serializes into every task: `task` with the run's settings and `url`, whose password (if any)
    is the executor's own (`split_password`'s placeholder, filled in on the executor by `executor_url`), and
    which start of the job it belongs to."""
    return lambda index, rows: task(index, rows, settings, executor_url(url), run, start)
