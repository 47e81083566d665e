"""Spark's JVM for a run on a local master, booted while the run's settings are checked.

`ddq train` checks a run's settings before anything starts (`ddq.preflight`), and those checks import
torch: most of a second in which the JVM that Spark's context needs could boot on another core. A local
master's JVM reaches nothing beyond this host until its context is made, so a distributed run that names
no master launches it (pyspark's `launch_gateway`) on a thread as the checks begin, holds what it prints
until the run folder exists, and ends it when a check fails: the mistake is still one line, and no
process is left. The context is made once the checks pass (`ddq.spark.start.SparkStarting`). A two-worker
LunarLander-v3 run's Python workers were then warm 3.4-3.7 s after the command against 4.2-4.4 s, and its
first update came about 0.8 s sooner (2026-11-29, 2 cores); booting the context too gained nothing more
there, as the JVM and the checks then share the cores for longer. A cluster master is reached only after
the checks (its address is one of them), and spark-submit's JVM exists already: neither is booted early.
A JVM that never answers as it launches is ended from another thread (`end_launch`): pyspark waits on it
for good.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from ddq.processes import stop
from ddq.run_folder import cannot_write
from ddq.spark.jvm_archive import java_options, writing_to

# How long this process, as it exits, waits for the rest of the JVM's output: the JVM exits within a second
# or two of its run's end (`ddq.spark.start.end_stopped_jvm`), mostly while the run writes its summary.
OUTPUT_TAIL_WAIT_S = 3.0
JVM_END_WAIT_S = 5.0  # how long a JVM told to end (SIGTERM) may take before it is killed
LAUNCH_END_WAIT_S = 15.0  # how long `end_launch` may take: the launch's process started, SIGTERM, SIGKILL


def launch_jvm(conf: Any, stderr: Any = None) -> Any:
    """pyspark's `launch_gateway` for `conf` (`stderr`: where the JVM prints), the JVM in a session of its own.
    A signal for the command's whole process group (`timeout`, a batch scheduler at its time limit, `kill --
    -PGID`) then reaches the driver alone, which stops the run as it does for its own SIGTERM and Spark after
    it: the JVM and its Python workers had died at once, and the run ended in a traceback with no summary. The
    JVM still ends with the driver, however it ends: it exits when its stdin, the driver's pipe, closes."""
    from pyspark.java_gateway import launch_gateway  # imported already, with the conf's pyspark

    return launch_gateway(conf, {"start_new_session": True, **({} if stderr is None else {"stderr": stderr})})


def end_launch(launching: threading.Thread, conf: Any) -> bool:
    """Ends the JVM for `conf` that `launch_jvm`, on the thread `launching`, is starting and that has not
    answered yet (pyspark's launch waits on it for good: a JVM stuck resolving spark.jars.packages, say), and
    drops the class-data archive it wrote as it exited. The processes that thread started and has not reaped
    (the launcher script, the JVM it became) each lead a session of their own, once started: each session
    gets SIGTERM, and SIGKILL if the thread has not seen it end within JVM_END_WAIT_S. pyspark's launch then
    raises on its thread. Whether the launch has ended, LAUNCH_END_WAIT_S at most from now: not where the
    kernel lists no thread's children (/proc/self/task/TID/children: Linux's, CONFIG_PROC_CHILDREN), nor
    where the launch runs no process (spark-submit's JVM, there already) and waits on something else."""
    deadline = time.monotonic() + LAUNCH_END_WAIT_S
    termed_at: float | None = None
    while launching.is_alive() and time.monotonic() < deadline:
        leaders = [pid for pid in unreaped_children(launching.native_id) if leads_a_session(pid)]
        if leaders and (termed_at is None or time.monotonic() - termed_at > JVM_END_WAIT_S):
            for pid in leaders:  # its group: the JVM, and whatever the launcher started
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGTERM if termed_at is None else signal.SIGKILL)
            termed_at = termed_at or time.monotonic()
        launching.join(0.1)
    if launching.is_alive():
        return False
    drop_archive(conf)
    return True


def unreaped_children(thread_id: int | None) -> list[int]:
    """The processes the thread `thread_id` (a native id, of this process) started and has not reaped."""
    try:
        return [int(pid) for pid in Path(f"/proc/self/task/{thread_id}/children").read_text().split()]
    except (OSError, ValueError):  # no such thread (it ended), or no such file (not Linux)
        return []


def leads_a_session(pid: int) -> bool:
    """Whether `pid` leads its own process group: a child started with start_new_session, once it has (a
    signal for its group sent between its fork and its setsid would miss it)."""
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


class HeldOutput:
    """A child process's output, read from a pipe on a thread of its own: held in memory until `write_to`
    names a file, which then gets it and everything after; dropped by `drop`."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.lock = threading.Lock()
        self.held: list[bytes] | None = []  # None once written out or dropped
        self.file: BinaryIO | None = None
        self.ended = False
        self.thread = threading.Thread(target=self._pump, name="jvm-output", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        """Reads to the end whatever happens to the file: a pipe left unread would stop the child once full."""
        with os.fdopen(self.read_end, "rb", buffering=0) as pipe:
            for chunk in iter(lambda: pipe.read(1 << 16), b""):
                with self.lock:
                    if self.file is not None:
                        try:
                            self.file.write(chunk)
                            self.file.flush()
                        except OSError:  # a full disk: the rest of the log is lost, the run goes on
                            self._close()
                    elif self.held is not None:
                        self.held.append(chunk)
        with self.lock:
            self.ended = True
            self._close()

    def child_started(self) -> None:
        """Closes this process's copy of the writing end (the child has its own): the pump then sees the
        child's end as its end."""
        with contextlib.suppress(OSError):
            os.close(self.write_end)

    def write_to(self, path: Path) -> None:
        """Sends what was held, and what follows, to `path` (an OSError opening or writing it is raised, and
        the output is dropped from then on). As this process exits it waits, OUTPUT_TAIL_WAIT_S at most, for
        the output's end: the pump is a daemon thread, which would otherwise stop with the last lines unread."""
        with self.lock:
            held, self.held = self.held, None
            if held is None:
                return
            self.file = open(path, "ab")  # noqa: SIM115  (closed by the pump, at the output's end)
            try:
                self.file.write(b"".join(held))
                self.file.flush()
            except OSError:
                self._close()
                raise
            if self.ended:
                self._close()
        atexit.register(self.thread.join, OUTPUT_TAIL_WAIT_S)

    def drop(self) -> None:
        with self.lock:
            self.held = None

    def _close(self) -> None:
        if self.file is not None:
            with contextlib.suppress(OSError):  # what a full disk kept it from flushing is lost
                self.file.close()
            self.file = None


class BootingJvm:
    """Spark's JVM for `conf`, launched on a thread now. `gateway(log_path)` waits for it, and sends what it
    printed, and prints from then on, to `log_path`; `kill()` ends it, and what it printed is dropped."""

    def __init__(self, conf: Any):
        self.conf = conf  # the one the context is made with: it names the class-data archive the JVM writes
        self.output = HeldOutput()
        self.launched: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._launch, name="jvm-boot", daemon=True)
        self.thread.start()

    def _launch(self) -> None:
        try:
            self.launched = launch_jvm(self.conf, self.output.write_end)
        except BaseException as error:  # raised where the context is made
            self.error = error
        finally:
            self.output.child_started()

    def gateway(self, log_path: Path | None) -> Any:
        """The JVM's py4j gateway, once launched (an error in launching it is raised here). A log that cannot
        be written (a full disk) is lost, not the run."""
        self.thread.join()
        try:
            if log_path is None:
                self.output.drop()
            else:
                self.output.write_to(log_path)
        except OSError as error:
            print(f"ddq: {cannot_write(str(log_path), error)}: Spark's log is lost", file=sys.stderr, flush=True)
        if self.error is not None:
            self.output.thread.join(OUTPUT_TAIL_WAIT_S)  # the JVM's last words, which say why, in the log first
            raise self.error
        return self.launched

    def kill(self) -> None:
        """Ends the JVM, whether it has answered yet or not (`end_launch`), and drops its output and what it
        wrote as it ended. A launch that cannot be ended (not on Linux) is left to end with this process: the
        JVM exits when its standard input, this process's pipe, closes."""
        launch_ended = end_launch(self.thread, self.conf)
        self.output.drop()
        if not launch_ended or self.launched is None:  # (None: ended as it launched, or failed to)
            return
        with contextlib.suppress(Exception):  # its py4j connection, which nothing used
            self.launched.close()
        end_unused_jvm(self.launched.proc, self.conf)


def end_unused_jvm(jvm: Any, conf: Any) -> None:
    """Ends the JVM process `jvm`, launched for `conf`, that made no context: SIGTERM, not SIGKILL, as its
    shutdown hook removes the temporary folder Spark's launcher made (killed, it left an empty spark-* folder
    at every mistake). It then writes its class-data archive too, of a JVM that made no context: dropped,
    with the class path noted beside it, not left for a later run to find."""
    stop(jvm, JVM_END_WAIT_S)
    drop_archive(conf)


def drop_archive(conf: Any) -> None:
    """Removes the class-data archive a JVM launched for `conf` wrote as it exited, and its class path."""
    if (archive := writing_to(java_options(conf))) is not None:
        for written in (Path(archive), Path(f"{archive}.classpath")):
            written.unlink(missing_ok=True)
