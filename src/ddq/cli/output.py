"""The command's output when its reader leaves first: `ddq train ... | tee log`, where the Ctrl-C that stops
the run also ends tee, and the next line printed raised BrokenPipeError in the middle of the run's stop (no
summary, no learning curve, exit 141). Written to /dev/null from then on, the command goes on to its end."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class ReaderProofStream:
    """`stream` (sys.stdout or sys.stderr), whose writes go to /dev/null once its reader has gone."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        """Points the stream's file descriptor at /dev/null: what its buffer still holds, and everything
        after, is written there (the interpreter's own flush at exit included, which would end in status 120)."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)
        with contextlib.suppress(BrokenPipeError):  # a buffer that had started its write to the pipe
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer, ...: the stream's own
        return getattr(self._stream, name)


def _has_descriptor(stream: TextIO) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, io.UnsupportedOperation):  # a test's captured output, a notebook's
        return False


@contextlib.contextmanager
def reader_proof_output() -> Iterator[None]:
    """sys.stdout and sys.stderr made reader-proof while the command runs (streams without a file descriptor
    stay as they are), flushed and given back after."""
    originals = sys.stdout, sys.stderr
    proof = [ReaderProofStream(s) if _has_descriptor(s) else s for s in originals]
    sys.stdout, sys.stderr = proof
    try:
        yield
    finally:
        try:
            for stream in proof:
                stream.flush()
        finally:  # a flush that fails otherwise (a full disk) leaves the streams as they were, and is raised
            sys.stdout, sys.stderr = originals
