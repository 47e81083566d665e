"""Child processes that never outlive their parent, and the allocator settings large messages want."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

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
    try:  # SCHED_IDLE: runs only on CPU time nothing else wants, and yields the moment a worker wakes
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)


def spawn(command: Sequence[str], log_path: Path | None = None, env: dict[str, str] | None = None,
          cwd: str | Path | None = None, background: bool = False) -> subprocess.Popen:
    """Starts `command` so that it gets SIGTERM when this process dies, however it dies (Linux).

    `background` lowers its CPU priority: jobs that babysit training (evaluation, the dashboard)
    then run on the time the workers leave idle rather than on theirs."""
    full_env = dict(os.environ, **MALLOC_ENV, **(env or {}))
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(open(log_path, "ab")) if log_path else subprocess.DEVNULL
        return subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=full_env, cwd=cwd, preexec_fn=_background if background else _die_with_parent,
                                start_new_session=True)


def stop(process: subprocess.Popen, timeout: float = 10.0) -> int | None:
    """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
