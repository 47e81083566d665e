"""Child processes that never outlive their parent, the supervisor that watches them, and the allocator
settings large messages want."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

RESTART_WINDOW_S = 600.0  # what restarted its most times within this long ends the run at its next failure
# Messages of tens of megabytes: glibc would hand each one fresh mmapped pages (a page fault per
# 4 KiB, several times the cost of the copy itself) and return them at once; these keep the heap.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**31)}


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name and sys.platform.startswith("linux") else None


def tune_malloc() -> None:
    """MALLOC_ENV's settings for this running process (glibc reads the variables only at start)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, 2**30)
        libc.mallopt(_M_TRIM_THRESHOLD, 2**31)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _background() -> None:  # runs in the child between fork and exec
    _die_with_parent()
    # SCHED_IDLE: runs only on CPU time nothing else wants, and yields the moment a worker wakes. Not so
    # where the kernel groups tasks by session (autogroup, /proc/sys/kernel/sched_autogroup_enabled: on by
    # default on many distributions): each session then shares a core as a whole, and this process leads a
    # session of its own, so it takes a session's share. Measured on this project's machine (2026-11-28):
    # a busy SCHED_IDLE process and a busy normal one pinned to one core got 2.06 CPU-seconds each in 4 s.
    # Lowering the session's own priority (/proc/self/autogroup) would mend that, but while workers keep every
    # core busy Celery's start and evaluations, and the dashboard's start, would then wait for the run's end.
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def spawn(command: Sequence[str], log_path: Path | None = None, env: dict[str, str] | None = None,
          cwd: str | Path | None = None, background: bool = False, core: int | None = None,
          stdin_text: str | None = None) -> subprocess.Popen:
    """Starts `command` so that it gets SIGTERM when this process dies, however it dies (Linux).

    `background` lowers its CPU priority: jobs that babysit training (evaluation, the dashboard)
    then run on the time the workers leave idle rather than on theirs. `core` pins it (and every
    thread it will start) to that CPU core. `stdin_text`: written to its standard input, which is then
    closed (settings that must not appear on a command line)."""
    full_env = dict(os.environ, **MALLOC_ENV, **(env or {}))

    def prepare() -> None:  # runs in the child between fork and exec
        _background() if background else _die_with_parent()
        if core is not None:
            os.sched_setaffinity(0, {core})

    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_path, "ab")) if log_path else subprocess.DEVNULL
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL if stdin_text is None else subprocess.PIPE,
                                   stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd, preexec_fn=prepare,
                                   start_new_session=True)
    if stdin_text is not None and process.stdin is not None:
        with process.stdin:
            process.stdin.write(stdin_text.encode())
    return process


def alive(pid: int) -> bool:
    """Whether a process `pid` exists (another user's counts: signal 0 is refused it, not missed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    return True


def stop(process: subprocess.Popen, timeout: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after `timeout`; returns the exit code. What the process forked is ended with
    it: `spawn` makes each process lead a group of its own, and a child outlives a SIGKILLed parent (Celery's
    embedded beat did, its worker killed mid-task after the warm shutdown's wait, and a prctl death signal is
    not inherited across fork)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if os.getpgid(0) != process.pid:  # never this process's own group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # what is left of its group: orphans by now
    return process.returncode


class ProcessFailed(RuntimeError):
    """A process the run cannot go on without died, and was not (or no longer) restarted."""


@dataclass
class RestartIntensity:
    """An Erlang supervisor's intensity and period: at most `most` restarts within `period_s`, so that what
    keeps failing ends the run, and what fails now and then over hours does not."""

    most: int = 3
    period_s: float = RESTART_WINDOW_S
    clock: Callable[[], float] = time.monotonic
    at: list[float] = field(default_factory=list)  # clock times of the restarts within the period

    def allows(self) -> bool:
        """Whether one more restart is allowed now."""
        now = self.clock()
        self.at = [at for at in self.at if now - at < self.period_s]
        return len(self.at) < self.most

    def record(self) -> int:
        """Counts a restart now; returns the restarts within the period, this one included."""
        self.at.append(self.clock())
        return len(self.at)

    def within(self) -> str:
        """" within 10 minutes", for a line that counts restarts."""
        return f" within {self.period_s / 60:.0f} minutes"


@dataclass
class Watched:
    name: str
    process: subprocess.Popen
    intensity: RestartIntensity
    log: Path | None = None
    restart: Callable[[], subprocess.Popen] | None = None  # None: it cannot be restarted
    essential: bool = True  # False: the run goes on without it (Celery, the dashboard)
    restarts: int = 0
    gone: bool = False
    on_gone: Callable[[], None] | None = None  # a promptly watched process's: called once it stays dead


class Supervisor:
    """The driver's watch over the processes it started.

    `check()` (called every few hundred milliseconds) notices a death and says so in
    one line; a process with a `restart` is started again, up to `max_restarts`
    times within `window_s` (an Erlang supervisor's intensity and period: one that
    keeps dying ends the run, one that dies now and then over hours does not);
    an essential one that is gone for good raises ProcessFailed; any other
    is left gone with a warning. Once the run is stopping, a clean exit is expected.
    A process watched `promptly` (the run's Redis, which every other waits on) is
    restarted by a thread of its own within PROMPT_S, not at the next check."""

    PROMPT_S = 0.05

    def __init__(self, max_restarts: int = 3, window_s: float = RESTART_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic):
        self.max_restarts, self.window_s, self.clock = max_restarts, window_s, clock
        self.watched: list[Watched] = []
        self.lock = threading.Lock()  # one restart at a time, from a check or a prompt thread
        self.closing = threading.Event()

    def watch(self, name: str, process: subprocess.Popen, log: Path | None = None,
              restart: Callable[[], subprocess.Popen] | None = None, essential: bool = True,
              promptly: bool = False, on_gone: Callable[[], None] | None = None) -> Watched:
        entry = Watched(name, process, RestartIntensity(self.max_restarts, self.window_s, self.clock), log, restart,
                        essential, on_gone=on_gone)
        self.watched.append(entry)
        if promptly and restart is not None:
            threading.Thread(target=self._keep, args=(entry,), name=f"keep {name}", daemon=True).start()
        return entry

    def close(self) -> None:
        """Ends the prompt threads (after a restart under way): what stops now is being stopped, not dying."""
        self.closing.set()
        with self.lock:
            pass

    def _keep(self, entry: Watched) -> None:
        while not self.closing.wait(self.PROMPT_S):
            with self.lock:
                if self.closing.is_set() or entry.gone or entry.process.poll() is None:
                    continue
                if not entry.intensity.allows():
                    if entry.on_gone is not None:
                        entry.on_gone()  # before check() ends the run: nothing need wait for it any more
                    return
                self._restart(entry)

    def _restart(self, entry: Watched) -> None:
        assert entry.restart is not None
        entry.restarts += 1
        count = entry.intensity.record()
        see = f"; see {entry.log}" if entry.log else ""
        _say(f"ddq: {entry.name} (pid {entry.process.pid}) died ({how_it_ended(entry.process.returncode)}); restarting "
             f"it ({count} of {entry.intensity.most}){see}")
        try:
            entry.process = entry.restart()
        except Exception as error:  # noqa: BLE001 - it stays dead: the next look tries again, or ends the run
            _say(f"ddq: {entry.name} could not be restarted: {(str(error).splitlines() or [repr(error)])[0]}")

    def check(self, stopping: bool = False) -> None:
        with self.lock:
            for entry in self.watched:
                self._check(entry, stopping)

    def _check(self, entry: Watched, stopping: bool) -> None:
        if entry.gone or entry.process.poll() is None:
            return
        code, pid = entry.process.returncode, entry.process.pid
        see = f"; see {entry.log}" if entry.log else ""
        if stopping and code == 0:
            entry.gone = True
        elif entry.restart is not None and entry.intensity.allows() and not stopping:
            self._restart(entry)
        elif entry.essential:
            entry.gone = True
            within = entry.intensity.within() if entry.intensity.at else ""
            after = f" after {len(entry.intensity.at)} restarts{within}" if entry.restarts else ""
            raise ProcessFailed(f"{entry.name} (pid {pid}) died ({how_it_ended(code)}){after}{see}")
        else:
            entry.gone = True
            _say(f"ddq: warning: {entry.name} (pid {pid}) exited ({how_it_ended(code)}); "
                 f"the run goes on without it{see}")

    def restarts(self) -> dict[str, int]:
        """Restarts so far, by process name (only those restarted)."""
        return {entry.name: entry.restarts for entry in self.watched if entry.restarts}


def exit_on_sigterm() -> None:
    """Makes SIGTERM end this process as an exception does (exit code 143), so that what its `with` blocks
    and `finally` clauses hold is cleaned up on the way out: by default Python ends at once, and leaves
    behind what it started (a bench's test hosts, a dashboard's private Redis). A SIGTERM that comes while
    that cleanup runs is let pass: one raised in it cut it short (`timeout` passing on the SIGTERM it got to
    a bench that a `pkill` had sent one too left its test hosts running)."""
    def leave(*_: object) -> None:
        signal.signal(signal.SIGTERM, lambda *_: None)  # a Python handler: the children it starts keep SIGTERM's
        sys.exit(143)

    signal.signal(signal.SIGTERM, leave)


def how_it_ended(code: int) -> str:
    """A child's return code in words: "exit code 2", or "killed by SIGKILL" for a signal."""
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def process_started_at() -> float:
    """When this process started, by the wall clock (Linux's /proc), else now."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return time.time()
