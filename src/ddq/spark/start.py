"""Spark's start and end on the driver: a run's SparkContext made on a thread while the driver starts the rest of
the run, its Python workers warmed, the wait for it bounded; and its JVM stopped, and gone, once the run ends."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ddq.config import DistributedConfig
from ddq.config.masters import is_local
from ddq.spark.context import (
    SparkJobFailed,
    forget_gateway,
    jvm_gateway,
    master_and_wait,
    prepare_environment,
    quiet_py4j,
    spark_conf,
    start_context,
    task_slots,
)
from ddq.spark.job import python_error
from ddq.spark.jvm_archive import java_options, writing_to
from ddq.spark.jvm_boot import BootingJvm, end_launch, end_unused_jvm

SPARK_STOP_WAIT_S = 15.0
JVM_ARCHIVE_WAIT_S = 60.0  # a first run's JVM writing its class-data archive as it exits took 7 s on 2 cores
START_WAIT_S = DistributedConfig().stall_timeout  # `SparkStarting.result`'s wait for a first task, by default
# The least time a JVM is given to answer as it launches: a stall_timeout of seconds (the tests') would otherwise
# end a JVM that a loaded machine starts slowly, not one that is stuck.
JVM_ANSWER_MIN_S = 120.0


def warm_workers(context: Any, workers: int) -> None:
    """Runs `workers` tasks that import what a training task imports, so that the job's tasks find Python
    workers ready (Spark reuses them: spark.python.worker.reuse) instead of importing torch each."""
    try:
        context.parallelize(range(workers), workers).mapPartitions(_import_a_worker).collect()
    except Exception as error:  # Py4J's words name the call; the workers' own say why (a Python without ddq)
        raise SparkJobFailed(f"Spark's Python workers ({context.pythonExec}: $PYSPARK_PYTHON or "
                             f"spark.pyspark.python) could not start: {python_error(str(error))}") from error


def _import_a_worker(_rows: Iterator) -> Iterator[int]:
    import ddq.spark.daemon  # noqa: F401  (what every task imports; free in a worker forked from it)

    yield 0


class SparkStarting:
    """A run's SparkContext being made on a thread of the driver, with its Python workers warmed, while the
    driver starts the rest of the run: the JVM's and the workers' start-up overlap the services'.

    Its driver is reached by executors at `driver_host` (None: as spark-submit was told), bound to `bind`
    (default `driver_host`). A local master's Python workers run this interpreter; a cluster's run the
    Python its configuration names (`spark.pyspark.python`, `PYSPARK_PYTHON`). `master` None keeps the one
    spark-submit was given. `log_path`: where the JVM's own output goes (its start-up warnings, Spark's log,
    the Python workers' stderr) instead of the terminal. A context, not a SparkSession: ddq runs RDD stages
    only, and a session's SQL side costs a couple of seconds to start."""

    def __init__(self, master: str | None, app: str, log_path: Path | None, driver_host: str | None,
                 bind: str | None, workers: int, ship: Callable[[Any], None], password: str | None = None,
                 booted: BootingJvm | None = None):
        """`ship(context)`: what the context needs before a task runs (ddq's code, for a cluster's executors).
        `password`: the run's Redis password, for the executors' environment (`start_context`). `booted`:
        the JVM, when it was launched for the same master and driver already (`ddq.modes.launch.boot_spark`)."""
        self.password, self.booted = password, booted
        quiet_py4j()
        if booted is None:
            prepare_environment(master, driver_host, bind)
            self.conf = spark_conf(master, app, driver_host, bind)
        else:  # the conf its JVM was launched with, `app` included (the class-data archive it writes is named there)
            self.conf = booted.conf
        self.writes_archive = writing_to(java_options(self.conf)) is not None  # its JVM, as it exits
        self.gateway: Any = None  # the JVM's, once it is there
        self.began = time.monotonic()
        self.jvm_up: float | None = None  # when it was (time.monotonic())
        self.master = master or "spark-submit's"  # the one the JVM names, once it is up
        self.registration_s = 0.0  # how long Spark may wait for a cluster's executors as it makes the context
        self.context: Any = None
        self.lock = threading.Lock()  # the context's arrival, against `_abandon`'s choice to end its JVM
        self.stopped = False
        self.abandoned = threading.Event()  # the driver no longer waits for it: no warm-up to start
        self.task_started = False
        self.error: BaseException | None = None
        self.log_path = log_path  # where the JVM's output goes
        self.thread = threading.Thread(target=self._start, args=(workers, ship), name="spark-start", daemon=True)
        self.thread.start()

    def _start(self, workers: int, ship: Callable[[Any], None]) -> None:
        try:
            gateway = jvm_gateway(self.conf, self.log_path, self.booted)
            self.master, self.registration_s = master_and_wait(gateway)
            self.jvm_up = time.monotonic()
            with self.lock:
                self.gateway = gateway
                abandoned = self.abandoned.is_set()
            if abandoned:  # before a context waits on its master: the JVM goes now
                self._end_unused_jvm()
                return
            start_context(self.conf, gateway, self._made, self.password, workers)
            slots = task_slots(self.context)
            if slots < workers:
                print(f"ddq: Spark's executors offer {slots} of the {workers} task slots the workers need (after "
                      f"spark.scheduler.maxRegisteredResourcesWaitingTime): a worker without one starts once one "
                      f"is free, perhaps after the budget is spent (are the workers' hosts up? is spark.cores.max "
                      f"{workers} or more?)", file=sys.stderr, flush=True)
            ship(self.context)
            if not self.abandoned.is_set():
                warm_workers(self.context, workers)
        except BaseException as error:  # the driver raises it where it waits for the context
            self.error = error

    def result(self, stopped: Callable[[], bool] = lambda: False, timeout: float = START_WAIT_S) -> Any | None:
        """The context, once made and its Python workers warmed (an error in that is raised here); None once
        `stopped()` (a signal of the user's) ends the run first. SparkJobFailed when Spark has made no context
        `timeout` s after its JVM was up and its own wait for a cluster's executors (a YARN resource manager
        that never answers, a queue that never accepts the application: Spark waits for good), or no task of
        the warm-up has started `timeout` s after the context was made (Spark's own wait for executors is
        over by then: a cluster whose executors never take a task leaves Spark repeating that the job "has
        not accepted any resources"), or when its JVM has not answered `timeout` s (JVM_ANSWER_MIN_S at least)
        after this object was made (pyspark waits on a JVM for good: one stuck resolving spark.jars.packages).
        A slow start under way (executors unpacking an archive, importing torch) is waited for."""
        idle_since: float | None = None  # since when the context has been there and no task of its has started
        jvm_answer_s = max(timeout, JVM_ANSWER_MIN_S)
        while self.thread.is_alive():
            if stopped():
                self._abandon()
                return None
            if self.jvm_up is None and time.monotonic() - self.began > jvm_answer_s:
                raise SparkJobFailed(self._end_silent_launch(jvm_answer_s))
            if self.context is None and self.jvm_up is not None \
                    and time.monotonic() - self.jvm_up > timeout + self.registration_s:
                self._abandon()
                raise SparkJobFailed(f"Spark made no context within stall_timeout ({timeout:g} s){self._why_late()}")
            if self.context is not None and not self._a_task_started():
                idle_since = idle_since or time.monotonic()
                if time.monotonic() - idle_since > timeout:
                    self._abandon()
                    why = ("this machine started Spark's workers slower than that: give a larger stall_timeout"
                           if is_local(self.context.master) else "are the workers' hosts up, with a free core each?")
                    raise SparkJobFailed(f"Spark started no worker within stall_timeout ({timeout:g} s): no "
                                         f"executor took a task ({why})")
            self.thread.join(0.2)
        if self.error is not None:
            raise self.error
        return self.context

    def _end_silent_launch(self, waited_s: float) -> str:
        """Ends the launch of a JVM that has not answered in `waited_s` (`_abandon`); returns the line that says
        whether it could."""
        ended = "and was ended" if self._abandon() else "and could not be ended (its process unknown)"
        return (f"Spark's JVM did not answer within {waited_s:g} s {ended}: {self.log_path or 'its output'} says "
                f"where it stopped (fetching spark.jars.packages? its network, or a larger stall_timeout)")

    def _why_late(self) -> str:
        if is_local(self.master):
            return ": this machine made Spark's context slower than that: give a larger stall_timeout"
        return (f" after Spark's own wait for executors ({self.registration_s:g} s): the master {self.master} did not "
                f"take the application, or its executors did not register (its resource manager up and reachable? "
                f"its queue accepting it, or busy: a larger stall_timeout?)")

    def _made(self, context: Any) -> None:
        """Takes the context as soon as it exists: from then on, `_abandon` leaves its JVM to `stop`."""
        with self.lock:
            self.context = context

    def _a_task_started(self) -> bool:
        """Whether a task of the context's has started, to run, end or fail (Spark's status tracker; true once
        true). A tracker that cannot tell (py4j's error: a JVM in trouble) says no, this time."""
        if not self.task_started:
            try:
                tracker = self.context.statusTracker()
                stages = [tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds()]
                self.task_started = any(info and info.numActiveTasks + info.numCompletedTasks + info.numFailedTasks
                                        for info in stages)
            except Exception:  # the thread's own end (an error it raises) is what result() then reports
                return False
        return self.task_started

    def _abandon(self) -> bool:
        """No warm-up starts from now on, and the one running is cancelled (its thread then ends). A context
        still being made waits on its master, perhaps for good: the JVM ddq started for it is ended, which
        ends the wait (one of spark-submit's is spark-submit's to end, as this process exits). False where a
        JVM still launching could not be ended (`end_launch`)."""
        with self.lock:
            self.abandoned.set()
            context = self.context
        if context is not None:
            with contextlib.suppress(Exception):  # a context being stopped, or gone
                context.cancelAllJobs()
            return True
        return self._end_unused_jvm()

    def _end_unused_jvm(self) -> bool:
        if self.gateway is None:  # still launching (pyspark's launch, on the thread that launches it)
            return end_launch(self.booted.thread if self.booted is not None else self.thread, self.conf)
        if getattr(self.gateway, "proc", None) is not None:
            end_unused_jvm(self.gateway.proc, self.conf)
            forget_gateway(self.gateway)
        return True

    def stop(self) -> None:
        """Stops the context, waiting at most SPARK_STOP_WAIT_S: with its executors unreachable (a driver cut
        off from them), Spark's goodbyes wait out its RPC timeouts, minutes with authentication on. Past that
        the JVM ddq started is killed: told to exit as this process ends (it watches its standard input), it
        runs Spark's own stop again in its shutdown hook, and a chaos run found one alive minutes after its
        driver ended. A JVM of spark-submit's is spark-submit's to end. Called again, does nothing."""
        self._abandon()  # (a start still under way: the driver is done waiting for it)
        spark_submits = self.gateway is not None and getattr(self.gateway, "proc", None) is None
        if self.context is not None or not spark_submits:  # spark-submit's JVM may never make its context
            self.thread.join(SPARK_STOP_WAIT_S)
        if self.context is None or self.stopped:
            return
        self.stopped = True
        stopping = threading.Thread(target=stop_quietly, args=(self.context,), name="spark-stop", daemon=True)
        stopping.start()
        stopping.join(SPARK_STOP_WAIT_S)
        jvm = getattr(self.gateway, "proc", None)  # None: spark-submit's JVM
        forget_gateway(self.gateway)
        if not stopping.is_alive():
            if jvm is not None:
                end_stopped_jvm(jvm, self.writes_archive)
            return
        if jvm is not None:
            jvm.kill()
            jvm.wait(SPARK_STOP_WAIT_S)
        print(f"ddq: Spark did not stop within {SPARK_STOP_WAIT_S:.0f} s (its executors unreachable?); "
              f"{'its JVM was killed' if jvm is not None else 'leaving it to spark-submit'}",
              file=sys.stderr, flush=True)


def end_stopped_jvm(jvm: Any, writing_archive: bool) -> None:
    """Closes the standard input of the JVM whose Spark stopped, which makes it exit (pyspark's gateway
    watches it) now rather than when this process does: a second run in this process starts a JVM of its
    own (`forget_gateway`). Where it writes its class-data archive (`ddq.spark.jvm_archive`), waits for it:
    a first run's JVM takes seconds to, and would still be writing after `ddq train` ended. Killed if it
    has not ended within JVM_ARCHIVE_WAIT_S. Otherwise it exits in the background, within a second or two."""
    with contextlib.suppress(OSError, ValueError):
        jvm.stdin.close()
    if not writing_archive:
        return
    try:
        jvm.wait(JVM_ARCHIVE_WAIT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait(SPARK_STOP_WAIT_S)


def stop_quietly(context: Any) -> None:
    """`context.stop()`, whose py4j call fails once its JVM was killed (`SparkStarting.stop`): nothing to say."""
    from py4j.protocol import Py4JError

    with contextlib.suppress(Py4JError, ConnectionError):
        context.stop()
