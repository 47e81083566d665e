"""The supervisor against real child processes, killed by PID: restarts up to its limit, then ends the run."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest

from ddq.processes import ProcessFailed, Supervisor, spawn, stop

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def started():
    """Every process a test spawns; whatever the outcome, all of them are stopped."""
    processes = []

    def start():
        process = spawn(SLEEPER)
        processes.append(process)
        return process

    yield start
    for process in processes:
        stop(process, timeout=5)


def kill(process) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait()


def test_a_shard_that_keeps_dying_is_restarted_three_times_then_ends_the_run(started, capsys):
    supervisor = Supervisor(max_restarts=3)
    entry = supervisor.watch("parameter-server shard 0", started(), restart=started)
    for restart in (1, 2, 3):
        dead = entry.process
        kill(dead)
        supervisor.check()
        assert entry.process is not dead and entry.process.poll() is None  # a new process, running
        assert f"shard 0 (pid {dead.pid}) died (killed by SIGKILL); restarting it ({restart} of 3)" in \
            capsys.readouterr().err
    assert supervisor.restarts() == {"parameter-server shard 0": 3}
    last = entry.process
    kill(last)
    with pytest.raises(ProcessFailed, match=rf"shard 0 \(pid {last.pid}\) died \(killed by SIGKILL\) after 3 restarts"):
        supervisor.check()
    supervisor.check()  # said once: a process gone for good is not reported again


def test_a_service_the_run_can_do_without_is_reported_once_and_left_gone(started, capsys):
    supervisor = Supervisor()
    celery = started()
    supervisor.watch("the Celery worker", celery, essential=False)
    supervisor.check()
    assert capsys.readouterr().err == ""  # alive: nothing to say
    kill(celery)
    supervisor.check()
    supervisor.check()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "warning: the Celery worker" in err[0] and "goes on without it" in err[0]
    assert supervisor.restarts() == {}


def test_once_the_run_is_stopping_a_clean_exit_is_not_a_failure_but_a_crash_is(started, capsys):
    supervisor = Supervisor()
    clean = spawn([sys.executable, "-c", "pass"])
    clean.wait()
    supervisor.watch("parameter-server shard 0", clean, restart=started)
    supervisor.check(stopping=True)  # ended cleanly while the run stops: neither restarted nor an error
    assert capsys.readouterr().err == "" and supervisor.restarts() == {}

    crashed = started()
    supervisor.watch("parameter-server shard 1", crashed, restart=started)
    kill(crashed)
    with pytest.raises(ProcessFailed, match="shard 1"):
        supervisor.check(stopping=True)  # a stopping run restarts nothing, so a crash then ends it


def test_restarts_are_limited_within_a_window_so_a_long_run_outlives_rare_deaths(started, capsys):
    """An Erlang supervisor's intensity and period: 3 restarts within the window, then the run ends; deaths
    spread wider than the window are each restarted (the supervisor's clock is the test's)."""
    now = [0.0]
    supervisor = Supervisor(max_restarts=3, window_s=600, clock=lambda: now[0])
    entry = supervisor.watch("redis-server", started(), restart=started)
    for _ in range(5):  # one death every 4 minutes: never 3 restarts within 10
        kill(entry.process)
        supervisor.check()
        assert entry.process.poll() is None
        now[0] += 240
    assert supervisor.restarts() == {"redis-server": 5} and "restarting it (3 of 3)" in capsys.readouterr().err
    now[0] += 600  # a quiet window; then three deaths within a minute, the window's limit
    for _ in range(3):
        kill(entry.process)
        supervisor.check()
        now[0] += 10
    kill(entry.process)
    with pytest.raises(ProcessFailed, match="after 3 restarts within 10 minutes"):
        supervisor.check()


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for init to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _within(seconds: float, condition) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_stopping_a_process_ends_what_it_forked_when_it_must_be_killed():
    """A parent that ignores SIGTERM (as Celery's worker finishing a task does) is killed after the wait, and
    its forked child (as Celery's embedded beat) goes with it rather than living on under init."""
    parent = spawn([sys.executable, "-c", "import os, signal, time\n"
                    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                    "os.fork()\n"
                    "time.sleep(600)"])
    listed: list[str] = []
    try:
        def forked() -> bool:
            with open(f"/proc/{parent.pid}/task/{parent.pid}/children") as children:
                listed[:] = children.read().split()
            return bool(listed)

        assert _within(60, forked)
        assert stop(parent, timeout=0.5) == -signal.SIGKILL
        assert _within(10, lambda: not _alive(int(listed[0])))
    finally:
        for pid in listed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        if parent.poll() is None:  # (an assertion above failed before the stop)
            parent.kill()
            parent.wait()


def test_nested_stop_windows_share_the_first_signal_and_an_ignored_one_stays_ignored():
    """A run's window inside the command's (`ddq.api.execute`): the first signal in either is the stop, the
    next aborts wherever it comes; SIGHUP that the process was started to ignore (nohup) is never taken."""
    from ddq.lifecycle import StopSignals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals() as outer:
            with StopSignals() as inner:
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGHUP)  # ignored: not a second signal
            assert inner.received == "SIGTERM" and inner.exit_code() == 143
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)  # the second of the command's: aborts
        assert outer.received == "SIGTERM" and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
