"""A booting JVM's output (`ddq.spark.jvm_boot.HeldOutput`), with real child processes writing to its pipe: held
until the run folder exists, never left unread (a full pipe would stop the JVM), and a full disk loses the log,
not the run. `BootingJvm` with a Python child standing in for the JVM pyspark launches: killed and reaped, or
its failed launch raised where the gateway is asked for, its output kept. A launch that never answers (a
Spark whose launcher hangs, in a Spark folder of the test's) is ended by `kill` and at the bound of a run's
Spark start. (Booting and killing a real JVM: tests/test_bad_input.py and every local distributed run.)"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark import java_gateway

from ddq.processes import alive
from ddq.spark import start
from ddq.spark.context import SparkJobFailed, spark_conf
from ddq.spark.jvm_boot import BootingJvm, HeldOutput
from ddq.spark.start import SparkStarting

MORE_THAN_A_PIPE = 300_000  # a Linux pipe holds 64 KiB: a writer past that waits for a reader


def child_writing(output: HeldOutput, code: str) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", code], stderr=output.write_end, stdin=subprocess.PIPE)
    output.child_started()
    return child


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_output_is_held_until_the_log_exists_then_all_of_it_goes_there(tmp_path: Path):
    output = HeldOutput()
    child = child_writing(output, f"import sys; sys.stderr.write('a' * {MORE_THAN_A_PIPE}); sys.stderr.flush(); "
                                  "sys.stdin.read(); sys.stderr.write('after')")
    wait_for(lambda: sum(map(len, output.held or [])) == MORE_THAN_A_PIPE)  # read while no file exists
    log = tmp_path / "spark.log"
    output.write_to(log)
    child.communicate(b"")  # its standard input ends: it writes once more, then exits
    wait_for(lambda: output.ended and output.file is None)  # the pump closed the log at the output's end
    assert log.read_text() == "a" * MORE_THAN_A_PIPE + "after"


def test_dropped_output_is_still_read_to_its_end(tmp_path: Path):
    output = HeldOutput()
    output.drop()
    child = child_writing(output, f"import sys; sys.stderr.write('b' * {MORE_THAN_A_PIPE})")
    assert child.wait(timeout=30) == 0  # not stopped by a full pipe
    wait_for(lambda: output.ended)
    output.write_to(tmp_path / "spark.log")  # too late: nothing held, nothing written
    assert not (tmp_path / "spark.log").exists()


def test_a_full_disk_loses_the_log_but_the_output_is_still_read():
    output = HeldOutput()
    child = child_writing(output, f"import sys; sys.stderr.write('c' * 100); sys.stderr.flush(); sys.stdin.read(); "
                                  f"sys.stderr.write('d' * {MORE_THAN_A_PIPE})")
    wait_for(lambda: output.held == [b"c" * 100])
    with pytest.raises(OSError):
        output.write_to(Path("/dev/full"))  # every write fails with "No space left on device"
    child.communicate(b"", timeout=30)  # its later output is read and dropped: the child ends
    assert child.returncode == 0
    wait_for(lambda: output.ended)


def stand_in_jvm(code: str, fails: bool = False):
    """pyspark's `launch_gateway`, with a Python child in the JVM's place: its stderr where ddq says."""
    children: list[subprocess.Popen] = []

    def launch(conf, popen_kwargs):
        child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stderr=popen_kwargs["stderr"])
        children.append(child)
        if fails:
            child.wait(timeout=30)
            raise RuntimeError("Java gateway process exited before sending its port number")
        return SimpleNamespace(proc=child, close=lambda: None)

    return launch, children


def test_a_booted_jvm_is_killed_and_reaped_and_what_it_printed_dropped(monkeypatch):
    launch, children = stand_in_jvm("import sys; sys.stderr.write('booting'); sys.stderr.flush(); sys.stdin.read()")
    monkeypatch.setattr(java_gateway, "launch_gateway", launch)
    booting = BootingJvm(conf={})
    wait_for(lambda: booting.output.held == [b"booting"])
    booting.kill()
    assert children[0].returncode is not None  # ended and reaped: no zombie
    wait_for(lambda: booting.output.ended)
    assert booting.output.held is None


def test_a_failed_launch_is_raised_where_the_gateway_is_asked_for_and_its_output_kept(monkeypatch, tmp_path: Path):
    launch, _ = stand_in_jvm("import sys; sys.stderr.write('Error: no Java found'); sys.exit(1)", fails=True)
    monkeypatch.setattr(java_gateway, "launch_gateway", launch)
    booting = BootingJvm(conf={})
    with pytest.raises(RuntimeError, match="exited before sending its port"):
        booting.gateway(tmp_path / "spark.log")
    wait_for(lambda: booting.output.ended)
    assert (tmp_path / "spark.log").read_text() == "Error: no Java found"
    booting.kill()  # nothing launched: nothing to end


LAUNCHER = "ddq-test-launcher-that-never-answers"  # on its command line, where the fixture's teardown looks


@pytest.fixture
def hanging_spark(request, tmp_path: Path, monkeypatch) -> Iterator[Path]:
    """A Spark folder whose launcher (what pyspark runs as the JVM) notes its PID and never answers: what
    pyspark waits on for good. It ignores SIGTERM (the SIGKILL that follows takes 5 s) unless the test's
    parameter says it need not. Yields the PID file; a launcher that outlived its test is killed."""
    ignored = "signal.SIG_IGN" if getattr(request, "param", True) else "signal.SIG_DFL"
    spark_home = tmp_path / "spark"
    (spark_home / "bin").mkdir(parents=True)
    launcher = spark_home / "bin" / "spark-submit"
    pid_file = tmp_path / "launcher.pid"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import os, pathlib, signal, time; "
                        f"signal.signal(signal.SIGTERM, {ignored}); "
                        f"pathlib.Path(\"{pid_file}\").write_text(str(os.getpid())); time.sleep(600)' {LAUNCHER}\n")
    launcher.chmod(0o755)
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # any class-data archive of a conf's: here
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # what a start without a booted JVM would set
    yield pid_file
    pid = pid_file.read_text() if pid_file.exists() else ""
    with contextlib.suppress(OSError):
        if pid and LAUNCHER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(int(pid), signal.SIGKILL)


def launcher_pid(pid_file: Path) -> int:
    wait_for(lambda: pid_file.exists() and pid_file.read_text())
    return int(pid_file.read_text())


def test_a_launch_that_never_answers_is_ended_by_kill(hanging_spark: Path):
    booting = BootingJvm(conf={})
    pid = launcher_pid(hanging_spark)
    booting.kill()  # waited for the launch to end, for good, before
    assert not booting.thread.is_alive() and booting.launched is None
    assert not alive(pid)  # SIGTERM ignored: SIGKILLed, and reaped


@pytest.mark.parametrize("hanging_spark", [False], indirect=True, ids=["ending-at-sigterm"])
@pytest.mark.parametrize("booted", [True, False], ids=["booted-jvm", "launched-by-the-start"])
def test_a_spark_start_whose_jvm_never_answers_ends_at_its_bound(booted: bool, hanging_spark: Path, tmp_path: Path,
                                                                 monkeypatch):
    """What a run's driver waits on (`SparkStarting.result`): a JVM that has not answered by its bound is ended,
    and the start fails in one line (its bound lowered from JVM_ANSWER_MIN_S to the test's stall_timeout).
    A local master's JVM is booted during the checks; a cluster master's is launched by the start itself."""
    monkeypatch.setattr(start, "JVM_ANSWER_MIN_S", 0.0)
    conf = spark_conf(None, "ddq-test", None, None)
    starting = SparkStarting(None, "ddq-test", tmp_path / "spark.log", None, None, 2, lambda context: None,
                             booted=BootingJvm(conf) if booted else None)
    pid = launcher_pid(hanging_spark)
    with pytest.raises(SparkJobFailed, match=r"^Spark's JVM did not answer within 1 s and was ended: .*spark.log"):
        starting.result(timeout=1)
    assert not alive(pid)
    starting.stop()
    assert not starting.thread.is_alive()  # its wait for the gateway has ended
