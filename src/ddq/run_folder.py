"""A run's folder on disk: its metrics log (metrics.jsonl), its summary.json, and files written whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

Writer = bytes | Callable[[BinaryIO], object]  # the bytes, or a function that writes to the open file it is given


def write_whole(path: str | Path, data: Writer) -> Path:
    """Writes `data` to `path` whole or not at all: into a temporary file beside it, flushed to disk, then
    renamed over `path` (a rename is atomic within a file system), and the folder's entry flushed too. A
    crash, a kill or a full disk leaves the previous file as it was, and no temporary file behind. A write
    that fails raises OSError naming `path`."""
    return write_together([(Path(path), data)])[0]


def write_together(files: list[tuple[Path, Writer]]) -> list[Path]:
    """Writes each (path, data) whole, and none unless every one was written: all go to temporary files
    first, then each is renamed over its path in order (a kill between two renames is the one moment that
    leaves one new beside one old; put last the file that says which others it goes with)."""
    written: list[tuple[str, Path]] = []
    try:
        for path, data in files:
            written.append((_write_temporary(path, data), path))
        for temporary, path in written:
            os.replace(temporary, path)
    except BaseException:
        for temporary, _ in written:
            Path(temporary).unlink(missing_ok=True)
        raise
    for folder in {path.parent for _, path in written}:
        _sync_folder(folder)
    return [path for _, path in written]


def _write_temporary(path: Path, data: Writer) -> str:
    """A temporary file beside `path` holding `data`, flushed to disk; OSError naming `path` if it fails."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_UMASK)  # mkstemp's file is its owner's alone: give it open()'s mode
        with os.fdopen(handle, "wb") as file:
            if isinstance(data, bytes):
                file.write(data)
            else:
                data(file)
            file.flush()
            os.fsync(file.fileno())
    except (OSError, RuntimeError) as error:  # torch.save reports a failed write as RuntimeError
        Path(temporary).unlink(missing_ok=True)
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
        failure = OSError(f"cannot write {path}: {reason}")  # the user's one line: no "[Errno 28]" before it
        failure.errno = getattr(error, "errno", None) or errno.EIO
        raise failure from error
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return temporary


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some network and FUSE file systems refuse to sync a folder
        handle = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(handle)
        finally:
            os.close(handle)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()  # read once: umask can only be read by setting it


def plain(value: Any) -> Any:
    """`value`, or None for a float JSON cannot hold (NaN, infinities)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLog:
    """Appends metric points to `run_dir/metrics.jsonl`; flushed so a dashboard can tail it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")

    def write(self, kind: str, **values: Any) -> None:
        point = {"kind": kind, **{k: plain(v) for k, v in values.items()}}
        try:
            self._file.write(json.dumps(point) + "\n")
            self._file.flush()
        except OSError as error:  # a full disk: say which file, in the user's one line
            raise OSError(f"cannot write {self._file.name}: {error.strerror or error}") from error

    def write_summary(self, summary: dict[str, Any]) -> Path:
        return write_summary(self.run_dir, summary)

    def close(self) -> None:
        self._file.close()


def write_summary(run_dir: str | Path, summary: dict[str, Any]) -> Path:
    """`run_dir/summary.json`, written whole."""
    text = json.dumps({k: plain(v) for k, v in summary.items()}, indent=2) + "\n"
    return write_whole(Path(run_dir) / "summary.json", text.encode())


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every point of `run_dir/metrics.jsonl`, in order."""
    with open(Path(run_dir) / "metrics.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
