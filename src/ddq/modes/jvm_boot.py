"""Spark's JVM for a run on a local master, booted while the run's settings are checked.

`ddq train` checks a run's settings before anything starts (`ddq.preflight`), and those checks import
torch: most of a second in which the JVM that Spark's context needs could boot on another core. A local
master's JVM reaches nothing beyond this host until its context is made, so a distributed run on one
launches it (pyspark's `launch_gateway`) on a thread as the checks begin, holds what it prints until the
run folder exists, and kills it when a check fails: the mistake is still one line, and nothing is left
running or written. The context is made once the checks pass (`ddq.modes.spark.SparkStarting`). A
two-worker LunarLander-v3 run's job then started 0.7-0.9 s sooner (3.5-3.8 s after the command against
4.2-4.4 s, 2026-11-29, 2 cores); booting the context too gained nothing more there, as the JVM and the
checks then share the cores for longer. A cluster master is reached only after the checks (its address is
one of them), and spark-submit's JVM exists already: neither is booted early.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO


class HeldOutput:
    """A child process's output, read from a pipe on a thread of its own: held in memory until `write_to`
    names a file, which then gets it and everything after; dropped by `drop`."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.lock = threading.Lock()
        self.held: list[bytes] | None = []  # None once written out or dropped
        self.file: BinaryIO | None = None
        self.ended = False
        threading.Thread(target=self._pump, name="jvm-output", daemon=True).start()

    def _pump(self) -> None:
        """Reads to the end whatever happens to the file: a pipe left unread would stop the child once full."""
        with os.fdopen(self.read_end, "rb", buffering=0) as pipe:
            for chunk in iter(lambda: pipe.read(1 << 16), b""):
                with self.lock:
                    if self.file is not None:
                        try:
                            self.file.write(chunk)
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
        the output is dropped from then on)."""
        with self.lock:
            held, self.held = self.held, None
            if held is None:
                return
            self.file = open(path, "ab", buffering=0)  # noqa: SIM115  (closed by the pump, at the output's end)
            try:
                self.file.write(b"".join(held))
            except OSError:
                self._close()
                raise
            if self.ended:
                self._close()

    def drop(self) -> None:
        with self.lock:
            self.held = None

    def _close(self) -> None:
        if self.file is not None:
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
        from pyspark.java_gateway import launch_gateway  # imported already, with the conf's pyspark

        try:
            self.launched = launch_gateway(self.conf, {"stderr": self.output.write_end})
        except BaseException as error:  # raised where the context is made
            self.error = error
        finally:
            self.output.child_started()

    def gateway(self, log_path: Path | None) -> Any:
        """The JVM's py4j gateway, once launched (an error in launching it is raised here)."""
        self.thread.join()
        if log_path is None:
            self.output.drop()
        else:
            self.output.write_to(log_path)
        if self.error is not None:
            raise self.error
        return self.launched

    def kill(self) -> None:
        """Ends the JVM (waiting for its launch first: pyspark hands over its process only then) and drops
        its output. It wrote nothing: Java writes its class-data archive only as it exits by itself."""
        self.thread.join()
        self.output.drop()
        if self.launched is None:
            return
        with contextlib.suppress(Exception):  # its py4j connection, which nothing used
            self.launched.close()
        process = self.launched.proc
        with contextlib.suppress(OSError):
            process.kill()
        process.wait()
