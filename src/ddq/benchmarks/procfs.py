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
    """Live processes (this one aside) whose command line or environment names `text`."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            for part in ("cmdline", "environ"):
                with open(f"/proc/{pid}/{part}", "rb") as handle:
                    if text.encode() in handle.read():
                        found.append(int(pid))
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
            continue
    return [pid for pid in found if pid != os.getpid()]


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
