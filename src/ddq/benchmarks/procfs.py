"""Processes as /proc shows them, for the tests and benches that kill ddq's parts by PID and look for
what a run left running."""

from __future__ import annotations

import os


def parent_and_command(pid: int) -> tuple[int, bytes]:
    """A live process's parent PID and its command line (NUL-separated); (0, b"") once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return parent, cmdline.read()
    except (OSError, ValueError, IndexError):
        return 0, b""


def child_named(parent: int, name: str, missing_ok: bool = False) -> int | None:
    """The PID of `parent`'s child process whose command line mentions `name` (None if `missing_ok`)."""
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        ppid, command = parent_and_command(pid)
        if ppid == parent and name.encode() in command:
            return pid
    if missing_ok:
        return None
    raise LookupError(f"no child of {parent} runs {name}")


def processes_mentioning(text: str) -> list[int]:
    """Live processes (this one aside) whose command line or environment names `text`, or whose working folder
    or open files do (a redis-server takes its settings on stdin and rewrites its title: its folder, and
    the log its output goes to, are what name its run)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(text.encode() in _read(f"/proc/{pid}/{part}") for part in ("cmdline", "environ")) or \
                    any(text in target for target in _link_targets(pid)):
                found.append(int(pid))
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
    return [pid for pid in found if pid != os.getpid()]


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _link_targets(pid: str) -> list[str]:
    """Where a process's working folder and open file descriptors point, as /proc links them (one closed as
    they are read is left out)."""
    targets = []
    for link in (f"/proc/{pid}/cwd", *(f"/proc/{pid}/fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd"))):
        try:
            targets.append(os.readlink(link))
        except OSError:
            continue
    return targets


def command_of(pid: int, where: dict[int, str]) -> str:
    """The process's host (`where`: PID to test host), its parent and its command line, a JVM's by its main
    class."""
    parent, command = parent_and_command(pid)
    if not command:
        return f"{pid}: (gone)"
    words = command.decode(errors="replace").split("\0")
    if "-cp" in words:  # java -cp <classpath> [options] <main class> <arguments>
        words = [words[0], *(word for word in words[words.index("-cp") + 2:] if not word.startswith("-X"))]
    return f"{pid} on {where.get(pid, 'no test host')}, parent {parent}: " + " ".join(words)[:300]
